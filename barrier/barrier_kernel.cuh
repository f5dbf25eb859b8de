/*
 * barrier/barrier_kernel.cuh - the hybrid barrier, as a device function template for the JIT.
 *
 *   template <int Mode, bool Gin> __device__ void eep_barrier_body(const eep_barrier_params_t &p)
 *
 * Mode 0 (parallel): block 0 runs the scale-up barrier (LSA stores over NVLink), block 1 the
 * scale-out barrier (GIN signals on the rail team), at the same time; launched with 1 block when
 * there is no scale-out (Gin false).  Mode 1 (sequential): one block, scale-out then scale-up: a
 * node peer signals the scale-up barrier only after its own scale-out barrier, so leaving it proves
 * that every rank of the job has arrived.
 *
 * Scale-up algorithm: window slot arrive[j] of rank r holds how many barriers LSA peer j has
 * entered (only j writes it).  To enter barrier e, thread t stores e into arrive[me] of peer t
 * (release, system scope), then waits until its own arrive[t] >= e.  My own slot arrive[me] is
 * never written by a peer, so it keeps my barrier count: read once per launch, written back once
 * at the end.  No epoch word, no reset, no atomics, every pointer computed once per launch.  A
 * peer can be at most one barrier ahead (it cannot leave e+1 before I enter it), so ">=" is exact.
 * Scale-out: the same counting with GIN signals: SignalInc{signal0 + my rail rank} to each rail
 * peer; signal signal0 + t counts the barriers rail peer t entered; my own count lives in a local
 * window word.  Every wait is bounded (impl/bounded_wait.cuh).
 *
 * GIN code is compiled only with EEP_BARRIER_GIN=1 (a spec define; nvcc): NCCL 2.28.9's GIN
 * headers do not compile under NVRTC, and the LSA-only variants must.
 */
#ifndef EEP_BARRIER_KERNEL_CUH
#define EEP_BARRIER_KERNEL_CUH

#include <nccl.h>
#include <nccl_device.h>

#include "barrier_params.h"
#include "../kernels/common/wait.cuh"

static_assert(sizeof(ncclDevComm) == EEP_DEVCOMM_BYTES, "ncclDevComm is not the 2.28.9 layout");
static_assert(alignof(ncclDevComm) <= 8, "ncclDevComm alignment");
static_assert(sizeof(ncclWindow_t) == sizeof(void *), "ncclWindow_t is a pointer");

#ifndef EEP_BARRIER_GIN
#define EEP_BARRIER_GIN 0
#endif

__device__ __forceinline__ const ncclDevComm &eep_barrier_devcomm(const eep_barrier_params_t &p)
{
    return *reinterpret_cast<const ncclDevComm *>(&p.devcomm);
}

/*
 * One thread's share of the scale-up barrier: the LSA peer it signals and waits for (one peer per
 * thread: the launch has at least lsaSize threads), with every pointer computed once per launch.
 * eep_barrier_body gives thread t peer t; bench/kernels/barrier_probes.cuh gives lane t of two warps
 * peer t.
 */
struct eep_lsa_lane {
    unsigned long long       *store_to; /* arrive[me] in the peer's window */
    const unsigned long long *wait_on;  /* arrive[peer] in my window */
    int                       peer_world;
    bool                      active; /* this thread has a peer (not itself) */
};

__device__ __forceinline__ eep_lsa_lane eep_lsa_lane_init(const eep_barrier_params_t &p,
                                                          const ncclDevComm &dc, bool do_lsa, int t)
{
    eep_lsa_lane l;
    const int    me = dc.lsaRank;

    l.active     = do_lsa && t < dc.lsaSize && t != me;
    l.store_to   = nullptr;
    l.wait_on    = nullptr;
    l.peer_world = -1;
    if (l.active) {
        ncclWindow_t win = (ncclWindow_t)p.window;

        l.store_to = (unsigned long long *)ncclGetLsaPointer(win, p.lsa_arrive_off + 8ull * me, t);
        l.wait_on  = (const unsigned long long *)ncclGetLsaPointer(win, p.lsa_arrive_off + 8ull * t,
                                                                   me);
        l.peer_world = ncclTeamRankToWorld(dc, ncclTeamLsa(dc), t);
    }
    return l;
}

/* My arrival slot arrive[me], in my window: the count of scale-up barriers I entered. */
__device__ __forceinline__ unsigned long long *eep_lsa_own_count(const eep_barrier_params_t &p,
                                                                 const ncclDevComm          &dc)
{
    return (unsigned long long *)ncclGetLsaPointer(
        (ncclWindow_t)p.window, p.lsa_arrive_off + 8ull * (unsigned)dc.lsaRank, dc.lsaRank);
}

/* The wait context of a barrier block (@p block_failed: its shared flag). */
__device__ __forceinline__ eep_wait_ctx eep_barrier_wait_ctx(const eep_barrier_params_t &p,
                                                             const ncclDevComm          &dc,
                                                             int *block_failed)
{
    eep_wait_ctx w = eep_wait_ctx_make(p.fault, p.fault_claim, block_failed, p.timeout_ns, dc.rank,
                                       EEP_ABORT_CHECK_NS);

    w.wait_ns = p.wait_stats;
    return w;
}

/* After arriving at scale-up barrier `epoch`: wait for the peer's arrival. */
__device__ __forceinline__ bool eep_barrier_lsa_wait(const eep_lsa_lane &l, const eep_wait_ctx &w,
                                                     unsigned long long epoch)
{
    /* Poll with relaxed loads (no L1 invalidation per poll); the load that saw the peer's
       release store, then an acquire fence, synchronize with it and order everything after the
       barrier (the block follows through the caller's __syncthreads). */
    const unsigned long long *slot = l.wait_on;
    auto                      poll = [slot] { return eep_ld_relaxed_sys(slot); };
    const bool ok = eep_wait_geq(w, poll, epoch, EEP_PHASE_BARRIER_LSA, l.peer_world);
    if (ok) {
        eep_fence_acquire_sys();
    }
    return ok;
}

