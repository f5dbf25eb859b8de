/*
 * ep_solo.c - dispatch at one rank (a survivor's, or a job of one GPU): the copy engine's share
 * of a rank-major dispatch, and the path without records (kernels/ep/dispatch_solo.cuh).
 */
#include "elastic/ep/ep_solo.h"

#include "elastic/ep/ep_args.h"
#include "elastic/ep/ep_handle.h"
#include "elastic/ep/ep_sm_model.h"
#include "util/log.h"

/*
 * One rank, rank-major, CPU_SYNC: recv_x is x row for row up to the first token that no expert
 * took, so the copy engine can move x to recv_x (no SM) while the copy blocks skip the bytes of
 * every record whose row is its token's index (p->ce_copied), writing its metadata only.  Two ways:
 * - overlapped (the caller's buffers, recv_capacity >= T): the copy is enqueued before the
 *   dispatch kernel, on the state's own stream (eep_ep_ce_fork), so it runs beside that kernel and
 *   the host's wait for the counts.  Every token received: the copy blocks run beside its tail,
 *   and the caller's stream waits for both.  Otherwise the copy blocks wait for the copy first
 *   (eep_ep_ce_join), and rewrite the rows after the first token not received; so rows from the
 *   exact count up to T may hold copies of x (the caller's capacity allows it; nothing reads them).
 *   Taken where it measured faster than the SMs copying (bench/RESULTS.md, 2026-12-03: H 7168,
 *   bf16 unless said): within a budget of EEP_EP_CE_BUDGET_SMS or fewer for x of
 *   EEP_EP_CE_MIN_BYTES_BUDGET or more (T 256, 3.5 MiB: 27.0 / 23.6 us at budgets 8 / 24
 *   against 32.6 / 25.1; T 4096: 157 / 80 against 271 / 111, fp8 148 / 72 against 224 / 95; but
 *   T 128, 1.75 MiB: 28.1 / 27.7 against 25.5 / 21.6, the fork and join cost more than that
 *   copy), and with a larger budget or none for x of EEP_EP_CE_MIN_BYTES or more (the whole
 *   device: T 2048, 28 MiB, 41.4 against 46.2 us; T 4096 64.4 against 72.6; but T 1024, 14 MiB,
 *   30.2 against 29.5, and T 256 34.8 against 22.4).
 * - serial (the alloc hook: recv_x exists only once the counts are known; or a capacity below T):
 *   every token received, the copy is enqueued then, before the copy blocks, within an SM budget
 *   of at most EEP_EP_COPY_ENGINE_MAX_BUDGET (eep_ep_copy_engine).  Measured at T 4096 bf16
 *   (bench/RESULTS.md "SM budgets"): 160 / 88 us at budgets 8 / 24 against 255 / 105 us by the
 *   SMs, but 72 against 67 on the whole device.
 * EEP_EP_COPY_ENGINE 0: never; 2: both ways whatever the size and budget (for measurement).
 * Those measurements took the budget for the copy blocks' only: the copy itself is a driver
 * kernel on every SM it can get (eep_ep_copy_engine_allowed), so within a budget smaller than the
 * device the rules below are reached only with EEP_EP_COPY_ENGINE 2.
 */
#define EEP_EP_COPY_ENGINE_MAX_BUDGET 24
#define EEP_EP_CE_BUDGET_SMS          32
#define EEP_EP_CE_MIN_BYTES_BUDGET    ((size_t)3 << 20)
#define EEP_EP_CE_MIN_BYTES           ((size_t)20 << 20)
/* The size rule of both ways: x of @p x_bytes within @p budget SMs (0: none). */
static int eep_ep_ce_size_ok(const struct eep_ep_state *st, size_t x_bytes, int budget,
                             int overlapped)
{
    if (!eep_ep_copy_engine_allowed((int)st->cfg.copy_engine, budget, st->device_sms)) {
        return 0;
    }
    if (st->cfg.copy_engine == 2) {
        return 1;
    }
    if (overlapped) {
        return x_bytes >= (budget >= 1 && budget <= EEP_EP_CE_BUDGET_SMS
                               ? EEP_EP_CE_MIN_BYTES_BUDGET
                               : EEP_EP_CE_MIN_BYTES);
    }
    /* the serial way, measured at T 4096 only: not below the size where even the overlapped
       way loses (T 128 within 24 SMs took it before this rule: 24.9-26.0 us against 21.6) */
    return budget >= 1 && budget <= EEP_EP_COPY_ENGINE_MAX_BUDGET &&
           x_bytes >= EEP_EP_CE_MIN_BYTES_BUDGET;
}

