/*
 * jit_nvrtc.c - the NVRTC backend: compile a unit in process, no files, no subprocess.
 *
 * NVRTC has no libc headers and rejects a few constructs in NCCL 2.28.9's device headers, so a
 * prelude and libc shims are handed to it in memory (nvrtcCreateProgram's headers), following
 * shared/reference/nccl-2.28.9-device-api.md section 2.6: the GIN backends are compiled out
 * (their packed layouts break under NVRTC), explicit __host__ on prototypes is neutralised, and
 * loadConst gets specialisations that avoid zero-length arrays.  This makes the LSA subset of the
 * device API (teams, windows, ncclSymPtr, LSA barrier, LL A2A) compile; GIN kernels need nvcc.
 *
 * Precompiled headers: every unit starts with the same prefix (the prelude, nccl.h and
 * nccl_device.h, which pull in libcu++'s <cuda/atomic>: ~2 s of the ~3 s front end of a kernel)
 * and ends it with a declaration, NVRTC's header stop point.  With -pch (NVRTC 12.8 and later)
 * the first compile of a process saves that prefix and later ones load it, when their command
 * lines are identical: so a spec's shape constants travel as unit #defines (spec.defines), after
 * the stop point, never as -D flags.  The cubin is the same either way (tests/elastic/jit/test_jit.c).
 * NVRTC's automatic PCH state is per process; compiles with it are serialised here.  Its files
 * (~100 MB for this prefix, one per process) go to $TMPDIR/eep-pch-<uid>/<pid> (--pch-dir);
 * NVRTC deletes them when the process exits normally, and the first PCH compile of a process
 * deletes the folders of processes that are gone (killed ranks: fault injection does that).
 */
#include "elastic/jit/jit_int.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/config.h"
#include "elastic/gpu/cuda_sym.h"
#include "util/log.h"

#define EEP_JIT_NVRTC_PRELUDE "eep_jit_nvrtc_prelude.h"

static const eep_jit_mem_header_t eep_jit_nvrtc_headers[] = {
    { EEP_JIT_NVRTC_PRELUDE,
      "#pragma once\n"
      "/* NVRTC cannot compile NCCL's GIN backends (packed layouts); compile them out. */\n"
      "#define NCCL_GIN_PROXY_ENABLE 0\n"
      "#define NCCL_GIN_GDAKI_ENABLE 0\n"
      "#include <cuda_runtime.h>\n"
      "/* NVRTC rejects prototypes marked __host__ (nccl_device/core.h and others). */\n"
      "#undef __host__\n"
      "#define __host__\n"
      "#include <nccl_device/utility.h>\n"
      "/* loadConst's dead branches declare zero-length arrays, a hard error without GNU mode. */\n"
      "namespace nccl { namespace utility {\n"
      "template <> NCCL_DEVICE_INLINE int loadConst<int>(int const *p) { return __ldg(p); }\n"
      "template <> NCCL_DEVICE_INLINE uint32_t loadConst<uint32_t>(uint32_t const *p)\n"
      "{ return __ldg(p); }\n"
      "template <> NCCL_DEVICE_INLINE char *loadConst<char *>(char *const *p)\n"
      "{ return (char *)__ldg((unsigned long long const *)p); }\n"
      "template <> NCCL_DEVICE_INLINE void *loadConst<void *>(void *const *p)\n"
      "{ return (void *)__ldg((unsigned long long const *)p); }\n"
      "}}\n" },
    { "stdint.h", "#pragma once\n#include <cuda/std/cstdint>\n" },
    { "cstdint", "#pragma once\n#include <cuda/std/cstdint>\n" },
    { "limits.h", "#pragma once\n#include <cuda/std/climits>\n" },
    { "stddef.h", "#pragma once\n#include <cuda/std/cstddef>\n" },
    { "stdlib.h", "#pragma once\n#include <cuda/std/cstddef>\n" },
    { "assert.h", "#pragma once\n#include <cuda/std/cassert>\n" },
    { "stdbool.h", "#pragma once\n" },
    { "stdio.h", "#pragma once\n" },
    { "math.h", "#pragma once\n" },
    { "errno.h", "#pragma once\n#define EBUSY 16\n#define EIO 5\n" },
    { "linux/types.h",
      "#pragma once\n#include <cuda/std/cstdint>\n"
      "typedef uint8_t __u8; typedef uint16_t __u16;\n"
      "typedef uint32_t __u32; typedef uint64_t __u64;\n"
      "typedef uint16_t __be16; typedef uint32_t __be32; typedef uint64_t __be64;\n" },
};

