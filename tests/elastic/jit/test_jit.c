/*
 * test_jit.c - compiling and caching kernels, CPU-only (the CUDA toolkit is enough).
 *
 * Cold compile then warm lookup of the LSA probe with NVRTC (the warm path runs no compiler:
 * the process-wide compiler-run counter and a fresh process both say so); the GIN probe with nvcc
 * through a counting wrapper; four processes asking for one key at once compile it once and read
 * identical cubins; a stopped process holding a key's lock does not hold up another's compile of
 * it; a truncated or bit-flipped entry is detected, logged and rebuilt; a syntax
 * error is EEP_ERR_JIT with the compiler's words in eep_jit_last_log(); no driver means
 * eep_jit_get_kernel fails cleanly with EEP_ERR_NO_DEVICE.  Every test uses its own temp cache.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <link.h>
#include <spawn.h>
#include <sys/wait.h>

#include "elastic/gpu/cuda_sym.h"
#include "elastic/jit/jit_int.h"
#include "tests/common/jit_test_util.h"
#include "util/clock.h"

static const eep_jit_spec_t lsa_spec = {
    .size          = sizeof(eep_jit_spec_t),
    .header        = "kernels/probe/lsa_probe.cuh",
    .function      = "eep_lsa_probe_body",
    .template_args = "1",
    .param_type    = "eep_lsa_probe_params_t",
    .launch_bounds = 256,
};
static const eep_jit_spec_t gin_spec = {
    .size          = sizeof(eep_jit_spec_t),
    .header        = "kernels/probe/gin_probe.cuh",
    .function      = "eep_gin_probe_body",
    .template_args = "0",
    .param_type    = "eep_gin_probe_params_t",
    .needs_gin     = 1,
};
static const eep_jit_spec_t fill_spec = {
    .size          = sizeof(eep_jit_spec_t),
    .header        = "kernels/probe/fill_probe.cuh",
    .function      = "eep_fill_probe_body",
    .template_args = "3u",
    .param_type    = "eep_fill_probe_params_t",
};

static eep_jit_t *make_jit(const char *cache)
{
    eep_jit_params_t params = { .size = sizeof(params), .cache_dir = cache };
    eep_jit_t       *jit    = NULL;

    assert_int_equal(eep_jit_create(&params, &jit), EEP_OK);
    return jit;
}

/* A shell script that counts its runs in <dir>/nvcc.count and then runs the real nvcc. */
static void make_counting_nvcc(const char *dir, char *path_p, size_t len)
{
    char       text[8192];
    eep_jit_t *jit = make_jit(dir);

    assert_true(jit->nvcc[0] != '\0'); /* the toolkit's nvcc, found from the baked default */
    snprintf(text, sizeof(text), "#!/bin/sh\necho run >> '%s/nvcc.count'\nexec '%s' \"$@\"\n", dir,
             jit->nvcc);
    eep_jit_destroy(jit);
    jt_write(dir, "nvcc-wrapper", text);
    snprintf(path_p, len, "%s/nvcc-wrapper", dir);
    assert_int_equal(chmod(path_p, 0755), 0);
}

static int count_lines(const char *dir, const char *name)
{
    char  path[4096], line[64];
    FILE *f;
    int   n = 0;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "r");
    if (f == NULL) {
        return 0;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        n++;
    }
    fclose(f);
    return n;
}

static void check_entry(const char *path, uint8_t digest_p[EEP_SHA256_BYTES])
{
    void  *cubin = NULL;
    size_t size  = 0;

    assert_int_equal(eep_jit_cache_read(path, &cubin, &size), EEP_OK);
    assert_true(size > 64);
    assert_memory_equal(cubin, "\177ELF", 4); /* a cubin is an ELF image */
    if (digest_p != NULL) {
        eep_sha256(cubin, size, digest_p);
    }
    free(cubin);
}