/* @p hb: the bytes of a row of x (x is num_tokens of them) */
int eep_ep_ce_wanted(const struct eep_ep_state *st, const eep_ep_shape_t *shape,
                     const eep_dispatch_args_t *a, size_t hb, int budget, int overlapped)
{
    if (st->cfg.copy_engine == 0 || shape->world != 1 || a->mode != EEP_EP_MODE_CPU_SYNC ||
        eep_ep_args_layout(a) != EEP_EP_LAYOUT_RANK_MAJOR || a->num_tokens <= 0) {
        return 0;
    }
    return eep_ep_ce_size_ok(st, (size_t)a->num_tokens * hb, budget, overlapped);
}

/* x (and its scales, @p sb bytes a row; 0: x only) to recv_x on @p stream; @p status_p: EEP_OK,
   or the first failure. */
static void eep_ep_ce_copy(const eep_cuda_sym_t *cu, const eep_epk_params_t *p, size_t T, size_t hb,
                           size_t sb, CUstream stream, eep_status_t *status_p)
{
    *status_p = eep_status_from_cu(
        cu->cuMemcpyDtoDAsync((CUdeviceptr)p->recv_x, (CUdeviceptr)p->x, T * hb, stream),
        "cuMemcpyDtoDAsync(recv_x)");
    if (*status_p == EEP_OK && sb != 0) {
        *status_p = eep_status_from_cu(cu->cuMemcpyDtoDAsync((CUdeviceptr)p->recv_x_scales,
                                                             (CUdeviceptr)p->x_scales, T * sb,
                                                             stream),
                                       "cuMemcpyDtoDAsync(recv_x_scales)");
    }
}

/* The state's side stream made to wait for the caller's work so far (@p stream), so that what
   is enqueued there next runs beside what the caller's stream runs next; the stream and its
   events are made at their first use and stay for the next call (freed with the state).  On
   failure nothing is enqueued there that touches a buffer. */
static eep_status_t eep_ep_side_open(const eep_cuda_sym_t *cu, struct eep_ep_state *st,
                                     void *stream)
{
    eep_status_t status = EEP_OK;

    if (st->ce_stream == NULL) {
        status = eep_status_from_cu(cu->cuStreamCreate(&st->ce_stream, CU_STREAM_NON_BLOCKING),
                                    "cuStreamCreate(side stream)");
    }
    if (status == EEP_OK && st->ce_fork == NULL) {
        status = eep_status_from_cu(cu->cuEventCreate(&st->ce_fork, CU_EVENT_DISABLE_TIMING),
                                    "cuEventCreate(side stream fork)");
    }
    if (status == EEP_OK && st->ce_join == NULL) {
        status = eep_status_from_cu(cu->cuEventCreate(&st->ce_join, CU_EVENT_DISABLE_TIMING),
                                    "cuEventCreate(side stream join)");
    }
    if (status == EEP_OK) {
        status = eep_status_from_cu(cu->cuEventRecord(st->ce_fork, (CUstream)stream),
                                    "cuEventRecord(side stream fork)");
    }
    if (status == EEP_OK) {
        status = eep_status_from_cu(cu->cuStreamWaitEvent(st->ce_stream, st->ce_fork, 0),
                                    "cuStreamWaitEvent(side stream fork)");
    }
    return status;
}

/* After work was enqueued on the side stream (@p status: how that went): its end recorded for
   eep_ep_ce_join, @p [out] owed 1; or, failing that, the host waits for it here (owed 0). */
static eep_status_t eep_ep_side_close(const eep_cuda_sym_t *cu, struct eep_ep_state *st,
                                      eep_status_t status, int *owed)
{
    if (status == EEP_OK) {
        status = eep_status_from_cu(cu->cuEventRecord(st->ce_join, st->ce_stream),
                                    "cuEventRecord(side stream join)");
    }
    /* without a join event to wait on, the side stream is waited for here */
    *owed = status == EEP_OK || cu->cuStreamSynchronize(st->ce_stream) != CUDA_SUCCESS;
    return status;
}

/*
 * The overlapped way's start, before the dispatch kernel: the state's stream waits for the
 * caller's work so far, then copies.  @p [out] owed: 1 when something was enqueued there, so the
 * caller's stream must wait for it (eep_ep_ce_join) before the call returns, whatever happens
 * next: the copy reads x and writes recv_x.
 */