/* Enter scale-up barrier `epoch`: release-store it to the peer, wait for the peer's. */
__device__ __forceinline__ bool eep_barrier_lsa(const eep_lsa_lane &l, const eep_wait_ctx &w,
                                                unsigned long long epoch)
{
    if (!l.active) {
        return true;
    }
    eep_st_release_sys(l.store_to, epoch);
    return eep_barrier_lsa_wait(l, w, epoch);
}

#if EEP_BARRIER_GIN
/* One scale-out (GIN, rail team) barrier: entering barrier `epoch`.  All threads call it. */
__device__ __forceinline__ bool eep_barrier_gin(const eep_barrier_params_t &p,
                                                const eep_wait_ctx &w, unsigned long long epoch)
{
    const ncclDevComm &dc   = eep_barrier_devcomm(p);
    const ncclTeam     rail = ncclTeamRail(dc);
    ncclGin            gin(dc, 0);
    bool               ok = true;

    __syncthreads(); /* the block's earlier writes precede its signals */
    for (int t = threadIdx.x; t < rail.nRanks; t += blockDim.x) {
        if (t != rail.rank) {
            gin.signal(rail, t, ncclGin_SignalInc{ (ncclGinSignal_t)(p.gin_signal0 + rail.rank) });
        }
    }
    for (int t = threadIdx.x; t < rail.nRanks && ok; t += blockDim.x) {
        if (t == rail.rank) {
            continue;
        }
        const ncclGinSignal_t sig = (ncclGinSignal_t)(p.gin_signal0 + t);
        auto poll                 = [&gin, sig] { return (unsigned long long)gin.readSignal(sig); };

        ok = eep_wait_geq(w, poll, epoch, EEP_PHASE_BARRIER_GIN, ncclTeamRankToWorld(dc, rail, t));
    }
    return ok;
}
#endif

template <int Mode, bool Gin>
__device__ void eep_barrier_body(const eep_barrier_params_t &p)
{
    static_assert(Mode == 0 || Mode == 1, "Mode: 0 parallel, 1 sequential");
    static_assert(!Gin || EEP_BARRIER_GIN, "GIN variants need EEP_BARRIER_GIN=1 (spec defines)");
    __shared__ int block_failed;

    const ncclDevComm &dc = eep_barrier_devcomm(p);
    /* Which barriers this block runs: parallel splits them over blocks 0 (LSA) and 1 (GIN). */
    const bool         do_lsa = Mode == 1 || blockIdx.x == 0;
    const bool         do_gin = Gin && (Mode == 1 || blockIdx.x == 1);
    const eep_lsa_lane lane   = eep_lsa_lane_init(p, dc, do_lsa, (int)threadIdx.x);
    /* My own arrival slot holds the number of scale-up barriers I entered (peers never write
       it); the GIN count is a local word.  Read once, written back once at the end. */
    unsigned long long *own       = do_lsa ? eep_lsa_own_count(p, dc) : nullptr;
    unsigned long long *gin_epoch = do_gin
                                        ? (unsigned long long *)ncclGetLsaPointer(
                                              (ncclWindow_t)p.window, p.gin_epoch_off, dc.lsaRank)
                                        : nullptr;
    unsigned long long  lsa_epoch = do_lsa ? *(volatile unsigned long long *)own : 0;
    unsigned long long  gin_count = do_gin ? *(volatile unsigned long long *)gin_epoch : 0;

    const eep_wait_ctx w = eep_barrier_wait_ctx(p, dc, &block_failed);
    if (threadIdx.x == 0) {
        block_failed = 0;
    }
    __syncthreads();

    for (unsigned int it = 0; it < p.iterations; it++) {
        if (p.delay_ns != 0) { /* test hook: a late rank */
            unsigned long long t0 = eep_globaltimer();
            while (eep_globaltimer() < t0 + p.delay_ns) {
            }
            __syncthreads();
        }
        if (p.stamps != nullptr && threadIdx.x == 0 && blockIdx.x == 0) {
            p.stamps[2ull * it] = eep_globaltimer();
        }
        bool ok = true;
#if EEP_BARRIER_GIN
        if (do_gin) {
            ok = eep_barrier_gin(p, w, ++gin_count);
            if (Mode == 1) {
                __syncthreads(); /* every GIN wait of the block done before arriving on LSA */
                ok = ok && !*(volatile int *)&block_failed;
            }
        }
#endif
        if (do_lsa && ok) {
            __syncthreads(); /* release: the block's earlier writes precede the arrival stores */
            ok = eep_barrier_lsa(lane, w, ++lsa_epoch);
        }
        __syncthreads();
        if (*(volatile int *)&block_failed) {
            break;
        }
        if (threadIdx.x == 0 && blockIdx.x == 0) {
            if (p.stamps != nullptr) {
                p.stamps[2ull * it + 1] = eep_globaltimer();
            }
            if (p.cycles != nullptr) {
                p.cycles[it] = clock64();
            }
        }
    }
    if (threadIdx.x == 0) {
        if (do_lsa) {
            *(volatile unsigned long long *)own = lsa_epoch;
        }
        if (do_gin) {
            *(volatile unsigned long long *)gin_epoch = gin_count;
        }
    }
}

#endif /* EEP_BARRIER_KERNEL_CUH */