static void test_lsa_nvrtc_cold_then_warm(void **state)
{
    char          *cache = jt_mkdtemp("jit-lsa");
    eep_jit_info_t cold, warm;
    eep_jit_t     *jit = make_jit(cache);
    unsigned long  runs;
    pid_t          pid;
    int            wstatus;

    (void)state;
    runs = eep_jit_compiler_runs();
    assert_int_equal(eep_jit_compile(jit, &lsa_spec, &cold), EEP_OK);
    assert_int_equal(cold.cache_hit, 0);
    assert_int_equal(cold.backend, EEP_JIT_BACKEND_NVRTC);
    assert_true(cold.compile_ms > 0);
    assert_int_equal(eep_jit_compiler_runs(), runs + 1);
    check_entry(cold.path, NULL);
    printf("lsa probe: nvrtc cold %.0f ms (compile %.0f ms)\n", cold.total_ms, cold.compile_ms);

    assert_int_equal(eep_jit_compile(jit, &lsa_spec, &warm), EEP_OK);
    assert_int_equal(warm.cache_hit, 1);
    assert_int_equal(warm.compile_ms, 0);
    assert_string_equal(warm.key, cold.key);
    assert_string_equal(warm.path, cold.path);
    assert_int_equal(eep_jit_compiler_runs(), runs + 1); /* no compiler ran */
    printf("lsa probe: warm %.2f ms\n", warm.total_ms);
    eep_jit_destroy(jit);

    /* A fresh process with a fresh jit: hit, and no compiler run there either. */
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        eep_jit_info_t   info;
        unsigned long    before = eep_jit_compiler_runs();
        eep_jit_t       *child  = NULL;
        eep_jit_params_t params = { .size = sizeof(params), .cache_dir = cache };

        if (eep_jit_create(&params, &child) != EEP_OK ||
            eep_jit_compile(child, &lsa_spec, &info) != EEP_OK) {
            _exit(2);
        }
        _exit(info.cache_hit == 1 && eep_jit_compiler_runs() == before &&
                      strcmp(info.key, cold.key) == 0
                  ? 0
                  : 3);
    }
    assert_int_equal(waitpid(pid, &wstatus, 0), pid);
    assert_true(WIFEXITED(wstatus));
    assert_int_equal(WEXITSTATUS(wstatus), 0);
    jt_rm_rf(cache);
}

static int find_nvrtc(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    *(int *)arg |= strstr(info->dlpi_name, "libnvrtc") != NULL;
    return 0;
}

/* Run in a fresh process (this binary, exec'd with --warm-child CACHE): a warm lookup of the LSA
   probe hits, runs no compiler, and does not even map NVRTC into the process. */
static int warm_child(const char *cache)
{
    eep_jit_params_t params = { .size = sizeof(params), .cache_dir = cache };
    eep_jit_info_t   info;
    eep_jit_t       *jit   = NULL;
    int              nvrtc = 0;

    if (eep_jit_create(&params, &jit) != EEP_OK ||
        eep_jit_compile(jit, &lsa_spec, &info) != EEP_OK) {
        return 2;
    }
    dl_iterate_phdr(find_nvrtc, &nvrtc);
    printf("warm child: hit %d, compiler runs %lu, nvrtc mapped %d, %.2f ms\n", info.cache_hit,
           eep_jit_compiler_runs(), nvrtc, info.total_ms);
    eep_jit_destroy(jit);
    return info.cache_hit == 1 && eep_jit_compiler_runs() == 0 && nvrtc == 0 ? 0 : 3;
}

static void test_warm_start_fresh_process(void **state)
{
    char          *cache  = jt_mkdtemp("jit-fresh");
    char          *argv[] = { "test_jit", "--warm-child", cache, NULL };
    eep_jit_info_t cold;
    eep_jit_t     *jit = make_jit(cache);
    extern char  **environ;
    pid_t          pid;
    int            wstatus;

    (void)state;
    if (!eep_cuda_sym_nvrtc_file((char[4096]){ 0 }, 4096)) {
        printf("skip: NVRTC is not the toolkit's file here, so keying on it needs it loaded\n");
        skip();
    }
    assert_int_equal(eep_jit_compile(jit, &lsa_spec, &cold), EEP_OK);
    eep_jit_destroy(jit);
    assert_int_equal(posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ), 0);
    assert_int_equal(waitpid(pid, &wstatus, 0), pid);
    assert_true(WIFEXITED(wstatus));
    assert_int_equal(WEXITSTATUS(wstatus), 0);
    jt_rm_rf(cache);
}

static void test_gin_nvcc(void **state)
{
    char          *cache = jt_mkdtemp("jit-gin"), wrapper[4096];
    eep_jit_info_t cold, warm;
    eep_jit_t     *jit;

    (void)state;
    make_counting_nvcc(cache, wrapper, sizeof(wrapper));
    setenv("EEP_JIT_NVCC", wrapper, 1);
    jit = make_jit(cache);
    assert_string_equal(jit->nvcc, wrapper);
    assert_int_equal(eep_jit_compile(jit, &gin_spec, &cold), EEP_OK);
    assert_int_equal(cold.cache_hit, 0);
    assert_int_equal(cold.backend, EEP_JIT_BACKEND_NVCC); /* auto + needs_gin */
    assert_int_equal(count_lines(cache, "nvcc.count"), 1);
    check_entry(cold.path, NULL);
    printf("gin probe: nvcc cold %.0f ms\n", cold.total_ms);
    assert_int_equal(eep_jit_compile(jit, &gin_spec, &warm), EEP_OK);
    assert_int_equal(warm.cache_hit, 1);
    assert_int_equal(count_lines(cache, "nvcc.count"), 1); /* nvcc did not run again */
    eep_jit_destroy(jit);
    unsetenv("EEP_JIT_NVCC");
    jt_rm_rf(cache);
}

