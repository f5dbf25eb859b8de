/*
 * jit.h - run-time compilation of kernels for the exact shape of a call.
 *
 * A kernel is a device function template in a header under the kernel source root (kernels/,
 * barrier/), taking one parameter struct by reference:
 *
 *     template <int NRanks, bool Parallel>
 *     __device__ void eep_barrier_body(const eep_barrier_params_t &p);
 *
 * eep_jit writes a small instantiation unit for a spec {header, function, template arguments,
 * parameter type}:
 *
 *     #include "barrier/barrier_kernel.cuh"
 *     extern "C" __global__ void __launch_bounds__(256) eep_jit_entry(const eep_barrier_params_t p)
 *     { eep_barrier_body<2, true>(p); }
 *
 * compiles it for sm_90 (NVRTC in process where the headers allow; nvcc as a subprocess where they
 * do not, e.g. NCCL 2.28.9's GIN headers), stores the cubin in an on-disk cache keyed by a hash of
 * everything that shapes it, and loads it with the driver API.  Compiling needs no GPU; loading and
 * launching do.  A warm lookup never runs a compiler.
 *
 * The key is a SHA-256 over the generated unit, every header it includes (found by scanning
 * #include lines recursively; headers inside the CUDA toolkit are covered by its path, version and
 * the compiler identity instead, NCCL's are always read), the compiler identity (the NVRTC library
 * file; nvcc, ptxas and cicc: size and mtime, never by running or loading them), flags, arch,
 * NCCL_VERSION_CODE and backend.  Entries are checked (magic, length, SHA-256) and rebuilt when
 * corrupt; concurrent compiles of one key, across processes, run once (a per-key flock).
 * Knobs (elastic/jit/jit_knobs.c): EEP_JIT_CACHE_DIR, EEP_JIT_BACKEND, EEP_JIT_NVCC,
 * EEP_JIT_SOURCE_ROOT, EEP_JIT_KEEP_SOURCE, EEP_JIT_ARCH.  All functions are thread-safe.
 */
#ifndef EEP_JIT_H
#define EEP_JIT_H

#include <stddef.h>
#include <stdint.h>

#include "eep/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eep_jit        eep_jit_t;        /* one per process or runtime; thread-safe */
typedef struct eep_jit_kernel eep_jit_kernel_t; /* a loaded kernel; owned by its eep_jit_t */

typedef enum {
    EEP_JIT_BACKEND_AUTO = 0, /* NVRTC unless the spec needs nvcc (needs_gin) */
    EEP_JIT_BACKEND_NVRTC,
    EEP_JIT_BACKEND_NVCC,
} eep_jit_backend_t;

typedef struct {
    size_t            size;   /* sizeof(eep_jit_spec_t): lets the struct grow */
    const char       *header; /* relative to the kernel source root: "barrier/barrier_kernel.cuh" */
    const char       *function;      /* device function template: "eep_barrier_body" */
    const char       *template_args; /* "2, true"; NULL or "" for a non-template function */
    const char       *param_type;    /* the one parameter's type: "eep_barrier_params_t" */
    int               launch_bounds; /* max threads per block, 0 for none */
    int               needs_gin;     /* includes GIN headers: NVRTC cannot compile it (nvcc) */
    eep_jit_backend_t backend;       /* AUTO, or force one */
    const char       *extra_flags;   /* extra compiler flags, space separated, or NULL */
    /*
     * Macros for this unit, space separated NAME or NAME=VALUE (VALUE: letters, digits, _ . + -),
     * or NULL.  They are #defined in the generated unit after the backend's shared headers, not
     * passed as -D: NVRTC reuses its precompiled shared headers only for identical command lines,
     * so a kernel's shape constants belong here (docs/jit.md, "Precompiled headers").  Added after
     * extra_flags: a spec whose size ends before it has none.
     */
    const char *defines;
} eep_jit_spec_t;