eep_status_t eep_ep_ce_fork(const eep_cuda_sym_t *cu, struct eep_ep_state *st,
                            const eep_epk_params_t *p, size_t T, size_t hb, size_t sb, void *stream,
                            int *owed)
{
    eep_status_t status;

    *owed = 0;
    if ((status = eep_ep_side_open(cu, st, stream)) != EEP_OK) {
        return status;
    }
    eep_ep_ce_copy(cu, p, T, hb, sb, st->ce_stream, &status);
    return eep_ep_side_close(cu, st, status, owed);
}

/* The caller's stream waits for the overlapped copy (or, failing that, the host does). */
eep_status_t eep_ep_ce_join(const eep_cuda_sym_t *cu, struct eep_ep_state *st, void *stream,
                            int *owed)
{
    eep_status_t status;

    if (!*owed) {
        return EEP_OK;
    }
    status = eep_status_from_cu(cu->cuStreamWaitEvent((CUstream)stream, st->ce_join, 0),
                                "cuStreamWaitEvent(copy engine join)");
    if (status != EEP_OK) {
        cu->cuStreamSynchronize(st->ce_stream);
    }
    *owed = 0;
    return status;
}

/* The serial way, once the counts are known: every token received, in stream order. */
eep_status_t eep_ep_copy_engine(const eep_cuda_sym_t *cu, const struct eep_ep_state *st,
                                const eep_ep_shape_t *shape, const eep_dispatch_args_t *a,
                                int64_t rows, size_t hb, size_t sb, int budget, void *stream,
                                eep_epk_params_t *p)
{
    const size_t T = (size_t)a->num_tokens;
    eep_status_t status;

    p->ce_copied = 0;
    if (!eep_ep_ce_wanted(st, shape, a, hb, budget, 0) || rows != (int64_t)T) {
        return EEP_OK;
    }
    eep_ep_ce_copy(cu, p, T, hb, sb, (CUstream)stream, &status);
    p->ce_copied = status == EEP_OK;
    return status;
}

/*
 * The path without records (kernels/ep/dispatch_solo.cuh): one rank, rank-major outputs, direct
 * mode.  The general kernel's records, tags and count slots only order work between ranks;
 * with one rank they were its cost (bench/RESULTS.md, 2026-12-03: a CPU_SYNC call with nothing
 * to copy took 64 us at 24 SMs for T 4096, the metadata of 4,096 records one dependent chain
 * each).  Here a block routes, counts and numbers its chunk of tokens, the blocks exchange their
 * counts once, and each writes its tokens' words (and rows) where they belong.  EEP_EP_SOLO 0
 * keeps the general kernel (for measurement).
 */
int eep_ep_solo_wanted(const struct eep_ep_state *st, const eep_ep_shape_t *shape,
                       const eep_dispatch_args_t *a)
{
    return st->cfg.solo != 0 && shape->world == 1 && !st->hybrid &&
           eep_ep_args_layout(a) == EEP_EP_LAYOUT_RANK_MAJOR;
}

/* Blocks of a launch: the budget (else the device), and no more than a block for 16 tokens (a
   block that owns fewer only adds to the exchange of counts), at most the chunk scratch's. */
static unsigned eep_ep_solo_grid(const struct eep_ep_state *st, int budget, int T)
{
    int g = budget >= 1 ? budget : st->device_sms;

    g = g < st->device_sms ? g : st->device_sms;
    g = g < (T + 15) / 16 ? g : (T + 15) / 16;
    g = g < EEP_EPK_MAX_SEND_BLOCKS ? g : EEP_EPK_MAX_SEND_BLOCKS;
    return (unsigned)(g >= 1 ? g : 1);
}

/*
 * The copy engine on this path, measured against its own SM copy (bench/RESULTS.md, 2026-12-03
 * session 25, 1 x H200, H 7168 bf16, us SMs / copy engine at budgets 8 / 24 / the device): its
 * fixed cost (an event fork and join; CPU_SYNC ~20 us with the host's wait, when it still forked)
 * loses to the SMs on the whole device at every size measured (T 2048: CPU_SYNC 34.1 / 36.5,
 * NO_CPU_SYNC 30.3 / 30.6, CACHED 16.0 / 20.3; T 4096: 48.6 / 50.9, 39.7 / 44.1, 32.4 / 35.0)
 * and wins within small
 * budgets (T 512: 27.5 / 21.1, 26.4 / 12.0, 21.6 / 9.8 at 8 SMs; at 24 SMs 14.8 / 22.5 CPU_SYNC,
 * 12.9 / 12.1 NO_CPU_SYNC, 12.0 / 9.6 CACHED; T 1024 CPU_SYNC 20.1 / 21.1, T 2048 36.6 / 32.6;
 * T 4096 64.4 / 48.3, 64.1 / 40.5, 60.1 / 38.0).  So: within EEP_EP_SOLO_CE_SMALL_BUDGET SMs for x
 * of 3 MiB or more; within EEP_EP_CE_BUDGET_SMS for 3 MiB or more (CPU_SYNC: 20 MiB); with a
 * larger budget or none, never.  But "within small budgets" was not so: the copy ran on every SM
 * the routing kernel left (eep_ep_copy_engine_allowed), so now never unless EEP_EP_COPY_ENGINE 2.
 */
