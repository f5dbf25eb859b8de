/*
 * jit_int.h - internals of the kernel JIT shared by jit*.c and its tests.
 *
 * The pipeline is: spec -> unit (generated source + compiler options + in-memory headers) -> key
 * (SHA-256 of everything that shapes the cubin) -> cache lookup -> on a miss, a backend compiles
 * the unit -> cache store -> driver load.  Backends sit behind eep_jit_backend_ops_t.
 */
#ifndef EEP_JIT_INT_H
#define EEP_JIT_INT_H

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "elastic/jit/jit.h"
#include "util/sha256.h"

#define EEP_JIT_MAX_OPTIONS 64
#define EEP_JIT_ENTRY_NAME  "eep_jit_entry"
/* A header changed this recently (seconds) is not memoised: see jit_source.c. */
#define EEP_JIT_MEMO_RACY_S 2

/* A header handed to the compiler from memory (NVRTC's prelude and libc shims). */
typedef struct {
    const char *name; /* as written in #include: "stdint.h", "linux/types.h" */
    const char *content;
} eep_jit_mem_header_t;

/* One instantiation unit, ready for a backend. */
typedef struct {
    eep_jit_backend_t           backend;  /* NVRTC or NVCC, never AUTO */
    char                       *source;   /* the generated translation unit (malloc) */
    char                        name[96]; /* its file name: "eep_jit_<key prefix>.cu" */
    const char                 *options[EEP_JIT_MAX_OPTIONS]; /* compiler flags, backend style */
    int                         n_options;
    char                       *option_buf;      /* storage of the option strings (malloc) */
    const char                 *include_dirs[8]; /* searched in this order after memory headers */
    int                         n_include_dirs;
    const eep_jit_mem_header_t *mem_headers;
    size_t                      n_mem_headers;
    char                        key[EEP_SHA256_HEX];
} eep_jit_unit_t;

typedef struct {
    const char *name; /* "nvrtc", "nvcc" */
    /* Add the compiler's identity to the key without running it. */
    eep_status_t (*identity)(eep_jit_t *jit, eep_sha256_t *hash);
    /* Flags specific to this backend (appended after the common ones). */
    const char *const *flags;
    /* Headers passed in memory (NULL/0: none). */
    const eep_jit_mem_header_t *mem_headers;
    size_t                      n_mem_headers;
    /* A line put first in the generated unit, or NULL. */
    const char *unit_prologue;
    /* Compile @p unit to a cubin (malloc'd into *cubin_p); the log (malloc, may be NULL) always. */
    eep_status_t (*compile)(eep_jit_t *jit, const eep_jit_unit_t *unit, void **cubin_p,
                            size_t *size_p, char **log_p);
} eep_jit_backend_ops_t;

extern const eep_jit_backend_ops_t eep_jit_nvrtc_ops;
extern const eep_jit_backend_ops_t eep_jit_nvcc_ops;

struct eep_jit_kernel {
    eep_jit_kernel_t *next;
    eep_jit_t        *jit;
    void             *ctx;        /* CUcontext it is loaded in */
    void             *module;     /* CUmodule */
    void             *function;   /* CUfunction */
    size_t            param_size; /* from cuFuncGetParamInfo, 0 if unknown */
    char              key[EEP_SHA256_HEX];
};

/* A header read before, reused while stat() says it is unchanged (see jit_source.c). */
typedef struct {
    char           *path;
    dev_t           dev;
    ino_t           ino;
    off_t           size;
    struct timespec mtime, ctime;
    uint8_t         digest[EEP_SHA256_BYTES];
    char           *text;
    size_t          len;
} eep_jit_memo_t;

typedef struct eep_jit_prefetch_item eep_jit_prefetch_item_t; /* jit_prefetch.c */

/* The most specs eep_jit_prefetch holds waiting (the one compiling not counted). */
#define EEP_JIT_PREFETCH_MAX 16

