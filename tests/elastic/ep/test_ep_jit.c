/*
 * test_ep_jit.c - every variant of the direct-mode dispatch/combine kernels (kernels/ep/
 * dispatch.cuh, combine.cuh) compiles through the JIT with NVRTC, as elastic/ep/ep.c asks for them:
 * index width x mode (x phase for CPU_SYNC's copy kernel), and combine; generic (shape read from
 * the parameters) and with a shape compiled in (EEP_EPK_FIXED_*, as ep.c compiles them: the
 * issue's bf16 K 8 on 2 ranks, an fp8 K 6 on 8 ranks in every mode, and bf16 K 8 on 32 ranks,
 * the most direct mode takes); and the hybrid variants (EEP_EPK_GIN=1) with nvcc.  Needs NVRTC and
 * nvcc, not a GPU; skips when NVRTC cannot be loaded.
 */
#include <elf.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "elastic/gpu/cuda_sym.h"
#include "elastic/ep/ep_kernels.h"
#include "elastic/ep/ep_layout.h"
#include "elastic/jit/jit_int.h" /* eep_jit_compiler_runs */
#include "kernels/ep/ep_params.h"
#include "tests/common/ep_jit_test_util.h"

static char cache_dir[] = "/tmp/eep-test-ep-jit2-XXXXXX";

/* CUDA ELF: the section of per-function attributes, and the attribute that holds a function's
   stack frame bytes ({symbol index, bytes}, format EIFMT_SVAL) */
#define NV_INFO_SECTION ".nv.info"
#define NV_EIFMT_NVAL   0x01
#define NV_EIFMT_BVAL   0x02
#define NV_EIFMT_HVAL   0x03
#define NV_EIATTR_FRAME 0x11

/* The stack frame of the entry point of @p cubin, in bytes; -1 when it cannot be read. */
static long entry_frame_bytes(const unsigned char *elf, size_t size)
{
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)elf;
    const Elf64_Shdr *sh, *names, *symtab = NULL, *info = NULL;
    long              frame = -1;
    int               i;

    if (size < sizeof(*eh) || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
        eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_shoff + (uint64_t)eh->e_shnum * sizeof(*sh) > size) {
        return -1;
    }
    sh    = (const Elf64_Shdr *)(elf + eh->e_shoff);
    names = &sh[eh->e_shstrndx];
    for (i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type == SHT_SYMTAB) {
            symtab = &sh[i];
        } else if (strcmp((const char *)elf + names->sh_offset + sh[i].sh_name, NV_INFO_SECTION) ==
                   0) {
            info = &sh[i];
        }
    }
    if (symtab == NULL || info == NULL) {
        return -1;
    }
    for (uint64_t o = info->sh_offset; o + 4 <= info->sh_offset + info->sh_size;) {
        const unsigned char fmt = elf[o], attr = elf[o + 1];
        uint16_t            len;

        if (fmt == NV_EIFMT_NVAL) {
            o += 2;
            continue;
        }
        if (fmt == NV_EIFMT_BVAL || fmt == NV_EIFMT_HVAL) {
            o += fmt == NV_EIFMT_BVAL ? 3 : 4;
            continue;
        }
        memcpy(&len, elf + o + 2, sizeof(len));
        if (attr == NV_EIATTR_FRAME && len == 8) {
            uint32_t         sym, bytes;
            const Elf64_Sym *st;
            const char      *strtab;

            memcpy(&sym, elf + o + 4, 4);
            memcpy(&bytes, elf + o + 8, 4);
            st     = (const Elf64_Sym *)(elf + symtab->sh_offset) + sym;
            strtab = (const char *)elf + sh[symtab->sh_link].sh_offset;
            if (strcmp(strtab + st->st_name, EEP_JIT_ENTRY_NAME) == 0) {
                frame = (long)bytes;
            }
        }
        o += 4u + len;
    }
    return frame;
}

/* One kernel of a test: as elastic/ep/ep.c asks for it (eep_ep_kernel_spec_mode) for shape, or
   the generic variant (no shape compiled in) when shape is NULL; hybrid: EEP_EPK_GIN=1 (nvcc). */