#define EEP_EP_SOLO_CE_SMALL_BUDGET 16
static int eep_ep_solo_ce(const struct eep_ep_state *st, int mode, size_t x_bytes, int budget)
{
    if (x_bytes == 0 ||
        !eep_ep_copy_engine_allowed((int)st->cfg.copy_engine, budget, st->device_sms)) {
        return 0;
    }
    if (st->cfg.copy_engine == 2) {
        return 1;
    }
    if (budget >= 1 && budget <= EEP_EP_SOLO_CE_SMALL_BUDGET) {
        return x_bytes >= EEP_EP_CE_MIN_BYTES_BUDGET;
    }
    if (budget >= 1 && budget <= EEP_EP_CE_BUDGET_SMS) {
        return x_bytes >=
               (mode == EEP_EP_MODE_CPU_SYNC ? EEP_EP_CE_MIN_BYTES : EEP_EP_CE_MIN_BYTES_BUDGET);
    }
    return 0; /* the whole device copies at nearly the copy engine's rate, without its cost */
}

static eep_status_t eep_ep_solo_launch(const struct eep_ep_state *st, eep_jit_kernel_t *k,
                                       unsigned grid, const eep_epk_params_t *p, void *stream)
{
    const size_t dyn = EEP_EPK_SOLO_SMEM(p->num_topk, p->num_local);

    return eep_jit_launch_ex(k, grid, EEP_EPK_THREADS, dyn, stream, p, sizeof(*p),
                             st->launch_flags);
}

/* Phase 3 writing every output from the handle's layout (@p sc: EEP_EPK_SOLO_SCALES with fp8),
   after the copy engine's x -> recv_x in stream order when @p copy (every token received): CPU_SYNC
   with the alloc hook, CACHED with tokens not received. */
static eep_status_t eep_ep_solo_place(const eep_cuda_sym_t *cu, const struct eep_ep_state *st,
                                      eep_jit_kernel_t *place, unsigned grid, eep_epk_params_t *p,
                                      size_t T, size_t hb, int sc, int copy, void *stream)
{
    eep_status_t status = EEP_OK;

    p->ce_copied = 0;
    if (copy) {
        eep_ep_ce_copy(cu, p, T, hb, 0, (CUstream)stream, &status);
        if (status != EEP_OK) {
            return status;
        }
        p->ce_copied = 1;
    }
    p->solo = EEP_EPK_SOLO_META | EEP_EPK_SOLO_ROWS | sc;
    return eep_ep_solo_launch(st, place, grid, p, stream);
}

/* The received rows of @p h's dispatch into *@p n_p when they are known: the count of a CPU_SYNC
   dispatch, or the word a one-rank NO_CPU_SYNC dispatch left in the rows ring (its kernel done;
   not yet, or overwritten by a later call's: unknown). */
static int eep_ep_solo_rows_known(const struct eep_ep_state *st, const eep_ep_handle_t *h,
                                  int64_t *n_p)
{
    uint64_t w;

    if (h->rows_exact) {
        *n_p = h->num_recv_rows;
        return 1;
    }
    if (h->rows_tag == 0) {
        return 0;
    }
    w = __atomic_load_n(&st->mirror[EEP_EP_ROWS_SLOT(h->rows_tag)], __ATOMIC_ACQUIRE);
    if ((uint32_t)(w >> 32) != h->rows_tag) {
        return 0;
    }
    *n_p = (int64_t)(uint32_t)w;
    return 1;
}

/*
 * The copy engine beside a launch of @p k: the launch on the side stream, the copy of x (and its
 * scales, @p sb) on the caller's, so the longer branch (the copy: ~29 us bf16, ~15 us fp8 at T
 * 4096, against a routing launch of ~12 us) starts at once and only the launch pays the fork's
 * event hop.  @p owed as eep_ep_ce_fork's (1 once the launch was enqueued: the caller joins).
 */