struct eep_jit {
    char              cache_dir[PATH_MAX]; /* <dir>: entries live in <dir>/v1 */
    char              source_root[PATH_MAX];
    char              nvcc[PATH_MAX]; /* "" when none was found */
    char              arch[64];
    char              nccl_include[PATH_MAX];
    char              cuda_home[PATH_MAX];
    char              cuda_include[PATH_MAX];
    char              cccl_include[PATH_MAX];
    eep_jit_backend_t backend; /* from EEP_JIT_BACKEND */
    int               keep_source;
    int               pch;  /* from EEP_JIT_PCH */
    pthread_mutex_t   lock; /* kernels list, identities */
    eep_jit_kernel_t *kernels;
    int               nvcc_identity_done;
    eep_status_t      nvcc_identity_status;
    uint8_t           nvcc_identity[EEP_SHA256_BYTES];
    pthread_mutex_t   memo_lock; /* header memo */
    eep_jit_memo_t   *memo;
    size_t            n_memo, cap_memo;
    int               memo_racy_s;              /* EEP_JIT_MEMO_RACY_S; tests lower it */
    uint64_t          n_compiles, n_cache_hits; /* eep_jit_counts (atomics) */
    /* background compiles (jit_prefetch.c), all under prefetch_lock */
    pthread_mutex_t          prefetch_lock;
    pthread_cond_t           prefetch_wake; /* worker: something queued, or stop */
    pthread_cond_t           prefetch_idle; /* waiters: queue empty and nothing compiling */
    pthread_t                prefetch_thread;
    int                      prefetch_started, prefetch_stop, prefetch_busy, prefetch_queued;
    eep_jit_prefetch_item_t *prefetch_queue;
    unsigned long            prefetch_done, prefetch_failed;
};

/* jit_nvrtc.c: remove the PCH folders under @p base of processes that are gone;
   @return how many. */
int eep_jit_nvrtc_pch_sweep(const char *base);

/* jit.c: a prefetch worker marks its thread; everyone else's compiles are foreground ones.
   @return ms since the process's last foreground compile ended (a large number when there was
   none), -1 while one runs. */
void   eep_jit_mark_worker_thread(void);
double eep_jit_foreground_quiet_ms(void);

/* A background compile starts only after foreground compiles have been quiet this long: a
   process's first kernels (dispatch, then combine) come one after the other, and NVRTC compiles
   are serialised (jit_nvrtc.c), so a background one in between would delay the next. */
#define EEP_JIT_PREFETCH_QUIET_MS 2000

/* jit_prefetch.c: the background worker's state, set up by create and torn down by destroy. */
void eep_jit_prefetch_init(eep_jit_t *jit);
void eep_jit_prefetch_shutdown(eep_jit_t *jit);

/* jit_source.c: unit generation and the cache key. */
/* The spec's defines, or NULL for a spec (of an older size) that ends before the field. */
const char  *eep_jit_spec_defines(const eep_jit_spec_t *spec);
eep_status_t eep_jit_unit_build(eep_jit_t *jit, const eep_jit_spec_t *spec, eep_jit_unit_t *unit_p);
void         eep_jit_unit_cleanup(eep_jit_unit_t *unit);
void         eep_jit_memo_cleanup(eep_jit_t *jit);
/* Hash the unit, every header it reaches, the compiler identity, flags, arch and NCCL version. */
eep_status_t                 eep_jit_unit_key(eep_jit_t *jit, eep_jit_unit_t *unit);
const eep_jit_backend_ops_t *eep_jit_backend_ops(eep_jit_backend_t backend);

/* jit_cache.c: entries are "<dir>/v1/<key>.cubin", a checked header followed by the cubin. */
eep_status_t eep_jit_cache_path(const eep_jit_t *jit, const char *key, const char *suffix,
                                char *path_p, size_t len);
/* EEP_OK with the payload; EEP_ERR_NOT_FOUND when absent; EEP_ERR_IO when corrupt (logged). */
eep_status_t eep_jit_cache_read(const char *path, void **cubin_p, size_t *size_p);
eep_status_t eep_jit_cache_write(const char *path, const void *cubin, size_t size);
/* Take / release the per-key lock (a flock on "<key>.lock"); bounded wait.  EEP_OK with
   *fd_p = -1 means "compile without it": its holder is a stopped process, or held it too long. */
eep_status_t eep_jit_cache_lock(const eep_jit_t *jit, const char *key, int *fd_p);
void         eep_jit_cache_unlock(int fd);
eep_status_t eep_jit_mkdirs(const char *path);

/* jit.c */
/* snprintf for paths: -1 (logged) when @p buf is too small. */
int eep_jit_pathf(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void eep_jit_set_last_log(const char *log);
/* Process-wide count of compiler runs (NVRTC compiles + nvcc executions), for tests. */
unsigned long eep_jit_compiler_runs(void);
void          eep_jit_count_compiler_run(void);
/* Keep @p text as <cache>/src/<key><suffix> (EEP_JIT_KEEP_SOURCE); logs and ignores failures. */
void eep_jit_keep_file(const eep_jit_t *jit, const char *key, const char *suffix, const char *text);

#endif /* EEP_JIT_INT_H */