typedef struct {
    const eep_ep_shape_t *shape;
    eep_ep_kernel_names_t names; /* spec's strings point here: a job never moves */
    eep_jit_spec_t        spec;
} ep_jit_job_t;

#define EP_JIT_MAX_JOBS 64
static ep_jit_job_t g_jobs[EP_JIT_MAX_JOBS];
static int          g_njobs;

static void add_job(int combine, int idx_bits, int mode, int phase, const eep_ep_shape_t *shape,
                    int hybrid)
{
    static const eep_ep_shape_t any = {
        .world = 2, .hidden = 7168, .num_topk = 8, .dtype = EEP_DTYPE_BF16
    };
    ep_jit_job_t *j;

    assert_true(g_njobs < EP_JIT_MAX_JOBS);
    j = &g_jobs[g_njobs++];
    memset(j, 0, sizeof(*j));
    j->shape = shape;
    eep_ep_kernel_spec_mode(combine, idx_bits, mode, phase, hybrid, shape != NULL ? shape : &any,
                            &j->names, &j->spec);
    if (shape == NULL) {
        j->spec.defines = NULL;
    }
    /* the direct variants through NVRTC, as ep.c compiles them; the hybrid ones need nvcc
       (NVRTC cannot compile NCCL 2.28.9's GIN headers): auto picks it from needs_gin */
    j->spec.backend = hybrid ? EEP_JIT_BACKEND_AUTO : EEP_JIT_BACKEND_NVRTC;
    assert_int_equal(j->spec.needs_gin, hybrid);
}

/*
 * Compile the jobs in min(cores, 4) child processes, job i in child i % n, into the disk cache
 * (NVRTC serialises compiles within a process: threads gained 10 s of 76 here), then check each
 * on this process: it compiles (a cache hit, or here with the log when the child failed), a
 * second compile is a cache hit, and a shaped direct entry's stack frame is smaller than its
 * parameters.  A child runs no cmocka assertion: it only fills the cache.
 */
static void compile_jobs(eep_jit_t *jit)
{
    long  cores = sysconf(_SC_NPROCESSORS_ONLN);
    int   n     = cores < 1 ? 1 : cores > 4 ? 4 : (int)cores, i, k;
    pid_t kids[4];

    fflush(NULL);
    for (k = 0; k < n; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            for (i = k; i < g_njobs; i += n) {
                eep_jit_info_t info;

                (void)eep_jit_compile(jit, &g_jobs[i].spec, &info);
            }
            _exit(0);
        }
    }
    for (k = 0; k < n; k++) {
        if (kids[k] > 0) {
            waitpid(kids[k], NULL, 0);
        }
    }
    for (i = 0; i < g_njobs; i++) {
        const ep_jit_job_t *j = &g_jobs[i];
        eep_jit_info_t      info;

        ep_jit_compile_check(jit, &j->spec, &info);
        if (j->shape != NULL && !j->spec.needs_gin) {
            /* The entry's parameter is __grid_constant__ (elastic/jit/jit_source.c): without
               it, every thread copies the parameter struct to its stack at entry (the struct
               reaches non-inlined fault reports by reference), and the kernel's blocks begin
               microseconds late.  The frame is then larger than the struct. */
            void  *cubin = NULL;
            size_t size  = 0;
            long   frame;

            assert_int_equal(eep_jit_cache_read(info.path, &cubin, &size), EEP_OK);
            frame = entry_frame_bytes(cubin, size);
            free(cubin);
            if (frame < 0 || frame >= (long)sizeof(eep_epk_params_t)) {
                fail_msg("%s<%s> W %d: stack frame %ld bytes, the parameters are %zu",
                         j->spec.function, j->spec.template_args, j->shape->world, frame,
                         sizeof(eep_epk_params_t));
            }
        }
    }
    g_njobs = 0;
}