typedef struct {
    size_t size; /* sizeof(eep_jit_params_t) */
    const char
        *cache_dir; /* NULL: EEP_JIT_CACHE_DIR, else $XDG_CACHE_HOME/eep, else ~/.cache/eep */
    const char *source_root; /* NULL: EEP_JIT_SOURCE_ROOT, else the installed/compiled-in root */
    const char *arch;        /* NULL: EEP_JIT_ARCH (auto: the current context's device) */
} eep_jit_params_t;

/* What a compile did, for tests and benchmarks. */
typedef struct {
    int               cache_hit;  /* the cubin came from the cache: no compiler ran */
    eep_jit_backend_t backend;    /* backend that compiled it (on a miss) */
    double            compile_ms; /* compiler time (0 on a hit) */
    double            total_ms;   /* key + lookup (+ compile + store) */
    char              key[65];    /* hex cache key */
    char              path[4096]; /* cache entry path */
} eep_jit_info_t;

/** Create a JIT context.  Needs no GPU. */
eep_status_t eep_jit_create(const eep_jit_params_t *params, eep_jit_t **jit_p);

/** Destroy; unloads its kernels.  NULL is a no-op. */
void eep_jit_destroy(eep_jit_t *jit);

/** @return the cache directory @p jit uses (entries live in <dir>/v1). */
const char *eep_jit_cache_dir(const eep_jit_t *jit);

/**
 * What eep_jit_compile did so far, on every thread (the prefetch worker's too).
 * @param [out] compiles_p  kernels compiled (cache misses); @param [out] hits_p  cache hits.
 */
void eep_jit_counts(const eep_jit_t *jit, uint64_t *compiles_p, uint64_t *hits_p);

/** @return the GPU architecture @p jit compiles for ("sm_90"). */
const char *eep_jit_arch(const eep_jit_t *jit);

/** @return the kernel source root @p jit reads (kernels/, barrier/, include/eep/ under it). */
const char *eep_jit_source_root(const eep_jit_t *jit);

/**
 * The kernel source root used when neither the params nor EEP_JIT_SOURCE_ROOT name one: the
 * installed tree, <dir of the object holding libeep>/../share/eep, when it has kernels/ (so an
 * installed libeep.so, or a program linking libeep.a installed in <prefix>/bin, finds
 * <prefix>/share/eep wherever the prefix was moved); else the source tree libeep was built from.
 * @param [out] buf  the absolute path, @p len bytes at most.
 * @return EEP_OK; EEP_ERR_INVALID_ARG when the path does not fit.
 */
eep_status_t eep_jit_default_source_root(char *buf, size_t len);

/**
 * Compute the key, look the cache up, compile and store on a miss.  Needs no GPU.
 * @param [out] info_p  what happened (may be NULL).
 * @return EEP_OK; EEP_ERR_JIT with the compiler log (logged, and in eep_jit_last_log()) when the
 *         source does not compile; EEP_ERR_INVALID_ARG for a malformed spec.
 */
eep_status_t eep_jit_compile(eep_jit_t *jit, const eep_jit_spec_t *spec, eep_jit_info_t *info_p);

/** What the background compiles did so far (eep_jit_prefetch_wait). */
typedef struct {
    unsigned long done;   /* compiled, or found already cached */
    unsigned long failed; /* logged as warnings; the kernel is compiled when first used */
} eep_jit_prefetch_stats_t;

/**
 * Compile @p spec in the background (the jit's worker thread, started on first use, at nice 10)
 * so that a later eep_jit_compile / eep_jit_get_kernel of it is a cache hit, not a compile.
 * Returns at once; the spec and its strings are copied.  A spec already waiting is not queued
 * twice; at most 16 wait.  The background compile's outcome is logged, never returned (a failed
 * one costs nothing: the kernel is compiled when first used).  Needs no GPU.  eep_jit_destroy
 * drops what waits and joins the compile in progress (seconds at most).
 * @return EEP_OK; EEP_ERR_INVALID_ARG for a malformed spec (checked now, as eep_jit_compile
 *         would); EEP_ERR_NO_RESOURCE when 16 wait already or no thread can be started;
 *         EEP_ERR_NO_MEMORY.
 */