static const char *const eep_jit_nvrtc_flags[] = { "-default-device", NULL };

/* NVRTC's automatic PCH is process state (its heap, its files): one compile at a time uses it. */
static pthread_mutex_t eep_jit_nvrtc_pch_lock = PTHREAD_MUTEX_INITIALIZER;

/* This process's PCH folder (--pch-dir), made once; "" when it could not be made. */
static char  eep_jit_nvrtc_pch_dir[4096 + 64];
static pid_t eep_jit_nvrtc_pch_pid; /* the process that made it (a forked child makes its own) */

/* Remove @p dir's files, then @p dir (one level: NVRTC writes flat files). */
static void eep_jit_nvrtc_rm_dir(const char *dir)
{
    char           path[4096 + 300];
    DIR           *d = opendir(dir);
    struct dirent *ent;

    if (d == NULL) {
        return;
    }
    while ((ent = readdir(d)) != NULL) {
        if (strcmp(ent->d_name, ".") != 0 && strcmp(ent->d_name, "..") != 0) {
            if (snprintf(path, sizeof(path), "%s/%s", dir, ent->d_name) < (int)sizeof(path)) {
                unlink(path);
            }
        }
    }
    closedir(d);
    rmdir(dir);
}

int eep_jit_nvrtc_pch_sweep(const char *base)
{
    char           path[4096 + 300], *end;
    DIR           *d = opendir(base);
    struct dirent *ent;
    int            removed = 0;

    if (d == NULL) {
        return 0;
    }
    while ((ent = readdir(d)) != NULL) {
        long pid = strtol(ent->d_name, &end, 10);

        if (end == ent->d_name || *end != '\0' || pid <= 0 || pid == (long)getpid()) {
            continue;
        }
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) {
            continue; /* alive (or not ours to ask about) */
        }
        if (snprintf(path, sizeof(path), "%s/%s", base, ent->d_name) < (int)sizeof(path)) {
            eep_jit_nvrtc_rm_dir(path);
            removed++;
        }
    }
    closedir(d);
    return removed;
}

/* Make (once) and @return this process's PCH folder, sweeping dead processes' first; NULL. */
static const char *eep_jit_nvrtc_pch_folder(void)
{
    const char *tmp;
    char        base[4096 + 32];
    int         removed;

    if (eep_jit_nvrtc_pch_pid == getpid()) {
        return eep_jit_nvrtc_pch_dir[0] != '\0' ? eep_jit_nvrtc_pch_dir : NULL;
    }
    eep_jit_nvrtc_pch_pid    = getpid();
    eep_jit_nvrtc_pch_dir[0] = '\0';
    tmp                      = eep_config_system_env("TMPDIR");
    if (tmp == NULL || tmp[0] != '/' || strlen(tmp) > 4000) {
        tmp = "/tmp";
    }
    if (snprintf(base, sizeof(base), "%s/eep-pch-%u", tmp, (unsigned)getuid()) >=
        (int)sizeof(base)) {
        return NULL;
    }
    if (mkdir(base, 0700) != 0 && errno != EEXIST) {
        eep_debug(EEP_SUBSYS_JIT, "nvrtc PCH: cannot make %s: %m; compiling without PCH", base);
        return NULL;
    }
    removed = eep_jit_nvrtc_pch_sweep(base);
    if (removed > 0) {
        eep_info(EEP_SUBSYS_JIT,
                 "nvrtc PCH: removed %d folder(s) of processes that are gone "
                 "from %s",
                 removed, base);
    }
    if (snprintf(eep_jit_nvrtc_pch_dir, sizeof(eep_jit_nvrtc_pch_dir), "%s/%d", base,
                 (int)getpid()) >= (int)sizeof(eep_jit_nvrtc_pch_dir)) {
        eep_jit_nvrtc_pch_dir[0] = '\0';
        return NULL;
    }
    if (mkdir(eep_jit_nvrtc_pch_dir, 0700) != 0 && errno != EEXIST) {
        eep_debug(EEP_SUBSYS_JIT, "nvrtc PCH: cannot make %s: %m; compiling without PCH",
                  eep_jit_nvrtc_pch_dir);
        eep_jit_nvrtc_pch_dir[0] = '\0';
        return NULL;
    }
    return eep_jit_nvrtc_pch_dir;
}