static void test_compile_all(void **state)
{
    /* { index bits, mode, phase }: every dispatch variant elastic/ep/ep.c launches */
    static const int variants[][3] = { { 32, 0, 0 }, { 32, 0, 1 }, { 64, 0, 0 }, { 64, 0, 1 },
                                       { 32, 1, 0 }, { 64, 1, 0 }, { 32, 2, 0 }, { 64, 2, 0 } };
    static const eep_ep_shape_t bf16_k8_w2 = {
        .world = 2, .hidden = 7168, .num_topk = 8, .dtype = EEP_DTYPE_BF16
    };
    static const eep_ep_shape_t fp8_k6_w8 = {
        .world = 8, .hidden = 4096, .num_topk = 6, .dtype = EEP_DTYPE_FP8_E4M3
    };
    static const eep_ep_shape_t bf16_k8_w1 = {
        .world = 1, .hidden = 7168, .num_topk = 8, .dtype = EEP_DTYPE_BF16
    };
    static const eep_ep_shape_t fp8_k6_w1 = {
        .world = 1, .hidden = 4096, .num_topk = 6, .dtype = EEP_DTYPE_FP8_E4M3
    };
    /* 32 ranks: the most direct mode takes (per-rank arrays and shared memory grow with it) */
    static const eep_ep_shape_t bf16_k8_w32 = {
        .world = 32, .hidden = 7168, .num_topk = 8, .dtype = EEP_DTYPE_BF16
    };
    eep_jit_params_t params = { .size = sizeof(params), .cache_dir = cache_dir };
    eep_jit_t       *jit    = NULL;
    size_t           i;

    (void)state;
    assert_int_equal(eep_jit_create(&params, &jit), EEP_OK);
    for (i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
        add_job(0, variants[i][0], variants[i][1], variants[i][2], NULL, 0);
        add_job(0, variants[i][0], variants[i][1], variants[i][2], &bf16_k8_w2, 0);
        if (variants[i][0] == 32) { /* 8 ranks (one node), every mode */
            add_job(0, 32, variants[i][1], variants[i][2], &fp8_k6_w8, 0);
        }
    }
    add_job(0, 32, EEP_EPK_NO_CPU_SYNC, 0, &bf16_k8_w32, 0);
    /* one rank, rank-major: the path without records (kernels/ep/dispatch_solo.cuh), its
       routing (phase 2) in the modes that route and its rows (phase 3) in every mode */
    for (i = 0; i < 3; i++) {
        if (i != EEP_EPK_CACHED) {
            add_job(0, 64, (int)i, 2, &bf16_k8_w1, 0);
        }
        add_job(0, 64, (int)i, 3, &bf16_k8_w1, 0);
    }
    add_job(0, 32, EEP_EPK_CPU_SYNC, 2, &fp8_k6_w1, 0);
    add_job(1, 0, 0, 0, NULL, 0);
    add_job(1, 0, 0, 0, &bf16_k8_w2, 0);
    add_job(1, 0, 0, 0, &fp8_k6_w8, 0);
    add_job(1, 0, 0, 0, &bf16_k8_w32, 0);
    /* the top-k weight gradients of a combine (issue 26) */
    add_job(2, 0, 0, 0, &bf16_k8_w2, 0);
    add_job(2, 0, 0, 0, &fp8_k6_w8, 0);
    compile_jobs(jit);
    eep_jit_destroy(jit);
}

/*
 * The hybrid variants (EEP_EPK_GIN=1, kernels/ep/ep_gin.cuh) through the JIT as elastic/ep/ep.c
 * asks for them: needs_gin, so auto picks nvcc (NVRTC cannot compile NCCL 2.28.9's GIN headers),
 * the round's shape (make gpu-hybrid: bf16, top-k 8, H 2048, 4 ranks): the no-cpu-sync dispatch,
 * CPU_SYNC's copy kernel, the combine and the top-k weight gradients; a second compile of each is a cache hit (the warm
 * path: no compiler).  ~1 minute of nvcc here.
 */