eep_status_t eep_jit_prefetch(eep_jit_t *jit, const eep_jit_spec_t *spec);

/** Block until nothing waits and nothing compiles in the background; @p stats_p may be NULL. */
void eep_jit_prefetch_wait(eep_jit_t *jit, eep_jit_prefetch_stats_t *stats_p);

/**
 * Compile if needed, then load into the current CUDA context (driver API) and return the entry.
 * Loaded kernels are kept per (context, key): a second call returns the same kernel without
 * reading the cache (it only recomputes the key, well under a millisecond with warm headers).
 * A kernel lives as long as its context: destroy the jit before the contexts it loaded into.
 * @return EEP_ERR_NO_DEVICE without a GPU driver (checked before compiling);
 *         EEP_ERR_INVALID_ARG when no CUDA context is current; else as eep_jit_compile, or the
 *         translated driver error of the load.
 */
eep_status_t eep_jit_get_kernel(eep_jit_t *jit, const eep_jit_spec_t *spec,
                                eep_jit_kernel_t **kernel_p);

/**
 * eep_jit_get_kernel for a launch on @p stream (a CUstream, NULL for the default stream): when
 * the kernel must be loaded into the context, the load waits for the work already queued on the
 * stream first (not while the stream is being captured).  Why: a module load can wait for the GPU
 * while this process's spinning kernel (a barrier, a dispatch) waits for a peer's signal that a
 * proxy thread of this same process must apply through the driver (GIN in PROXY mode: NCCL's
 * progress thread and our test plugin's cuStreamWriteValue64), which then waits behind the load:
 * a deadlock that only the kernel's deadline ends.  Waiting for our own queued work first costs
 * once per kernel and context.  A hit in the loaded table returns at once, as eep_jit_get_kernel.
 */
eep_status_t eep_jit_get_kernel_on(eep_jit_t *jit, const eep_jit_spec_t *spec, void *stream,
                                   eep_jit_kernel_t **kernel_p);

/**
 * Launch @p kernel with its one parameter struct (copied by value into the launch), in the context
 * it was loaded in (which must be current).
 * @param [in] stream        a CUstream (void * so that callers need no CUDA header), NULL for
 *                           the default stream.
 * @param [in] shared_bytes  dynamic shared memory; above 48 KiB the kernel's limit is raised.
 * @param [in] params_size   sizeof the struct; checked against the kernel's parameter size where
 *                           the driver reports it (cuFuncGetParamInfo): EEP_ERR_INVALID_ARG.
 */
eep_status_t eep_jit_launch(const eep_jit_kernel_t *kernel, unsigned grid_x, unsigned block_x,
                            size_t shared_bytes, void *stream, const void *params,
                            size_t params_size);

/* eep_jit_launch_ex flags. */
enum {
    /*
     * Programmatic dependent launch (sm_90+): the kernel may be launched while the previous
     * kernel of the stream still runs; it must execute `griddepcontrol.wait` before it touches
     * memory the previous kernel writes or reads (the EP and barrier kernels do so first thing).
     * Ignored where the driver has no cuLaunchKernelEx.
     */
    EEP_JIT_LAUNCH_PDL = 1u << 0,
};

/** eep_jit_launch with EEP_JIT_LAUNCH_* @p flags (0: the same launch as eep_jit_launch). */
eep_status_t eep_jit_launch_ex(const eep_jit_kernel_t *kernel, unsigned grid_x, unsigned block_x,
                               size_t shared_bytes, void *stream, const void *params,
                               size_t params_size, unsigned flags);

/** The last compiler log of this thread ("" if none); valid until the next compile. */
const char *eep_jit_last_log(void);

#ifdef __cplusplus
}
#endif

#endif /* EEP_JIT_H */