static eep_status_t eep_ep_solo_beside(const eep_cuda_sym_t *cu, struct eep_ep_state *st,
                                       eep_jit_kernel_t *k, unsigned grid,
                                       const eep_epk_params_t *p, size_t T, size_t hb, size_t sb,
                                       void *stream, int *owed)
{
    eep_status_t status;

    *owed = 0;
    if ((status = eep_ep_side_open(cu, st, stream)) != EEP_OK) {
        return status;
    }
    eep_ep_host_mark(st, EEP_EP_HOST_FORK);
    status = eep_ep_solo_launch(st, k, grid, p, st->ce_stream);
    if ((status = eep_ep_side_close(cu, st, status, owed)) != EEP_OK) {
        return status;
    }
    eep_ep_host_mark(st, EEP_EP_HOST_LAUNCH);
    eep_ep_ce_copy(cu, p, T, hb, sb, (CUstream)stream, &status);
    return status;
}

/*
 * The copy engine on this path, by mode (bench/RESULTS.md; T 4096, H 7168, 24 SMs, us bf16 /
 * fp8; 2026-12-06: the A/B of the side stream's two ways, 1 x H200):
 * - NO_CPU_SYNC: the copy (x and scales) forked beside the routing launch (eep_ep_ce_fork); after
 *   the join, a launch for the rows after the first token not received, which ends at once when
 *   every token was (the count in h_recv_n).  The other way round (the routing beside, the copy
 *   in the caller's stream) measured 45.3 / 31.2 against 35.8 / 24.6.  The routing writing the
 *   scale rows itself made fp8 slower (session 31: 30.0 against 27.0).
 * - CPU_SYNC: the routing beside the copy (eep_ep_solo_beside; the host waits for the counts
 *   while the copy runs): 39.9 / 29.8 against 43.9 / 32.8 for the copy after the routing in the
 *   caller's stream, which beat the copy beside (session 31: 43.9 / 32.6 against 48.5 / 34.3).
 *   With a token not received, the launch for the rows after it follows the join.
 * - CACHED: the count known (the handle's CPU_SYNC count, or the rows ring a NO_CPU_SYNC
 *   dispatch left it) and every token received: the launch that writes the ids, weights and
 *   scale rows beside the copy of x (34.0 / 21.9 against 34.3 / 22.6 the other way round;
 *   session 31: 34.6 / 23.0 against 38.2 / 26.9 serial); not known: the copy, then that launch
 *   rewriting the rows after a token not received, in stream order.
 * Both copies of fp8 as one cuMemcpyBatchAsync measured no faster (32.9 / 24.7 / 23.0 against
 * 32.8 / 24.6 / 22.6 us by mode, fp8) and were dropped.
 */