/* 1 when this NVRTC has precompiled headers (12.8 and later) and EEP_JIT_PCH allows them. */
static int eep_jit_nvrtc_pch(const eep_jit_t *jit, const eep_cuda_sym_t *sym)
{
    return jit->pch && sym->nvrtcGetPCHCreateStatus != NULL &&
           (sym->nvrtc_major > 12 || (sym->nvrtc_major == 12 && sym->nvrtc_minor >= 8));
}

/*
 * After a compile with -pch: when NVRTC could not save the prefix because its PCH heap was too
 * small, grow the heap to what it asked for, so that the next compile saves it.
 */
static void eep_jit_nvrtc_pch_heap(const eep_cuda_sym_t *sym, nvrtcProgram prog)
{
    size_t need = 0;

    if (sym->nvrtcGetPCHCreateStatus(prog) != NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED ||
        sym->nvrtcGetPCHHeapSizeRequired == NULL || sym->nvrtcSetPCHHeapSize == NULL ||
        sym->nvrtcGetPCHHeapSizeRequired(prog, &need) != NVRTC_SUCCESS) {
        return;
    }
    if (sym->nvrtcSetPCHHeapSize(need) == NVRTC_SUCCESS) {
        eep_debug(EEP_SUBSYS_JIT, "nvrtc PCH heap grown to the %zu bytes it asked for", need);
    }
}

/*
 * NVRTC's identity is the library file: the toolkit's libnvrtc.so.13 (the file cuda_sym loads
 * first) is identified by path, size and mtime without loading it, so a warm lookup maps no
 * 100 MB compiler into the process.  Only when NVRTC comes from the loader's search path is it
 * loaded to learn which file and version that is.
 */