/* Four processes ask for one key at the same instant: one compiles, three wait and read it. */
static void test_four_processes_one_compile(void **state)
{
    char *cache = jt_mkdtemp("jit-race"), wrapper[4096];
    int   go[2], res[2], i, wstatus, compiled = 0, hits = 0;
    pid_t pids[4];
    struct {
        int     status, cache_hit;
        uint8_t digest[EEP_SHA256_BYTES];
    } r[4];

    (void)state;
    make_counting_nvcc(cache, wrapper, sizeof(wrapper));
    setenv("EEP_JIT_NVCC", wrapper, 1);
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(res), 0);
    for (i = 0; i < 4; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            eep_jit_spec_t   spec   = fill_spec;
            eep_jit_params_t params = { .size = sizeof(params), .cache_dir = cache };
            eep_jit_info_t   info;
            eep_jit_t       *jit = NULL;
            char             c;

            close(go[1]);
            close(res[0]);
            memset(&r[0], 0, sizeof(r[0]));
            spec.backend = EEP_JIT_BACKEND_NVCC;
            r[0].status  = eep_jit_create(&params, &jit);
            if (read(go[0], &c, 1) < 0) { /* returns 0 when the parent closes: all start together */
                _exit(4);
            }
            if (r[0].status == EEP_OK) {
                r[0].status = eep_jit_compile(jit, &spec, &info);
            }
            if (r[0].status == EEP_OK) {
                void  *cubin;
                size_t size;

                r[0].cache_hit = info.cache_hit;
                r[0].status    = eep_jit_cache_read(info.path, &cubin, &size);
                if (r[0].status == EEP_OK) {
                    eep_sha256(cubin, size, r[0].digest);
                    free(cubin);
                }
            }
            if (write(res[1], &r[0], sizeof(r[0])) != (ssize_t)sizeof(r[0])) {
                _exit(5);
            }
            _exit(0);
        }
    }
    close(go[0]);
    close(res[1]);
    close(go[1]); /* go */
    for (i = 0; i < 4; i++) {
        assert_int_equal(read(res[0], &r[i], sizeof(r[i])), (ssize_t)sizeof(r[i]));
    }
    for (i = 0; i < 4; i++) {
        assert_int_equal(waitpid(pids[i], &wstatus, 0), pids[i]);
        assert_true(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
        assert_int_equal(r[i].status, EEP_OK);
        compiled += r[i].cache_hit == 0;
        hits += r[i].cache_hit == 1;
        assert_memory_equal(r[i].digest, r[0].digest, EEP_SHA256_BYTES);
    }
    close(res[0]);
    assert_int_equal(compiled, 1);
    assert_int_equal(hits, 3);
    assert_int_equal(count_lines(cache, "nvcc.count"), 1);
    unsetenv("EEP_JIT_NVCC");
    jt_rm_rf(cache);
}

static void corrupt_and_rebuild(const char *how)
{
    char          *cache = jt_mkdtemp("jit-corrupt");
    eep_jit_info_t info, again;
    eep_jit_t     *jit = make_jit(cache);
    unsigned long  runs;
    struct stat    st;
    uint8_t        d0[EEP_SHA256_BYTES], d1[EEP_SHA256_BYTES];
    FILE          *f;

    assert_int_equal(eep_jit_compile(jit, &fill_spec, &info), EEP_OK);
    check_entry(info.path, d0);
    assert_int_equal(stat(info.path, &st), 0);
    if (strcmp(how, "truncate") == 0) {
        assert_int_equal(truncate(info.path, st.st_size / 2), 0);
    } else {
        f = fopen(info.path, "r+b"); /* flip one bit in the middle of the cubin */
        assert_non_null(f);
        assert_int_equal(fseek(f, st.st_size / 2, SEEK_SET), 0);
        int c = fgetc(f);
        assert_int_equal(fseek(f, st.st_size / 2, SEEK_SET), 0);
        fputc(c ^ 0x10, f);
        fclose(f);
    }
    assert_int_not_equal(eep_jit_cache_read(info.path, &(void *){ NULL }, &(size_t){ 0 }), EEP_OK);
    jt_hook_reset();
    runs = eep_jit_compiler_runs();
    assert_int_equal(eep_jit_compile(jit, &fill_spec, &again), EEP_OK);
    assert_int_equal(again.cache_hit, 0); /* rebuilt, not served */
    assert_int_equal(eep_jit_compiler_runs(), runs + 1);
    assert_true(jt_hook_warns >= 1);
    assert_non_null(strstr(jt_hook_last, "corrupt jit cache entry"));
    check_entry(again.path, d1);
    assert_memory_equal(d0, d1, sizeof(d0));
    assert_int_equal(eep_jit_compile(jit, &fill_spec, &again), EEP_OK);
    assert_int_equal(again.cache_hit, 1);
    eep_jit_destroy(jit);
    jt_rm_rf(cache);
}

/* A waiter for a key's lock must not depend on its holder: a rank SIGSTOPped while its prefetch
   held the lock kept every survivor in "still waiting for another process compiling" (make
   gpu-hybrid, stop mid-combine, 2 and 4 ranks).  The holder here takes the key's lock and is
   stopped; a fresh process then compiles the same spec in a bounded time, and a lock whose holder
   runs is still waited for. */