eep_status_t eep_ep_solo_dispatch(eep_runtime_t *rt, struct eep_ep_state *st,
                                  const eep_cuda_sym_t *cu, const eep_ep_shape_t *shape,
                                  const eep_dispatch_args_t *a, const eep_ep_handle_t *h,
                                  int idx_bits, int budget, size_t hb, size_t sb, void *stream,
                                  eep_epk_params_t *p, int64_t *rows_p, int *owed)
{
    const size_t      T    = (size_t)(a->num_tokens > 0 ? a->num_tokens : 0);
    const int         mode = (int)a->mode, El = p->num_local;
    const unsigned    grid  = eep_ep_solo_grid(st, budget, (int)T);
    const int         ce_x  = eep_ep_solo_ce(st, mode, T * hb, budget);
    const int         sc    = sb != 0 ? EEP_EPK_SOLO_SCALES : 0;
    eep_jit_kernel_t *route = NULL, *place = NULL;
    eep_status_t      status = EEP_OK;
    int               ce     = 0;

    *owed = 0;
    /* both kernels before the first launch: no module load while the first one spins */
    if ((mode != EEP_EP_MODE_CACHED &&
         (status = eep_ep_kernel(rt, st, 0, idx_bits, mode, 2, shape, stream, &route)) != EEP_OK) ||
        (status = eep_ep_kernel(rt, st, 0, idx_bits, mode, 3, shape, stream, &place)) != EEP_OK) {
        return status;
    }
    p->send_blocks = (int)grid;
    p->ce_copied   = 0;
    if (mode == EEP_EP_MODE_CACHED) {
        /* the handle's layout: x row for row when every token was received; the copy beside
           the launch when that is known, else before it (which rewrites the rows after a token
           not received), and without the copy engine when a token is known not received */
        int64_t   n     = 0;
        const int known = eep_ep_solo_rows_known(st, h, &n);

        *rows_p = h->num_recv_rows;
        if (!ce_x || (known && n != (int64_t)T) || (!known && h->num_recv_rows != (int64_t)T)) {
            return eep_ep_solo_place(cu, st, place, grid, p, T, hb, sc, 0, stream);
        }
        if (!known) {
            return eep_ep_solo_place(cu, st, place, grid, p, T, hb, sc, 1, stream);
        }
        p->ce_copied = 1;
        p->solo      = EEP_EPK_SOLO_META | sc;
        if ((status = eep_ep_solo_beside(cu, st, place, grid, p, T, hb, 0, stream, owed)) !=
            EEP_OK) {
            return status;
        }
        return eep_ep_ce_join(cu, st, stream, owed);
    }
    if (mode == EEP_EP_MODE_NO_CPU_SYNC) {
        /* the copy beside the routing; after it, the rows that are not their token's (none when
           every token was received: that launch reads the count and ends) */
        ce           = ce_x;
        p->ce_copied = ce;
        p->solo      = EEP_EPK_SOLO_META | (ce ? 0 : EEP_EPK_SOLO_ROWS | sc);
        *rows_p      = eep_ep_layout_rows_max(shape, EEP_EP_LAYOUT_RANK_MAJOR);
        /* the count, for cached calls on this handle (eep_ep_solo_rows_known) */
        st->rows_tag = st->rows_tag + 1 != 0 ? st->rows_tag + 1 : 1;
        p->rows_tag  = st->rows_tag;
        p->rows_word = st->mirror_dev + 8u * EEP_EP_ROWS_SLOT(st->rows_tag);
        if (!ce) {
            status = eep_ep_solo_launch(st, route, grid, p, stream);
            eep_ep_host_mark(st, EEP_EP_HOST_LAUNCH);
            return status;
        }
        /* here the copy goes beside and the routing stays (the other way round measured
           slower: see above) */
        if ((status = eep_ep_ce_fork(cu, st, p, T, hb, sb, stream, owed)) != EEP_OK) {
            return status;
        }
        eep_ep_host_mark(st, EEP_EP_HOST_FORK);
        status = eep_ep_solo_launch(st, route, grid, p, stream);
        eep_ep_host_mark(st, EEP_EP_HOST_LAUNCH);
        if (status != EEP_OK || (status = eep_ep_ce_join(cu, st, stream, owed)) != EEP_OK) {
            return status;
        }
        p->solo = EEP_EPK_SOLO_ROWS | sc;
        return eep_ep_solo_launch(st, place, grid, p, stream);
    }
    /* CPU_SYNC: with the caller's buffers for every token the routing writes the outputs too
       (beside the copy engine's copy); else they exist once the counts are known */
    const int outputs = a->alloc == NULL && a->recv_capacity >= (int64_t)T;
    int64_t   rows;

    __atomic_store_n(&st->mirror[El + 1], 0, __ATOMIC_RELEASE);
    ce           = outputs && ce_x;
    p->ce_copied = ce;
    p->solo      = outputs ? EEP_EPK_SOLO_META | (ce ? 0 : EEP_EPK_SOLO_ROWS | sc) : 0;
    status       = ce ? eep_ep_solo_beside(cu, st, route, grid, p, T, hb, sb, stream, owed)
                      : eep_ep_solo_launch(st, route, grid, p, stream);
    if (status != EEP_OK) {
        return status;
    }
    eep_ep_host_mark(st, EEP_EP_HOST_LAUNCH);
    if ((status = eep_ep_take_counts(rt, st, a, El, hb, sb, p, rows_p)) != EEP_OK) {
        return status;
    }
    eep_ep_host_mark(st, EEP_EP_HOST_COUNTS);
    rows = *rows_p;
    if (outputs) {
        /* every token received: done once the routing is (its words); else the rows after the
           first token not received, after the copy in stream order */
        if (!ce || (status = eep_ep_ce_join(cu, st, stream, owed)) != EEP_OK ||
            rows == (int64_t)T) {
            return status;
        }
        p->solo = EEP_EPK_SOLO_ROWS | sc;
        return eep_ep_solo_launch(st, place, grid, p, stream);
    }
    return eep_ep_solo_place(cu, st, place, grid, p, T, hb, sc, ce_x && rows == (int64_t)T, stream);
}