static eep_status_t eep_jit_nvrtc_identity(eep_jit_t *jit, eep_sha256_t *hash)
{
    const eep_cuda_sym_t *sym;
    struct stat           st;
    eep_status_t          status;
    char                  id[4096 + 128], file[4096];

    (void)jit;
    if (eep_cuda_sym_nvrtc_file(file, sizeof(file)) && stat(file, &st) == 0) {
        snprintf(id, sizeof(id), "nvrtc-file %s %lld %lld.%09ld", file, (long long)st.st_size,
                 (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
        eep_sha256_update(hash, "compiler", sizeof("compiler"));
        eep_sha256_update(hash, id, strlen(id) + 1);
        return EEP_OK;
    }
    status = eep_cuda_sym_nvrtc(&sym);
    if (status != EEP_OK) {
        return status;
    }
    if (stat(sym->nvrtc_path, &st) != 0) {
        memset(&st, 0, sizeof(st));
    }
    snprintf(id, sizeof(id), "nvrtc %d.%d %s %lld %lld.%09ld", sym->nvrtc_major, sym->nvrtc_minor,
             sym->nvrtc_path, (long long)st.st_size, (long long)st.st_mtim.tv_sec,
             st.st_mtim.tv_nsec);
    eep_sha256_update(hash, "compiler", sizeof("compiler"));
    eep_sha256_update(hash, id, strlen(id) + 1);
    return EEP_OK;
}

static char *eep_jit_nvrtc_log(const eep_cuda_sym_t *sym, nvrtcProgram prog)
{
    size_t size = 0;
    char  *log;

    if (sym->nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size == 0) {
        return NULL;
    }
    log = malloc(size + 1);
    if (log != NULL && sym->nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) {
        free(log);
        return NULL;
    }
    if (log != NULL) {
        log[size] = '\0';
    }
    return log;
}

static eep_status_t eep_jit_nvrtc_compile(eep_jit_t *jit, const eep_jit_unit_t *unit,
                                          void **cubin_p, size_t *size_p, char **log_p)
{
    const char           *names[sizeof(eep_jit_nvrtc_headers) / sizeof(eep_jit_nvrtc_headers[0])];
    const char           *contents[sizeof(names) / sizeof(names[0])];
    const eep_cuda_sym_t *sym;
    nvrtcProgram          prog;
    nvrtcResult           res;
    eep_status_t          status;
    size_t                i, size = 0;
    void                 *cubin;
    const char           *with_pch[EEP_JIT_MAX_OPTIONS + 2], *dir;
    const char *const    *options = unit->options;
    char                  dir_option[sizeof(eep_jit_nvrtc_pch_dir) + 16];
    int                   n_options = unit->n_options, pch;

    *log_p = NULL;
    status = eep_cuda_sym_nvrtc(&sym);
    if (status != EEP_OK) {
        return status;
    }
    for (i = 0; i < unit->n_mem_headers && i < sizeof(names) / sizeof(names[0]); i++) {
        names[i]    = unit->mem_headers[i].name;
        contents[i] = unit->mem_headers[i].content;
    }
    res = sym->nvrtcCreateProgram(&prog, unit->source, unit->name, (int)i, contents, names);
    if (res != NVRTC_SUCCESS) {
        return eep_status_from_nvrtc(res, "nvrtcCreateProgram");
    }
    eep_jit_count_compiler_run();
    pch = eep_jit_nvrtc_pch(jit, sym);
    if (pch) {
        pthread_mutex_lock(&eep_jit_nvrtc_pch_lock);
        dir = eep_jit_nvrtc_pch_folder();
        /* PCH options must come first on NVRTC's command line (no folder: no PCH) */
        if (dir != NULL && snprintf(dir_option, sizeof(dir_option), "--pch-dir=%s", dir) <
                               (int)sizeof(dir_option)) {
            with_pch[0] = "-pch";
            with_pch[1] = dir_option;
            memcpy(with_pch + 2, unit->options, (size_t)unit->n_options * sizeof(with_pch[0]));
            options   = with_pch;
            n_options = unit->n_options + 2;
        }
    }
    res = sym->nvrtcCompileProgram(prog, n_options, options);
    if (pch) {
        if (options == with_pch) {
            eep_jit_nvrtc_pch_heap(sym, prog);
        }
        pthread_mutex_unlock(&eep_jit_nvrtc_pch_lock);
    }
    *log_p = eep_jit_nvrtc_log(sym, prog);
    if (res == NVRTC_ERROR_COMPILATION) {
        status = EEP_ERR_JIT; /* the caller logs the compiler's own words */
        goto out_destroy;
    }
    if (res != NVRTC_SUCCESS) {
        status = eep_status_from_nvrtc(res, "nvrtcCompileProgram");
        goto out_destroy;
    }
    res = sym->nvrtcGetCUBINSize(prog, &size);
    if (res != NVRTC_SUCCESS || size == 0) {
        status = res != NVRTC_SUCCESS ? eep_status_from_nvrtc(res, "nvrtcGetCUBINSize")
                                      : EEP_ERR_JIT;
        if (size == 0 && res == NVRTC_SUCCESS) {
            eep_error(EEP_SUBSYS_JIT, "nvrtc produced no cubin for %s (is -arch a real sm_XX?)",
                      unit->name);
        }
        goto out_destroy;
    }
    cubin = malloc(size);
    if (cubin == NULL) {
        status = EEP_ERR_NO_MEMORY;
        goto out_destroy;
    }
    res = sym->nvrtcGetCUBIN(prog, cubin);
    if (res != NVRTC_SUCCESS) {
        free(cubin);
        status = eep_status_from_nvrtc(res, "nvrtcGetCUBIN");
        goto out_destroy;
    }
    *cubin_p = cubin;
    *size_p  = size;
    status   = EEP_OK;
out_destroy:
    sym->nvrtcDestroyProgram(&prog);
    return status;
}

const eep_jit_backend_ops_t eep_jit_nvrtc_ops = {
    .name          = "nvrtc",
    .identity      = eep_jit_nvrtc_identity,
    .flags         = eep_jit_nvrtc_flags,
    .mem_headers   = eep_jit_nvrtc_headers,
    .n_mem_headers = sizeof(eep_jit_nvrtc_headers) / sizeof(eep_jit_nvrtc_headers[0]),
    .unit_prologue = "#include \"" EEP_JIT_NVRTC_PRELUDE "\"\n"
                     "#include <nccl.h>\n"
                     "#include <nccl_device.h>\n"
                     "/* the end of the shared prefix that NVRTC precompiles (header stop) */\n"
                     "typedef int eep_jit_shared_prefix_end_t;\n",
    .compile       = eep_jit_nvrtc_compile,
};