static void test_lock_holder_stopped(void **state)
{
    char          *scratch = jt_mkdtemp("jit-key"), *cache = jt_mkdtemp("jit-stopped"), key[128];
    eep_jit_spec_t spec = fill_spec;
    eep_jit_info_t info;
    eep_jit_t     *jit = make_jit(scratch);
    const char    *base;
    int            ready[2], wstatus = 0, fd = -1;
    pid_t          holder, waiter, got       = 0;
    double         t0;

    (void)state;
    /* the key of the spec (independent of the cache directory) */
    assert_int_equal(eep_jit_compile(jit, &spec, &info), EEP_OK);
    eep_jit_destroy(jit);
    base = strrchr(info.path, '/');
    assert_non_null(base);
    snprintf(key, sizeof(key), "%s", base + 1);
    *strstr(key, ".cubin") = '\0';

    assert_int_equal(pipe(ready), 0);
    holder = fork();
    assert_true(holder >= 0);
    if (holder == 0) {
        eep_jit_t *hj  = make_jit(cache);
        int        hfd = -1;

        close(ready[0]);
        if (eep_jit_cache_lock(hj, key, &hfd) != EEP_OK || hfd < 0 ||
            write(ready[1], "x", 1) != 1) {
            _exit(3);
        }
        raise(SIGSTOP);
        usleep(800 * 1000); /* running again, still holding it */
        eep_jit_cache_unlock(hfd);
        _exit(0);
    }
    close(ready[1]);
    {
        char c;
        assert_int_equal(read(ready[0], &c, 1), 1);
    }
    close(ready[0]);
    assert_int_equal(waitpid(holder, &wstatus, WUNTRACED), holder);
    assert_true(WIFSTOPPED(wstatus));

    /* a fresh process compiles the key while its lock's holder is stopped */
    waiter = fork();
    assert_true(waiter >= 0);
    if (waiter == 0) {
        eep_jit_t     *wj = make_jit(cache);
        eep_jit_info_t winfo;

        if (eep_jit_compile(wj, &spec, &winfo) != EEP_OK || winfo.cache_hit) {
            _exit(3);
        }
        _exit(strstr(jt_hook_last, "is stopped") != NULL ? 0 : 4); /* and it said why */
    }
    for (int i = 0; i < 600 && got == 0; i++) { /* 60 s; the holder is stopped for good */
        got = waitpid(waiter, &wstatus, WNOHANG);
        if (got == 0) {
            usleep(100 * 1000);
        }
    }
    if (got == 0) {
        kill(waiter, SIGKILL);
        waitpid(waiter, NULL, 0);
    }
    assert_int_equal(got, waiter); /* without the check it waits on the stopped holder */
    assert_true(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);

    /* the holder runs again: a waiter waits for it and then gets the lock itself */
    assert_int_equal(kill(holder, SIGCONT), 0);
    jit = make_jit(cache);
    t0  = eep_clock_ms();
    assert_int_equal(eep_jit_cache_lock(jit, key, &fd), EEP_OK);
    assert_true(fd >= 0);
    assert_true(eep_clock_ms() - t0 > 300); /* it waited for the running holder */
    eep_jit_cache_unlock(fd);
    eep_jit_destroy(jit);
    assert_int_equal(waitpid(holder, &wstatus, 0), holder);
    assert_true(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
    jt_rm_rf(scratch);
    jt_rm_rf(cache);
}

static void test_truncated_entry_rebuilt(void **state)
{
    (void)state;
    corrupt_and_rebuild("truncate");
}

static void test_flipped_bit_rebuilt(void **state)
{
    (void)state;
    corrupt_and_rebuild("flip");
}

static void syntax_error(eep_jit_backend_t backend)
{
    char            *root = jt_mkdtemp("jit-bad-root"), *cache = jt_mkdtemp("jit-bad");
    eep_jit_params_t params = { .size = sizeof(params), .cache_dir = cache, .source_root = root };
    eep_jit_spec_t   spec   = { .size       = sizeof(spec),
                                .header     = "bad/bad.cuh",
                                .function   = "bad_body",
                                .param_type = "bad_params_t",
                                .backend    = backend };
    eep_jit_info_t   info;
    eep_jit_t       *jit;
    char             path[4096];

    jt_write(root, "bad/bad.cuh",
             "#pragma once\ntypedef struct { int *out; } bad_params_t;\n"
             "__device__ void bad_body(const bad_params_t &p)\n"
             "{\n    int eep_oops = ;\n    p.out[0] = eep_oops;\n}\n");
    assert_int_equal(eep_jit_create(&params, &jit), EEP_OK);
    jt_hook_reset();
    memset(&info, 0x5a, sizeof(info));
    assert_int_equal(eep_jit_compile(jit, &spec, &info), EEP_ERR_JIT);
    assert_int_equal(info.cache_hit, 0x5a5a5a5a); /* outputs only on success */
    assert_non_null(strstr(eep_jit_last_log(), "error"));
    assert_non_null(strstr(eep_jit_last_log(), "expected an expression"));
    assert_true(jt_hook_errors >= 1);
    assert_non_null(strstr(jt_hook_last, "expected an expression")); /* the log was logged */
    /* nothing was stored */
    eep_jit_destroy(jit);
    snprintf(path, sizeof(path), "find '%s/v1' -name '*.cubin' | grep -q .", cache);
    assert_int_not_equal(system(path), 0);
    jt_rm_rf(root);
    jt_rm_rf(cache);
}

static void test_syntax_error_nvrtc(void **state)
{
    (void)state;
    syntax_error(EEP_JIT_BACKEND_NVRTC);
}

static void test_syntax_error_nvcc(void **state)
{
    (void)state;
    syntax_error(EEP_JIT_BACKEND_NVCC);
}

static void test_keep_source(void **state)
{
    char          *cache = jt_mkdtemp("jit-keep");
    eep_jit_info_t info;
    eep_jit_t     *jit;
    char           path[4096];

    (void)state;
    setenv("EEP_JIT_KEEP_SOURCE", "1", 1);
    jit = make_jit(cache);
    unsetenv("EEP_JIT_KEEP_SOURCE");
    assert_int_equal(eep_jit_compile(jit, &fill_spec, &info), EEP_OK);
    snprintf(path, sizeof(path), "%s/src/%s.cu", cache, info.key);
    assert_int_equal(access(path, R_OK), 0);
    eep_jit_destroy(jit);
    jt_rm_rf(cache);
}

/* A unit's defines reach the kernel (a wrong value is the header's #error), shape the key, are
 * checked (EEP_ERR_INVALID_ARG naming them), and a spec of the size before the field has none. */
static void test_defines(void **state)
{
    char            *root = jt_mkdtemp("jit-def-root"), *cache = jt_mkdtemp("jit-def");
    eep_jit_params_t params = { .size = sizeof(params), .cache_dir = cache, .source_root = root };
    eep_jit_spec_t   spec   = { .size       = sizeof(spec),
                                .header     = "def/def.cuh",
                                .function   = "def_body",
                                .param_type = "def_params_t",
                                .backend    = EEP_JIT_BACKEND_NVRTC };
    static const char *const bad[] = { "1A=3",   "A=", "A=b;c", "A=\"x\"", "A=1\n#include <x>",
                                       "A(x)=x", "=3" };
    eep_jit_info_t           info;
    eep_jit_t               *jit;
    char                     key3[sizeof(info.key)];
    size_t                   i;

    (void)state;
    jt_write(root, "def/def.cuh",
             "#pragma once\ntypedef struct { int *out; } def_params_t;\n"
             "#if !defined(EEP_T_A) || EEP_T_A != 3 || !defined(EEP_T_FLAG)\n"
             "#error the defines did not arrive\n"
             "#endif\n"
             "static_assert(EEP_T_F > 1.4 && EEP_T_F < 1.6, \"EEP_T_F\");\n"
             "__device__ void def_body(const def_params_t &p) { p.out[0] = EEP_T_A; }\n");
    assert_int_equal(eep_jit_create(&params, &jit), EEP_OK);
    spec.defines = "  EEP_T_A=3\tEEP_T_FLAG EEP_T_F=1.5 ";
    assert_int_equal(eep_jit_compile(jit, &spec, &info), EEP_OK);
    memcpy(key3, info.key, sizeof(key3));
    spec.defines = "EEP_T_A=4 EEP_T_FLAG EEP_T_F=1.5";
    assert_int_equal(eep_jit_compile(jit, &spec, &info), EEP_ERR_JIT);
    assert_non_null(strstr(eep_jit_last_log(), "the defines did not arrive"));
    spec.defines = "EEP_T_A=3 EEP_T_FLAG EEP_T_F=1.5 EEP_T_OTHER=1";
    assert_int_equal(eep_jit_compile(jit, &spec, &info), EEP_OK);
    assert_string_not_equal(info.key, key3); /* another unit, another cache entry */
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        spec.defines = bad[i];
        jt_hook_reset();
        assert_int_equal(eep_jit_compile(jit, &spec, &info), EEP_ERR_INVALID_ARG);
        assert_non_null(strstr(jt_hook_last, "spec defines"));
    }
    /* A caller built against the spec before `defines` existed: the field is not read. */
    spec.defines = "1A=garbage";
    spec.size    = offsetof(eep_jit_spec_t, defines);
    assert_int_equal(eep_jit_compile(jit, &spec, &info), EEP_ERR_JIT); /* #error: no EEP_T_A */
    eep_jit_destroy(jit);
    jt_rm_rf(root);
    jt_rm_rf(cache);
}

