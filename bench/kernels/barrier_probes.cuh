/*
 * bench/kernels/barrier_probes.cuh - experiments for `eep-bench barrier`, not barriers users get: three
 * variants of barrier/barrier_kernel.cuh's scale-up loop that ask where its ~1.4 us at 2 GPUs go.
 *
 *   template <int Variant>
 *   __device__ void eep_bench_barrier_probe_body(const eep_barrier_params_t &p)
 *
 * Suspicion: in a loop of barriers, the release fence before arrival e (MEMBAR.ALL.SYS) waits
 * for arrival e-1's store to be acknowledged over NVLink, so each barrier costs about a round
 * trip where one-way latency should do.
 *   Variant 0, "relaxed": a launch's first arrival is a release store, the later ones relaxed
 *     stores with no fence.  Not an acquire/release barrier (writes between barriers would not be
 *     ordered; this kernel makes none): it only measures what the fence costs.
 *   Variant 1, "two warps": arrival and wait alternate between warp 0 (odd barriers) and warp 1
 *     (even ones), both with release stores after __syncthreads: a valid barrier.  Faster than
 *     eep_barrier only if the hardware makes a fence wait for its own warp's stores alone.
 *     Measured 2026-11-30 (2 x H200): relaxed 0.86 us median, two warps 1.76, barrier 1.78: the
 *     fence costs ~0.6 us and waits for the other warp's store too.
 *   Variant 2, "pull": arrival is a release store of e into my own slot arrive[me] (local
 *     memory), and the wait polls peer t's own slot arrive[t] in peer t's window over NVLink.
 *     A valid barrier that makes no remote store, so the next arrival's fence has no NVLink
 *     acknowledgement to wait for; it pays a remote load round trip per poll instead.
 * One block of 64 threads, LSA peers only (lane t of the active warp has LSA peer t); the same
 * arrival slots and counts as eep_barrier, read once and written back once, so the runs around
 * a probe stay in step.  Every wait is bounded as in the barrier.
 */
#ifndef EEP_BENCH_BARRIER_PROBES_CUH
#define EEP_BENCH_BARRIER_PROBES_CUH

#include "../../barrier/barrier_kernel.cuh"

template <int Variant>
__device__ void eep_bench_barrier_probe_body(const eep_barrier_params_t &p)
{
    static_assert(Variant >= 0 && Variant <= 2, "Variant: 0 relaxed, 1 two warps, 2 pull");
    __shared__ int block_failed;

    const ncclDevComm  &dc    = eep_barrier_devcomm(p);
    const int           warp  = (int)(threadIdx.x >> 5);
    const eep_lsa_lane  lane  = eep_lsa_lane_init(p, dc, true, (int)(threadIdx.x & 31u));
    unsigned long long *own   = eep_lsa_own_count(p, dc);
    unsigned long long  epoch = *(volatile unsigned long long *)own;
    const eep_wait_ctx  w     = eep_barrier_wait_ctx(p, dc, &block_failed);
    /* Variant 2: peer t's own slot, in peer t's window (a remote load each poll). */
    eep_lsa_lane pull = lane;

    if (Variant == 2 && lane.active) {
        pull.wait_on = (const unsigned long long *)ncclGetLsaPointer(
            (ncclWindow_t)p.window, p.lsa_arrive_off + 8ull * (unsigned)(threadIdx.x & 31u),
            (int)(threadIdx.x & 31u));
    }

    if (threadIdx.x == 0) {
        block_failed = 0;
    }
    for (unsigned int it = 0; it < p.iterations; it++) {
        __syncthreads();
        epoch++;
        const bool turn = Variant == 1 ? warp == (int)(epoch & 1ull) : warp == 0;

        if (lane.active && turn) {
            if (Variant == 2) {
                eep_st_release_sys(own, epoch);
                (void)eep_barrier_lsa_wait(pull, w, epoch);
            } else if (Variant == 0 && it > 0) {
                eep_st_relaxed_sys(lane.store_to, epoch);
                (void)eep_barrier_lsa_wait(lane, w, epoch);
            } else {
                (void)eep_barrier_lsa(lane, w, epoch);
            }
        }
        __syncthreads();
        if (*(volatile int *)&block_failed) {
            break;
        }
        if (threadIdx.x == 0) {
            if (p.stamps != nullptr) {
                p.stamps[2ull * it + 1] = eep_globaltimer();
            }
            if (p.cycles != nullptr) {
                p.cycles[it] = clock64();
            }
        }
    }
    if (threadIdx.x == 0) {
        *(volatile unsigned long long *)own = epoch;
    }
}

#endif /* EEP_BENCH_BARRIER_PROBES_CUH */