static void test_compile_hybrid(void **state)
{
    static const eep_ep_shape_t bf16_k8_w4 = {
        .world = 4, .max_tokens = 256, .hidden = 2048, .num_topk = 8, .dtype = EEP_DTYPE_BF16
    };
    eep_jit_params_t params = { .size = sizeof(params), .cache_dir = cache_dir };
    eep_jit_t       *jit    = NULL;

    (void)state;
    assert_int_equal(eep_jit_create(&params, &jit), EEP_OK);
    add_job(EEP_EP_KERNEL_DISPATCH, 64, EEP_EPK_NO_CPU_SYNC, 0, &bf16_k8_w4, 1);
    add_job(EEP_EP_KERNEL_DISPATCH, 64, EEP_EPK_CPU_SYNC, 1, &bf16_k8_w4, 1);
    add_job(EEP_EP_KERNEL_COMBINE, 0, 0, 0, &bf16_k8_w4, 1);
    add_job(EEP_EP_KERNEL_TOPK_GRAD, 0, 0, 0, &bf16_k8_w4, 1);
    compile_jobs(jit); /* each one's second compile is a cache hit */
    eep_jit_destroy(jit);
}

/*
 * The shrink prefetch (EEP_EP_PREFETCH_SHRINK, elastic/ep/ep.c): after a kernel is built for 3
 * ranks, eep_ep_prefetch_shrink queues it for 2; the kernel a 2-rank survivor then asks for (its
 * spec built afresh, as ep.c builds it) is a cache hit and runs no compiler.  1 rank: nothing.
 */
static void test_shrink_prefetch(void **state)
{
    eep_jit_params_t         params = { .size = sizeof(params), .cache_dir = cache_dir };
    eep_ep_shape_t           shape  = { .world       = 3,
                                        .max_tokens  = 128,
                                        .hidden      = 2048,
                                        .num_topk    = 6,
                                        .num_experts = 48,
                                        .alignment   = 16,
                                        .dtype       = EEP_DTYPE_BF16 };
    eep_ep_kernel_names_t    names;
    eep_jit_spec_t           spec;
    eep_jit_prefetch_stats_t stats;
    eep_jit_info_t           info;
    eep_jit_t               *jit = NULL;
    unsigned long            runs;
    int                      combine;

    (void)state;
    assert_int_equal(eep_jit_create(&params, &jit), EEP_OK);
    for (combine = 0; combine < 2; combine++) {
        assert_int_equal(eep_ep_prefetch_shrink(jit, combine, 32, EEP_EPK_NO_CPU_SYNC, 0, &shape),
                         EEP_OK);
    }
    eep_jit_prefetch_wait(jit, &stats);
    assert_int_equal(stats.done, 2);
    assert_int_equal(stats.failed, 0);
    runs        = eep_jit_compiler_runs();
    shape.world = 2;
    for (combine = 0; combine < 2; combine++) {
        eep_ep_kernel_spec(combine, 32, EEP_EPK_NO_CPU_SYNC, 0, &shape, &names, &spec);
        assert_non_null(strstr(spec.defines, "EEP_EPK_FIXED_W=2 "));
        assert_int_equal(eep_jit_compile(jit, &spec, &info), EEP_OK);
        assert_int_equal(info.cache_hit, 1);
    }
    assert_int_equal(eep_jit_compiler_runs(), runs);
    shape.world = 1;
    assert_int_equal(eep_ep_prefetch_shrink(jit, 0, 32, EEP_EPK_NO_CPU_SYNC, 0, &shape), EEP_OK);
    eep_jit_prefetch_wait(jit, &stats);
    assert_int_equal(stats.done, 2); /* nothing queued for zero ranks */
    eep_jit_destroy(jit);
}

int main(void)
{
    const struct CMUnitTest tests[] = { cmocka_unit_test(test_compile_all),
                                        cmocka_unit_test(test_compile_hybrid),
                                        cmocka_unit_test(test_shrink_prefetch) };
    int                     rc      = ep_jit_test_begin(cache_dir);

    if (rc >= 0) {
        return rc;
    }
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    ep_jit_test_end(cache_dir);
    return rc;
}