/*
 * The unit's header comes from the source root even when the working directory holds a file of
 * the same relative path.  NVRTC resolved the generated unit's quoted #include against the
 * working directory before its -I paths, while the key hashed the root's file: a process
 * started in another checkout compiled that checkout's kernels and cached them under the root's
 * key (2026-12-01: every diagnostic tree run from the main checkout ran main's kernels).
 */
static void test_header_from_root_not_cwd(void **state)
{
    char            *root = jt_mkdtemp("jit-cwd-root"), *other = jt_mkdtemp("jit-cwd-other");
    char            *cache  = jt_mkdtemp("jit-cwd");
    eep_jit_params_t params = { .size = sizeof(params), .cache_dir = cache, .source_root = root };
    eep_jit_spec_t   spec   = { .size       = sizeof(spec),
                                .header     = "cwdp/cwdp.cuh",
                                .function   = "cwdp_body",
                                .param_type = "cwdp_params_t",
                                .backend    = EEP_JIT_BACKEND_NVRTC };
    eep_jit_info_t   info;
    eep_jit_t       *jit;
    eep_status_t     status;
    char             cwd[4096];

    (void)state;
    jt_write(root, "cwdp/cwdp.cuh",
             "#pragma once\ntypedef struct { int *out; } cwdp_params_t;\n"
             "__device__ void cwdp_body(const cwdp_params_t &p) { p.out[0] = 1; }\n");
    jt_write(other, "cwdp/cwdp.cuh",
             "#error compiled from the working directory, not the source root\n");
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_int_equal(chdir(other), 0);
    assert_int_equal(eep_jit_create(&params, &jit), EEP_OK);
    status = eep_jit_compile(jit, &spec, &info);
    assert_int_equal(chdir(cwd), 0);
    if (status != EEP_OK) {
        print_message("%s\n", eep_jit_last_log());
    }
    assert_int_equal(status, EEP_OK);
    eep_jit_destroy(jit);
    jt_rm_rf(root);
    jt_rm_rf(other);
    jt_rm_rf(cache);
}

