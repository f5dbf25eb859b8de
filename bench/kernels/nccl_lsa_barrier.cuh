/*
 * bench/kernels/nccl_lsa_barrier.cuh - the reference: NCCL's own ncclLsaBarrierSession, one CTA, looped
 * like ours, with the same parameter struct (devcomm, iterations, cycles/stamps hooks).  It uses
 * the device communicator's LSA barrier slot 0, which the runtime requests for this purpose.
 */
#ifndef EEP_BENCH_NCCL_LSA_BARRIER_CUH
#define EEP_BENCH_NCCL_LSA_BARRIER_CUH

#include <nccl.h>
#include <nccl_device.h>

#include "../../barrier/barrier_params.h"
#include "../../kernels/common/wait.cuh"

__device__ void eep_bench_nccl_lsa_body(const eep_barrier_params_t &p)
{
    const ncclDevComm                 &dc = *reinterpret_cast<const ncclDevComm *>(&p.devcomm);
    ncclLsaBarrierSession<ncclCoopCta> bar{ ncclCoopCta(), dc, ncclTeamTagLsa(), 0 };

    for (unsigned int it = 0; it < p.iterations; it++) {
        bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
        if (threadIdx.x == 0) {
            if (p.stamps != nullptr) {
                p.stamps[2ull * it + 1] = eep_globaltimer();
            }
            if (p.cycles != nullptr) {
                p.cycles[it] = clock64();
            }
        }
    }
}

#endif
