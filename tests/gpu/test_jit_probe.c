/*
 * test_jit_probe.c - the JIT's probe kernels on real GPUs, one process per GPU.
 *
 * The LSA probe (kernels/probe/lsa_probe.cuh) is compiled by NVRTC into a cache shared by the
 * ranks (one compiles, the rest wait on the per-key lock and read it), loaded, and launched with
 * the runtime's device communicator and window: every rank writes value + its LSA rank into every
 * peer's slot through ncclGetLsaPointer, twice, each round closed by an ncclLsaBarrierSession;
 * each rank then checks all slots, which were poisoned first.  The GIN probe, compiled by nvcc,
 * is loaded and launched too: without GIN contexts (no RDMA NIC) it must return at once.
 */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "elastic/runtime/runtime.h"
#include "tests/common/gpu_test.h"

/* Host mirrors of the probes' parameter structs; eep_jit_launch checks their size against the
   kernel's (cuFuncGetParamInfo), so a layout drift fails loudly rather than silently. */
typedef struct {
    eep_devcomm_blob_t comm;
    void              *win;
    size_t             offset;
    uint32_t           value, barrier_index, version;
} lsa_probe_host_params_t;

typedef struct {
    eep_devcomm_blob_t comm;
    void              *win;
    size_t             src_offset, dst_offset, bytes;
    int                peer;
    uint32_t           signal;
    uint64_t           expect;
} gin_probe_host_params_t;

int main(void)
{
    eep_jit_spec_t          lsa = { .size          = sizeof(lsa),
                                    .header        = "kernels/probe/lsa_probe.cuh",
                                    .function      = "eep_lsa_probe_body",
                                    .template_args = "2",
                                    .param_type    = "eep_lsa_probe_params_t",
                                    .launch_bounds = 128,
                                    .backend       = EEP_JIT_BACKEND_NVRTC };
    eep_jit_spec_t          gin = { .size          = sizeof(gin),
                                    .header        = "kernels/probe/gin_probe.cuh",
                                    .function      = "eep_gin_probe_body",
                                    .template_args = "0",
                                    .param_type    = "eep_gin_probe_params_t",
                                    .needs_gin     = 1 };
    eep_bootstrap_t        *bs  = gpu_test_bootstrap("test_jit_probe", 1);
    eep_runtime_t          *rt  = gpu_test_runtime(bs, NULL);
    const eep_cuda_sym_t   *cu  = gpu_test_cu();
    eep_runtime_info_t      info;
    eep_jit_params_t        jp;
    eep_jit_kernel_t       *kl = NULL, *kg = NULL;
    eep_jit_t              *jit = NULL;
    lsa_probe_host_params_t lp;
    gin_probe_host_params_t gp;
    char                    cache[256] = "";
    uint32_t                slots[64];
    size_t                  offset;
    double                  t0;
    int                     r, bad = 0;
    eep_status_t            status;

    GPU_OK(eep_runtime_query(rt, &info));
    GPU_REQUIRE(info.lsa_size <= 64, "lsa size %d", info.lsa_size);
    offset = (info.workspace_bytes + 4095) & ~(size_t)4095;
    GPU_REQUIRE(offset + 2 * 4096 <= info.window_bytes, "window too small for the probe");
    GPU_CU(cu->cuCtxSetCurrent((CUcontext)rt->cu_ctx));

    /* One cache for all ranks, made by rank 0. */
    if (gpu_test_rank == 0) {
        snprintf(cache, sizeof(cache), "/tmp/eep-jit-probe.XXXXXX");
        char *made = mkdtemp(cache);

        GPU_REQUIRE(made != NULL, "mkdtemp");
    }
    GPU_OK(eep_bootstrap_bcast(bs, cache, sizeof(cache), 0));
    memset(&jp, 0, sizeof(jp));
    jp.size      = sizeof(jp);
    jp.cache_dir = cache;
    GPU_OK(eep_jit_create(&jp, &jit));

    GPU_CU(cu->cuMemsetD32((CUdeviceptr)rt->buf + offset, 0xdeadbeefu, 1024));
    GPU_CU(cu->cuCtxSynchronize());
    t0     = gpu_test_now_ms();
    status = eep_jit_get_kernel(jit, &lsa, &kl);
    GPU_REQUIRE(status == EEP_OK, "lsa probe: %s: %s", eep_status_name(status), eep_jit_last_log());
    printf("lsa probe (nvrtc) ready in %.0f ms\n", gpu_test_now_ms() - t0);
    GPU_OK(eep_bootstrap_barrier(bs)); /* everyone poisoned before anyone writes */

    memset(&lp, 0, sizeof(lp));
    lp.comm          = rt->devcomm;
    lp.win           = rt->window;
    lp.offset        = offset;
    lp.value         = 1000;
    lp.barrier_index = 0;
    lp.version       = 1;
    GPU_OK(eep_jit_launch(kl, 1, 128, 0, NULL, &lp, sizeof(lp)));
    GPU_CU(cu->cuCtxSynchronize());
    GPU_CU(cu->cuMemcpyDtoH(slots, (CUdeviceptr)rt->buf + offset,
                            (size_t)info.lsa_size * sizeof(slots[0])));
    for (r = 0; r < info.lsa_size; r++) {
        if (slots[r] != lp.value + (uint32_t)r + 1) { /* 2 rounds: the last wrote value + r + 1 */
            printf("slot %d: 0x%x, want %u\n", r, slots[r], lp.value + r + 1);
            bad++;
        }
    }
    GPU_CHECK(bad == 0, "lsa probe: %d wrong slot(s) of %d", bad, info.lsa_size);
    printf("lsa probe: %d slot(s) correct across %d LSA rank(s)\n", info.lsa_size - bad,
           info.lsa_size);

    t0     = gpu_test_now_ms();
    status = eep_jit_get_kernel(jit, &gin, &kg);
    GPU_REQUIRE(status == EEP_OK, "gin probe: %s: %s", eep_status_name(status), eep_jit_last_log());
    printf("gin probe (nvcc) ready in %.0f ms\n", gpu_test_now_ms() - t0);
    if (!info.gin) {
        memset(&gp, 0, sizeof(gp));
        gp.comm       = rt->devcomm;
        gp.win        = rt->window;
        gp.src_offset = offset;
        gp.dst_offset = offset + 4096;
        gp.bytes      = 64;
        gp.peer       = (gpu_test_rank + 1) % info.nranks;
        gp.expect     = 1;
        GPU_OK(eep_jit_launch(kg, 1, 32, 0, NULL, &gp, sizeof(gp)));
        GPU_CU(cu->cuCtxSynchronize()); /* returned at once: no GIN contexts */
    }
    GPU_OK(eep_bootstrap_barrier(bs));
    eep_jit_destroy(jit);
    eep_runtime_destroy(rt);
    if (gpu_test_rank == 0) {
        char cmd[300];

        int ret;

        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", cache);
        ret = system(cmd);
        GPU_CHECK(ret == 0, "rm cache");
    }
    eep_bootstrap_destroy(bs);
    return gpu_test_finish("test_jit_probe");
}
