/*
 * gin_probe.cuh - a probe of NCCL's GIN device API; needs nvcc (spec.needs_gin).
 *
 * One put of `bytes` from src_offset to the peer's dst_offset with a SignalInc on `signal`, then
 * a wait until our own `signal` reaches `expect` (the peer's put to us landed), then a flush so
 * the source may be reused.  NCCL 2.28.9's GIN headers do not compile under NVRTC (packed
 * layouts), which is why this kernel exists: it proves the nvcc path.  It returns at once when the
 * dev comm has no GIN context (ncclGin must never be built then), e.g. on a machine without an
 * RDMA NIC.  GIN's waits have no deadline: a probe, not a data-plane pattern.
 */
#ifndef EEP_KERNELS_PROBE_GIN_PROBE_CUH
#define EEP_KERNELS_PROBE_GIN_PROBE_CUH

#include <nccl_device.h>

typedef struct {
    ncclDevComm  comm;
    ncclWindow_t win;
    size_t       src_offset;
    size_t       dst_offset;
    size_t       bytes;
    int          peer;   /* world rank */
    uint32_t     signal; /* GIN signal id */
    uint64_t     expect; /* wait until our signal is at least this */
} eep_gin_probe_params_t;

template <int Context>
__device__ void eep_gin_probe_body(const eep_gin_probe_params_t &p)
{
    ncclCoopCta cta;

    if (p.comm.ginContextCount == 0) {
        return;
    }
    ncclGin gin{ p.comm, Context };
    gin.put(ncclTeamWorld(p.comm), p.peer, p.win, p.dst_offset, p.win, p.src_offset, p.bytes,
            ncclGin_SignalInc{ p.signal }, ncclGin_None{}, cta);
    gin.waitSignal(cta, p.signal, p.expect);
    gin.flush(cta);
}

#endif /* EEP_KERNELS_PROBE_GIN_PROBE_CUH */