/* Read a cache entry whole. */
static void *read_entry(const char *path, size_t *size_p)
{
    void *cubin = NULL;

    assert_int_equal(eep_jit_cache_read(path, &cubin, size_p), EEP_OK);
    return cubin;
}

/*
 * NVRTC's precompiled shared prefix (EEP_JIT_PCH, on by default) changes how long a compile
 * takes, never what it makes: the same unit compiled with it (a process's second compile, which
 * loads the prefix the first one saved) and without it gives the same cubin, byte for byte.
 */
static void test_pch_same_cubin(void **state)
{
    char          *with = jt_mkdtemp("jit-pch"), *without = jt_mkdtemp("jit-nopch");
    eep_jit_spec_t first = fill_spec, second = fill_spec;
    eep_jit_info_t a, b;
    eep_jit_t     *jit;
    void          *ca, *cb;
    size_t         na, nb;

    (void)state;
    first.backend = second.backend = EEP_JIT_BACKEND_NVRTC;
    second.template_args           = "7u";
    jit                            = make_jit(with);
    assert_int_equal(eep_jit_compile(jit, &first, &a), EEP_OK);
    assert_int_equal(eep_jit_compile(jit, &second, &a), EEP_OK);
    eep_jit_destroy(jit);
    setenv("EEP_JIT_PCH", "0", 1);
    jit = make_jit(without);
    unsetenv("EEP_JIT_PCH");
    assert_int_equal(jit->pch, 0);
    assert_int_equal(eep_jit_compile(jit, &second, &b), EEP_OK);
    eep_jit_destroy(jit);
    printf("fill probe <7u>: %.0f ms after a first compile with PCH, %.0f ms without PCH\n",
           a.compile_ms, b.compile_ms);
    assert_string_equal(a.key, b.key); /* PCH is not in the key: it does not shape the cubin */
    {
        /* the saved prefix is in this process's folder, not in /tmp at large */
        const char *tmp = getenv("TMPDIR") != NULL && getenv("TMPDIR")[0] == '/' ? getenv("TMPDIR")
                                                                                 : "/tmp";
        char        cmd[4096 + 128];

        snprintf(cmd, sizeof(cmd), "ls '%s/eep-pch-%u/%d/' | grep -q '\\.pch$'", tmp,
                 (unsigned)getuid(), (int)getpid());
        assert_int_equal(system(cmd), 0);
    }
    ca = read_entry(a.path, &na);
    cb = read_entry(b.path, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(ca, cb, na);
    free(ca);
    free(cb);
    jt_rm_rf(with);
    jt_rm_rf(without);
}

/* A prefetched spec is compiled in the background; the later compile of it runs no compiler. */
static void test_prefetch(void **state)
{
    char                    *cache = jt_mkdtemp("jit-pre");
    eep_jit_t               *jit   = make_jit(cache);
    eep_jit_spec_t           spec = fill_spec, bad = fill_spec;
    eep_jit_prefetch_stats_t stats;
    eep_jit_info_t           info;
    unsigned long            runs;

    (void)state;
    spec.template_args = "9u";
    runs               = eep_jit_compiler_runs();
    assert_int_equal(eep_jit_prefetch(jit, &spec), EEP_OK);
    assert_int_equal(eep_jit_prefetch(jit, &spec), EEP_OK); /* waiting already, or compiling */
    eep_jit_prefetch_wait(jit, &stats);
    assert_int_equal(eep_jit_compiler_runs(), runs + 1); /* once: the second was a hit */
    assert_true(stats.done >= 1);
    assert_int_equal(stats.failed, 0);
    assert_int_equal(eep_jit_compile(jit, &spec, &info), EEP_OK);
    assert_int_equal(info.cache_hit, 1);
    assert_int_equal(eep_jit_compiler_runs(), runs + 1);
    /* malformed: refused now, nothing queued */
    bad.template_args = "1u; }";
    jt_hook_reset();
    assert_int_equal(eep_jit_prefetch(jit, &bad), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(jt_hook_last, "template_args"));
    assert_int_equal(eep_jit_prefetch(NULL, &spec), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_jit_prefetch(jit, NULL), EEP_ERR_INVALID_ARG);
    eep_jit_destroy(jit);
    jt_rm_rf(cache);
}

/* A background compile waits until foreground compiles have been quiet for 2 s: right after a
 * foreground compile, a queued prefetch has not run; later it has. */
static void test_prefetch_yields_to_foreground(void **state)
{
    char                    *cache = jt_mkdtemp("jit-pre-quiet");
    eep_jit_t               *jit   = make_jit(cache);
    eep_jit_spec_t           fg = fill_spec, bg = fill_spec;
    eep_jit_prefetch_stats_t stats;
    eep_jit_info_t           info;
    unsigned long            runs;

    (void)state;
    fg.template_args = "21u";
    bg.template_args = "22u";
    assert_int_equal(eep_jit_compile(jit, &fg, &info), EEP_OK);
    assert_int_equal(info.cache_hit, 0);
    runs = eep_jit_compiler_runs();
    assert_int_equal(eep_jit_prefetch(jit, &bg), EEP_OK);
    usleep(300 * 1000);
    assert_int_equal(eep_jit_compiler_runs(), runs); /* still waiting for quiet */
    eep_jit_prefetch_wait(jit, &stats);
    assert_int_equal(stats.done, 1);
    assert_int_equal(eep_jit_compiler_runs(), runs + 1);
    eep_jit_destroy(jit);
    jt_rm_rf(cache);
}

/* A spec that does not compile: prefetch accepts it, the worker logs a warning and counts it. */
static void test_prefetch_failure_logged(void **state)
{
    char            *root = jt_mkdtemp("jit-pre-bad-root"), *cache = jt_mkdtemp("jit-pre-bad");
    eep_jit_params_t params = { .size = sizeof(params), .cache_dir = cache, .source_root = root };
    eep_jit_spec_t   spec   = { .size       = sizeof(spec),
                                .header     = "bad/bad.cuh",
                                .function   = "bad_body",
                                .param_type = "bad_params_t",
                                .backend    = EEP_JIT_BACKEND_NVRTC };
    eep_jit_prefetch_stats_t stats;
    eep_jit_t               *jit;

    (void)state;
    jt_write(root, "bad/bad.cuh",
             "#pragma once\ntypedef struct { int *out; } bad_params_t;\n"
             "__device__ void bad_body(const bad_params_t &p) { oops; }\n");
    assert_int_equal(eep_jit_create(&params, &jit), EEP_OK);
    jt_hook_reset();
    assert_int_equal(eep_jit_prefetch(jit, &spec), EEP_OK);
    eep_jit_prefetch_wait(jit, &stats);
    assert_int_equal(stats.failed, 1);
    assert_int_equal(stats.done, 0);
    assert_true(jt_hook_warns >= 1);
    assert_non_null(strstr(jt_hook_last, "prefetch of bad_body"));
    eep_jit_destroy(jit);
    jt_rm_rf(root);
    jt_rm_rf(cache);
}

/* More than 16 waiting: EEP_ERR_NO_RESOURCE; destroy with a full queue drops it and returns. */
static void test_prefetch_queue_bound(void **state)
{
    char          *cache = jt_mkdtemp("jit-pre-full");
    eep_jit_t     *jit   = make_jit(cache);
    eep_jit_spec_t spec  = fill_spec;
    char           targs[16];
    int            i, full = 0, queued = 0;
    unsigned long  runs = eep_jit_compiler_runs();

    (void)state;
    for (i = 0; i < 40; i++) {
        eep_status_t status;

        snprintf(targs, sizeof(targs), "%du", 100 + i);
        spec.template_args = targs; /* copied by the prefetch */
        status             = eep_jit_prefetch(jit, &spec);
        assert_true(status == EEP_OK || status == EEP_ERR_NO_RESOURCE);
        queued += status == EEP_OK;
        full += status == EEP_ERR_NO_RESOURCE;
    }
    printf("prefetch: %d queued, %d refused (queue full)\n", queued, full);
    assert_true(full >= 40 - 16 - 2); /* 16 wait, one or two may have left for the compiler */
    eep_jit_destroy(jit);             /* joins the compile in progress, drops the rest */
    assert_true(eep_jit_compiler_runs() - runs <= 2);
    jt_rm_rf(cache);
}

/* The PCH folders of processes that are gone are removed; a live one's, ours, and others stay. */
static void test_pch_sweep(void **state)
{
    char *base = jt_mkdtemp("jit-pch-sweep");
    char  rel[64], path[4096];
    pid_t dead = fork();

    (void)state;
    if (dead == 0) {
        _exit(0);
    }
    assert_true(dead > 0);
    assert_int_equal(waitpid(dead, NULL, 0), dead);
    snprintf(rel, sizeof(rel), "%d/x_0.pch", (int)dead);
    jt_write(base, rel, "stale");
    snprintf(rel, sizeof(rel), "%d/x_0.pch", (int)getpid());
    jt_write(base, rel, "ours");
    snprintf(rel, sizeof(rel), "%d/x_0.pch", (int)getppid());
    jt_write(base, rel, "a live process's");
    jt_write(base, "notes/readme", "not a process");
    assert_int_equal(eep_jit_nvrtc_pch_sweep(base), 1);
    snprintf(path, sizeof(path), "%s/%d", base, (int)dead);
    assert_int_not_equal(access(path, F_OK), 0);
    snprintf(path, sizeof(path), "%s/%d/x_0.pch", base, (int)getpid());
    assert_int_equal(access(path, F_OK), 0);
    snprintf(path, sizeof(path), "%s/%d/x_0.pch", base, (int)getppid());
    assert_int_equal(access(path, F_OK), 0);
    snprintf(path, sizeof(path), "%s/notes/readme", base);
    assert_int_equal(access(path, F_OK), 0);
    assert_int_equal(eep_jit_nvrtc_pch_sweep("/nonexistent/eep-pch"), 0);
    jt_rm_rf(base);
}

static void test_no_driver(void **state)
{
    char             *cache  = jt_mkdtemp("jit-nodev");
    eep_jit_kernel_t *kernel = NULL;
    eep_jit_t        *jit    = make_jit(cache);
    unsigned long     runs   = eep_jit_compiler_runs();

    (void)state;
    eep_cuda_sym_test_override("libeep-no-such-cuda-driver.so.1", NULL);
    jt_hook_reset();
    assert_int_equal(eep_jit_get_kernel(jit, &lsa_spec, &kernel), EEP_ERR_NO_DEVICE);
    assert_null(kernel);
    assert_non_null(strstr(jt_hook_last, "no CUDA driver"));
    assert_int_equal(eep_jit_compiler_runs(), runs); /* did not compile for nothing */
    eep_cuda_sym_test_override(NULL, NULL);
    eep_jit_destroy(jit);
    jt_rm_rf(cache);
}

static void test_bad_knob(void **state)
{
    eep_jit_t *jit = NULL;

    (void)state;
    setenv("EEP_JIT_BACKEND", "gcc", 1);
    jt_hook_reset();
    assert_int_equal(eep_jit_create(NULL, &jit), EEP_ERR_INVALID_ARG);
    assert_null(jit);
    assert_non_null(strstr(jt_hook_last, "EEP_JIT_BACKEND"));
    unsetenv("EEP_JIT_BACKEND");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lsa_nvrtc_cold_then_warm),
        cmocka_unit_test(test_warm_start_fresh_process),
        cmocka_unit_test(test_gin_nvcc),
        cmocka_unit_test(test_four_processes_one_compile),
        cmocka_unit_test(test_lock_holder_stopped),
        cmocka_unit_test(test_truncated_entry_rebuilt),
        cmocka_unit_test(test_flipped_bit_rebuilt),
        cmocka_unit_test(test_syntax_error_nvrtc),
        cmocka_unit_test(test_syntax_error_nvcc),
        cmocka_unit_test(test_keep_source),
        cmocka_unit_test(test_defines),
        cmocka_unit_test(test_header_from_root_not_cwd),
        cmocka_unit_test(test_pch_same_cubin),
        cmocka_unit_test(test_pch_sweep),
        cmocka_unit_test(test_prefetch),
        cmocka_unit_test(test_prefetch_yields_to_foreground),
        cmocka_unit_test(test_prefetch_failure_logged),
        cmocka_unit_test(test_prefetch_queue_bound),
        cmocka_unit_test(test_no_driver),
        cmocka_unit_test(test_bad_knob),
    };

    if (argc == 3 && strcmp(argv[1], "--warm-child") == 0) {
        return warm_child(argv[2]);
    }
    eep_log_set_level(EEP_LOG_LEVEL_WARN);
    eep_log_set_hook(jt_hook, NULL);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
