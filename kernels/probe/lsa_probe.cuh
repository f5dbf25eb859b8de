/*
 * lsa_probe.cuh - a probe of NCCL's LSA device API, compiled at run time by NVRTC.
 *
 * Each rank writes value + its LSA rank into slot[lsaRank] of every LSA peer's window (through
 * ncclGetLsaPointer), Rounds times, each round closed by an ncclLsaBarrierSession sync; afterwards
 * slot[r] on every rank holds value + r + Rounds - 1.  Used by the JIT tests (it is the reference
 * NVRTC-compiled kernel) and by `make gpu-check`.  NCCL's LSA barrier spins without a deadline:
 * this is a probe for a healthy machine, not a pattern for the data plane (barrier/ has the
 * bounded one).
 */
#ifndef EEP_KERNELS_PROBE_LSA_PROBE_CUH
#define EEP_KERNELS_PROBE_LSA_PROBE_CUH

#include <nccl_device.h>

#define EEP_LSA_PROBE_VERSION 1

typedef struct {
    ncclDevComm  comm;          /* by value, as NCCL wants it (200 bytes in 2.28.9) */
    ncclWindow_t win;           /* symmetric window holding the slots */
    size_t       offset;        /* byte offset of lsaSize uint32_t slots inside the window */
    uint32_t     value;         /* base of the values written */
    uint32_t     barrier_index; /* block b uses LSA barrier barrier_index + b */
    uint32_t     version;       /* EEP_LSA_PROBE_VERSION: the device checks the host's layout */
} eep_lsa_probe_params_t;

#if NCCL_VERSION_CODE == 22809
static_assert(sizeof(ncclDevComm) == 200, "ncclDevComm layout is not NCCL 2.28.9's");
#endif

template <int Rounds>
__device__ void eep_lsa_probe_body(const eep_lsa_probe_params_t &p)
{
    ncclCoopCta cta;

    if (p.version != EEP_LSA_PROBE_VERSION) {
        return; /* host and device disagree on the layout: write nothing */
    }
    ncclLsaBarrierSession<ncclCoopCta> bar{ cta, p.comm, ncclTeamTagLsa(),
                                            p.barrier_index + blockIdx.x };
    for (int r = 0; r < Rounds; r++) {
        if (blockIdx.x == 0) {
            for (int peer = threadIdx.x; peer < p.comm.lsaSize; peer += blockDim.x) {
                uint32_t *slots = (uint32_t *)ncclGetLsaPointer(p.win, p.offset, peer);

                slots[p.comm.lsaRank] = p.value + (uint32_t)p.comm.lsaRank + (uint32_t)r;
            }
        }
        bar.sync(cta, cuda::memory_order_acq_rel);
    }
}

#endif /* EEP_KERNELS_PROBE_LSA_PROBE_CUH */
