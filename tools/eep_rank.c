/*
 * eep_rank.c - eep-rank: one rank of an elastic job as a process (what `make run` and
 * `make gpu-elastic` start per rank).
 *
 *   eep-rank [--steps barrier|moe] [--interval-ms N] [--seconds N] [--max-steps N]
 *            [--timeout-ms N] [--view-wait-s N] [--join-timeout-s N] [--tokens N] [--hidden N]
 *            [--topk N] [--experts N] [--seed N] [--arm-file PATH] [--fault SPEC]... [-v]
 *            [--agent-faults] [--moe-barrier] [--layout expert|rank] [--mode MODE]
 *            [--help] [--version]
 *
 * Options are getopt_long's (--opt=value or --opt value); --help lists them with their defaults.
 *   --steps barrier   each step is one sequential barrier (default: runs everywhere today)
 *   --steps moe       each step is dispatch -> stand-in expert -> combine through eep/ep.h,
 *                     checked bit for bit against tools/eep_step.c (seeded routing)
 *   --moe-barrier     with --steps moe: each step opens with a sequential barrier (a training
 *                     step's other collective), where faults with phase=barrier land
 *   --layout rank     with --steps moe: rank-major outputs (EEP_EP_LAYOUT_RANK_MAJOR: a row per
 *                     received token, its local lanes and weights checked too; the stand-in
 *                     expert sums the token's local experts, as a framework that permutes does)
 *   --mode M          with --steps moe: no-cpu-sync (default), cpu-sync (eep_dispatch waits for
 *                     the counts; host counts checked), cached (then a CACHED dispatch of other
 *                     token data on the handle, whose rows the expert and combine take)
 *   --arm-file PATH   on SIGUSR1, read one fault SPEC from PATH and arm it for the next step
 *                     (make gpu-elastic writes "PHASE KILL|STOP": a death mid-kernel)
 *   --fault SPEC      arm a fault at start (repeatable), e.g. --fault "stall phase=combine ms=800
 *                     step=50"; SPEC's grammar is tools/eep_fault.h's (docs/fault-schedule.md)
 *   --agent-faults    arm the specs `eepctl inject-fault data-plane MEMBER SPEC` sends through
 *                     eepd and this rank's agent (eep_agent_take_fault), between steps
 * Fault injection is off unless --fault, --arm-file or --agent-faults is given.  Each fault that fires prints an
 * "inject" line first (and "dying" before a self-raised KILL, STOP or exit).
 *
 * The rank joins through the agent (EEP_JOB, EEP_ETCD_ENDPOINTS) and creates its runtime from the
 * membership (the agent as eep_membership_t): the first view that holds it gives rank, world and
 * the communicator.  Between steps it calls eep_membership_sync, which applies a new view in
 * place (shrink, or a fresh communicator for a newcomer).  A step whose device wait expires
 * (EEP_ERR_PEER_TIMEOUT) reports the suspect (eep_membership_fault) and waits, bounded, for the
 * view that removes it; a view that arrives while a kernel waits makes the wait stop at once
 * (the agent's notify raises a flag the wait loop checks).  A fenced rank (removed, or its lease
 * lost) waits for a view that holds it again.  One JSON line per step and per event on stdout:
 *   {"t_ms":..,"event":"step","epoch":E,"rank":R,"world":W,"step":N,"ok":1,"mode":"barrier",
 *    "barrier_us":..,"dispatch_us":..,"combine_us":..,"faults":F,"status":"EEP_OK"}
 *   {"t_ms":..,"event":"view","epoch":E,"rank":R,"world":W,"action":"shrink","apply_ms":..,
 *    "local_experts":L,"fds":N,"gpu_free_mb":M}
 *   {"t_ms":..,"event":"fault","epoch":E,"status":..,"phase":..,"peer":P}
 *   {"t_ms":..,"event":"dying","phase":..,"signal":"KILL"}   (just before a self-raised signal)
 *   {"t_ms":..,"event":"inject","action":"stall","phase":"dispatch","step":N,"ms":..,
 *    "injected":I}                                            (a fault of --fault/--arm-file)
 * Exit: 0 after SIGTERM/SIGINT or --seconds/--max-steps, 2 for usage, 3 when a step's result was
 * wrong, 4 after an injected exit, else the negated eep_status_t (80: no GPU).  Every wait is
 * bounded (an injected hang without ms lasts until SIGTERM).
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control/agent/agent.h"
#include "control/agent/agent_membership.h"
#include "eep/eep.h"
#include "eep/ep.h"
#include "eep/version.h"
#include "elastic/gpu/cuda_sym.h"
#include "tools/eep_rank.h"
#include "util/clock.h"
#include "util/config.h"
#include "util/fd_count.h"
#include "util/log.h"

volatile sig_atomic_t eep_rank_stop, eep_rank_view_flag, eep_rank_arm_req;

const char *const eep_rank_phase_names[] = { "none", "barrier", "dispatch", "combine" };

static void eep_rank_signal(int sig)
{
    if (sig == SIGUSR1) {
        eep_rank_arm_req = 1;
    } else {
        eep_rank_stop = 1;
    }
}

/* The agent's thread: a view or a lost lease can be polled. */
static void eep_rank_notify(void *arg)
{
    (void)arg;
    eep_rank_view_flag = 1;
}

static long long eep_rank_gpu_free_mb(void)
{
    const eep_cuda_sym_t *cu;
    size_t                free_b = 0, total = 0;

    if (eep_cuda_sym_driver(&cu) != EEP_OK || cu->cuMemGetInfo(&free_b, &total) != CUDA_SUCCESS) {
        return -1;
    }
    return (long long)(free_b >> 20);
}

static void eep_rank_line_view(const eep_rank_t *r)
{
    printf("{\"t_ms\":%lld,\"event\":\"view\",\"epoch\":%llu,\"rank\":%d,\"world\":%d,"
           "\"action\":\"%s\",\"apply_ms\":%.1f,\"local_experts\":%d,\"degraded\":%d,\"fds\":%d,"
           "\"gpu_free_mb\":%lld}\n",
           eep_clock_wall_ms(), (unsigned long long)r->info.epoch, r->info.rank, r->info.world,
           r->info.action, r->info.apply_ms, r->info.num_local, r->info.degraded, eep_open_fds(),
           eep_rank_gpu_free_mb());
}

static void eep_rank_line_step(const eep_rank_t *r, eep_status_t status, int ok, const char *bad)
{
    printf("{\"t_ms\":%lld,\"event\":\"step\",\"epoch\":%llu,\"rank\":%d,\"world\":%d,"
           "\"step\":%llu,\"ok\":%d,\"mode\":\"%s\",\"barrier_us\":%.0f,\"dispatch_us\":%.0f,"
           "\"combine_us\":%.0f,\"faults\":%llu,\"status\":\"%s\"%s%s%s}\n",
           eep_clock_wall_ms(), (unsigned long long)r->info.epoch, r->info.rank, r->info.world,
           (unsigned long long)r->step, ok, r->moe ? "moe" : "barrier",
           r->t_us[EEP_RANK_PH_BARRIER], r->t_us[EEP_RANK_PH_DISPATCH],
           r->t_us[EEP_RANK_PH_COMBINE], (unsigned long long)r->faults, eep_status_name(status),
           bad ? ",\"bad\":\"" : "", bad ? bad : "", bad ? "\"" : "");
}

static void eep_rank_line_fault(const eep_rank_t *r, eep_status_t status, eep_rank_phase_t phase)
{
    eep_fault_record_t rec;
    int                peer = -1;

    if (r->rt != NULL && eep_runtime_fault(r->rt, &rec) == EEP_OK) {
        peer = rec.peer;
    }
    printf("{\"t_ms\":%lld,\"event\":\"fault\",\"epoch\":%llu,\"rank\":%d,\"world\":%d,"
           "\"status\":\"%s\",\"phase\":\"%s\",\"peer\":%d}\n",
           eep_clock_wall_ms(), (unsigned long long)r->info.epoch, r->info.rank, r->info.world,
           eep_status_name(status), eep_rank_phase_names[phase], peer);
}

static int eep_rank_should_abort(void *ctx)
{
    (void)ctx;
    return eep_rank_stop || eep_rank_view_flag;
}

/* Wait for the stream; a view or a signal stops the wait at once. */
static eep_status_t eep_rank_wait(eep_rank_t *r, eep_rank_phase_t phase, double t0)
{
    eep_status_t status = eep_runtime_stream_wait(r->rt, NULL, eep_rank_should_abort, NULL);

    r->t_us[phase] = (eep_clock_ms() - t0) * 1000.0;
    return status;
}

/* A barrier step; @p slow: EEP_RANK_SLOW_MS applies here (not when it opens a MoE step, whose
   dispatch takes it). */
static eep_status_t eep_rank_step_barrier(eep_rank_t *r, eep_rank_phase_t *phase_p, int slow)
{
    double             t0;
    eep_barrier_opts_t o;
    eep_status_t       status;

    *phase_p = EEP_RANK_PH_BARRIER;
    if (slow) {
        eep_rank_obs_slow(&r->obs);
    }
    if ((status = eep_rank_fault_before(r, EEP_RANK_PH_BARRIER)) != EEP_OK) {
        return status;
    }
    t0 = eep_clock_ms();
    memset(&o, 0, sizeof(o));
    o.size = sizeof(o);
    o.mode = EEP_BARRIER_SEQUENTIAL;
    /* The first barrier of a view waits for peers that compile its variant (nvcc for GIN takes
       seconds): EEP_RANK_FIRST_TIMEOUT_MS, not the deadline that detects a dead peer. */
    o.timeout_ms = r->fresh_view ? EEP_RANK_FIRST_TIMEOUT_MS : 0;
    status       = eep_barrier_ex(r->rt, &o, NULL);
    if (status != EEP_OK) {
        return status;
    }
    eep_rank_fault_after(r, EEP_RANK_PH_BARRIER);
    return eep_rank_wait(r, EEP_RANK_PH_BARRIER, t0);
}

static eep_status_t eep_rank_cu(CUresult res, const char *what)
{
    return eep_status_from_cu(res, what);
}

/* MoE buffers, sized for EEP_RANK_MAX_WORLD ranks (fixed across views). */
static eep_status_t eep_rank_moe_alloc(eep_rank_t *r)
{
    const eep_cuda_sym_t *cu;
    size_t                T = (size_t)r->tokens, H = (size_t)r->hidden, K = (size_t)r->topk;
    eep_status_t          status;
    void **dev[] = { &r->d_x,      &r->d_idx,    &r->d_w,       &r->d_recv_x, &r->d_recv_idx,
                     &r->d_recv_w, &r->d_counts, &r->d_offsets, &r->d_y,      &r->d_out };
    size_t bytes[10], offsets;
    int    i;

    if ((status = eep_cuda_sym_driver(&cu)) != EEP_OK) {
        return status;
    }
    /* every world a view can have, 1..EEP_RANK_MAX_WORLD, under the default placement (a
       rank-major layout needs fewer: one row per received token, world * tokens) */
    r->rows_max = eep_step_rows_max(r->tokens, r->topk, r->experts, EEP_RANK_MAX_WORLD);
    if (r->rows_max < 0) {
        eep_error(EEP_SUBSYS_TOOL,
                  "the MoE shape is out of range: --tokens %d --topk %d "
                  "--experts %d",
                  r->tokens, r->topk, r->experts);
        return EEP_ERR_INVALID_ARG;
    }
    /* expert-major offsets [El + 1], rank-major's [world + 1] */
    offsets  = (size_t)(r->experts > EEP_RANK_MAX_WORLD ? r->experts : EEP_RANK_MAX_WORLD) + 1;
    bytes[0] = T * H * 2;
    bytes[1] = T * K * 8;
    bytes[2] = T * K * 4;
    bytes[3] = (size_t)r->rows_max * H * 2;
    bytes[4] = (size_t)r->rows_max * K * 4;
    bytes[5] = (size_t)r->rows_max * K * 4;
    bytes[6] = (size_t)r->experts * 4;
    bytes[7] = offsets * 4;
    bytes[8] = (size_t)r->rows_max * H * 2;
    bytes[9] = T * H * 2;
    for (i = 0; i < 10; i++) {
        CUdeviceptr p = 0;

        status = eep_rank_cu(cu->cuMemAlloc(&p, bytes[i] + 16), "cuMemAlloc(eep-rank)");
        if (status != EEP_OK) {
            return status;
        }
        *dev[i] = (void *)p;
    }
    r->h_x            = malloc(bytes[0]);
    r->h_idx          = malloc(bytes[1]);
    r->h_w            = malloc(bytes[2]);
    r->h_rows         = malloc(bytes[3]);
    r->h_want_rows    = malloc(bytes[3]);
    r->h_y            = malloc(bytes[8]);
    r->h_out          = malloc(bytes[9]);
    r->h_want_out     = malloc(bytes[9]);
    r->h_counts       = malloc(bytes[6]);
    r->h_want_counts  = malloc(bytes[6]);
    r->h_ridx         = malloc(bytes[4]);
    r->h_want_ridx    = malloc(bytes[4]);
    r->h_rw           = malloc(bytes[5]);
    r->h_want_rw      = malloc(bytes[5]);
    r->h_offsets      = malloc(bytes[7]);
    r->h_want_offsets = malloc(bytes[7]);
    if (r->h_x == NULL || r->h_idx == NULL || r->h_w == NULL || r->h_rows == NULL ||
        r->h_want_rows == NULL || r->h_y == NULL || r->h_out == NULL || r->h_want_out == NULL ||
        r->h_counts == NULL || r->h_want_counts == NULL || r->h_ridx == NULL ||
        r->h_want_ridx == NULL || r->h_rw == NULL || r->h_want_rw == NULL || r->h_offsets == NULL ||
        r->h_want_offsets == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    return EEP_OK;
}

static void eep_rank_moe_free(eep_rank_t *r)
{
    const eep_cuda_sym_t *cu;
    void  *dev[]  = { r->d_x,      r->d_idx,    r->d_w,       r->d_recv_x, r->d_recv_idx,
                      r->d_recv_w, r->d_counts, r->d_offsets, r->d_y,      r->d_out };
    void  *host[] = { r->h_x,         r->h_idx,         r->h_w,       r->h_rows,
                      r->h_want_rows, r->h_y,           r->h_out,     r->h_want_out,
                      r->h_counts,    r->h_want_counts, r->h_ridx,    r->h_want_ridx,
                      r->h_rw,        r->h_want_rw,     r->h_offsets, r->h_want_offsets };
    size_t i;

    if (eep_cuda_sym_driver(&cu) == EEP_OK) {
        for (i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) {
            if (dev[i] != NULL) {
                cu->cuMemFree((CUdeviceptr)dev[i]);
            }
        }
    }
    for (i = 0; i < sizeof(host) / sizeof(host[0]); i++) {
        free(host[i]);
    }
}

/* The token data of this step (@p s, its data_salt included) to the device. */
static eep_status_t eep_rank_upload_x(eep_rank_t *r, const eep_step_shape_t *s,
                                      const eep_cuda_sym_t *cu)
{
    eep_step_tokens(s, s->rank, r->h_x);
    return eep_rank_cu(
        cu->cuMemcpyHtoD((CUdeviceptr)r->d_x, r->h_x, (size_t)s->tokens * s->hidden * 2),
        "HtoD(x)");
}

/* An array of @p n int32 or float words from the device against what it must be; @p what names
   it in *bad_p when it differs. */
static eep_status_t eep_rank_check_words(const eep_cuda_sym_t *cu, void *host, const void *dev,
                                         const void *want, size_t n, const char *what,
                                         const char **bad_p)
{
    eep_status_t status = eep_rank_cu(cu->cuMemcpyDtoH(host, (CUdeviceptr)dev, n * 4), what);

    if (status == EEP_OK && memcmp(host, want, n * 4) != 0) {
        *bad_p = what;
    }
    return status;
}

/*
 * What arrived, against what every rank's seeded routing says must arrive, in the layout of the
 * step: counts, rows, and rank-major's lanes, weights and source offsets; CPU_SYNC's host counts
 * and row count too (@p host_rows).  *rows_p gets the row count the expert works on.
 */
static eep_status_t eep_rank_check_recv(eep_rank_t *r, const eep_step_shape_t *s, int el,
                                        int64_t host_rows, int64_t *rows_p, const char **bad_p)
{
    const eep_cuda_sym_t *cu;
    eep_status_t          status;
    int64_t               rows;

    if ((status = eep_cuda_sym_driver(&cu)) != EEP_OK) {
        return status;
    }
    rows = r->rank_major
               ? eep_step_expected_recv_ranked(s, r->h_want_counts, r->h_want_offsets,
                                               r->h_want_rows, r->h_want_ridx, r->h_want_rw)
               : eep_step_expected_recv(s, r->h_want_counts, r->h_want_rows);
    if (rows < 0) {
        return EEP_ERR_NO_MEMORY;
    }
    *rows_p = rows;
    /* CPU_SYNC: eep_dispatch wrote the host counts into h_counts (the device's come next) */
    if (r->ep_mode == EEP_RANK_MODE_CPU_SYNC &&
        (host_rows != rows || memcmp(r->h_counts, r->h_want_counts, (size_t)el * 4) != 0)) {
        *bad_p = "host counts";
        return EEP_OK;
    }
    status = eep_rank_check_words(cu, r->h_counts, r->d_counts, r->h_want_counts, (size_t)el,
                                  "counts", bad_p);
    if (status == EEP_OK && *bad_p == NULL && r->rank_major) {
        status = eep_rank_check_words(cu, r->h_offsets, r->d_offsets, r->h_want_offsets,
                                      (size_t)s->world + 1, "source offsets", bad_p);
    }
    if (status == EEP_OK && *bad_p == NULL) {
        status = eep_rank_cu(
            cu->cuMemcpyDtoH(r->h_rows, (CUdeviceptr)r->d_recv_x, (size_t)rows * s->hidden * 2),
            "DtoH(recv_x)");
        if (status == EEP_OK &&
            eep_step_compare(r->h_rows, r->h_want_rows, rows * s->hidden) >= 0) {
            *bad_p = "rows";
        }
    }
    if (status == EEP_OK && *bad_p == NULL && r->rank_major) {
        status = eep_rank_check_words(cu, r->h_ridx, r->d_recv_idx, r->h_want_ridx,
                                      (size_t)rows * s->topk, "recv_topk_idx", bad_p);
    }
    if (status == EEP_OK && *bad_p == NULL && r->rank_major) {
        status = eep_rank_check_words(cu, r->h_rw, r->d_recv_w, r->h_want_rw,
                                      (size_t)rows * s->topk, "recv_topk_weights", bad_p);
    }
    return status;
}

/*
 * dispatch (NO_CPU_SYNC by default: the call returns once enqueued, so an armed death lands
 * mid-kernel; --mode cpu-sync waits for the counts in eep_dispatch; --mode cached dispatches
 * again on the handle with other data) -> counts, rows (rank-major: lanes, weights, sources) to
 * the host, checked -> the stand-in expert (rank-major: summed over the local experts here) ->
 * combine -> output checked.  @p bad_p names the first wrong part, or NULL.
 */
static eep_status_t eep_rank_step_moe(eep_rank_t *r, eep_rank_phase_t *phase_p, const char **bad_p)
{
    const eep_cuda_sym_t *cu;
    eep_step_shape_t      s;
    eep_dispatch_args_t   a;
    eep_ep_handle_t      *h = NULL;
    eep_status_t          status;
    int64_t               rows, host_rows = -1;
    int                   el;
    double                t0;

    *bad_p = NULL;
    if ((status = eep_cuda_sym_driver(&cu)) != EEP_OK) {
        return status;
    }
    memset(&s, 0, sizeof(s));
    s.world   = r->info.world;
    s.rank    = r->info.rank;
    s.tokens  = r->tokens;
    s.hidden  = r->hidden;
    s.topk    = r->topk;
    s.experts = r->experts;
    s.seed    = (uint64_t)r->seed;
    /* every member must draw the same routing: (epoch, step of the view), not this process's
       own step count (a newcomer at step 1 met survivors at step 16: every count differed) */
    s.step = (r->info.epoch << 32) | (r->view_step & 0xffffffffu);
    /* the data plane's placement: the view's for its expert count, else the default (eep/ep.h) */
    s.placement = r->info.num_experts == s.experts ? r->info.placement : NULL;
    if ((status = eep_step_shape_check(&s)) != EEP_OK) {
        return status;
    }
    /* a training step's other collective (an all-reduce, say): the barrier kernel, killable */
    if (r->moe_barrier && (status = eep_rank_step_barrier(r, phase_p, 0)) != EEP_OK) {
        return status;
    }
    el = eep_step_local_experts(&s, NULL);
    eep_step_routing(&s, s.rank, r->h_idx, r->h_w);
    eep_rank_fault_corrupt(r, &s);
    if ((status = eep_rank_upload_x(r, &s, cu)) != EEP_OK ||
        (status = eep_rank_cu(
             cu->cuMemcpyHtoD((CUdeviceptr)r->d_idx, r->h_idx, (size_t)s.tokens * s.topk * 8),
             "HtoD(topk_idx)")) != EEP_OK ||
        (status = eep_rank_cu(
             cu->cuMemcpyHtoD((CUdeviceptr)r->d_w, r->h_w, (size_t)s.tokens * s.topk * 4),
             "HtoD(weights)")) != EEP_OK) {
        return status;
    }
    memset(&a, 0, sizeof(a));
    a.size                = sizeof(a);
    a.x                   = r->d_x;
    a.dtype               = EEP_DTYPE_BF16;
    a.topk_idx            = r->d_idx;
    a.topk_idx_dtype      = EEP_INDEX_INT64;
    a.topk_weights        = r->d_w;
    a.num_tokens          = s.tokens;
    a.hidden              = s.hidden;
    a.num_topk            = s.topk;
    a.num_experts         = s.experts;
    a.expert_alignment    = 1;
    a.max_tokens_per_rank = s.tokens;
    a.mode = r->ep_mode == EEP_RANK_MODE_CPU_SYNC ? EEP_EP_MODE_CPU_SYNC : EEP_EP_MODE_NO_CPU_SYNC;
    a.layout              = r->rank_major ? EEP_EP_LAYOUT_RANK_MAJOR : EEP_EP_LAYOUT_EXPERT_MAJOR;
    a.recv_capacity       = r->rows_max;
    a.recv_x              = r->d_recv_x;
    a.recv_topk_idx       = r->d_recv_idx;
    a.recv_topk_weights   = r->d_recv_w;
    a.recv_expert_counts  = r->d_counts;
    a.recv_expert_offsets = r->d_offsets;
    if (r->ep_mode == EEP_RANK_MODE_CPU_SYNC) {
        a.host_expert_counts = r->h_counts;
        a.num_recv_rows_p    = &host_rows;
    }

    *phase_p = EEP_RANK_PH_DISPATCH;
    eep_rank_obs_slow(&r->obs);
    if ((status = eep_rank_fault_before(r, EEP_RANK_PH_DISPATCH)) != EEP_OK) {
        return status;
    }
    t0     = eep_clock_ms();
    status = eep_dispatch(r->rt, &a, &h, NULL);
    if (status != EEP_OK) {
        return status;
    }
    eep_rank_fault_after(r, EEP_RANK_PH_DISPATCH);
    status = eep_rank_wait(r, EEP_RANK_PH_DISPATCH, t0);
    if (status == EEP_OK && r->corrupted) {
        /* the kernel records an out-of-range id (eep/ep.h): the wait or the poll must say so */
        status = eep_poll(r->rt);
        if (status == EEP_OK) {
            *bad_p = "corrupt-id accepted";
        }
    }
    if (status == EEP_OK && *bad_p == NULL && r->ep_mode == EEP_RANK_MODE_CACHED) {
        /* the handle's layout again with other data; what follows checks these rows */
        s.data_salt = 1;
        a.mode      = EEP_EP_MODE_CACHED;
        if ((status = eep_rank_upload_x(r, &s, cu)) == EEP_OK &&
            (status = eep_dispatch(r->rt, &a, &h, NULL)) == EEP_OK) {
            status = eep_rank_wait(r, EEP_RANK_PH_DISPATCH, t0);
        }
    }
    if (status != EEP_OK || *bad_p != NULL) {
        goto out;
    }
    status = eep_rank_check_recv(r, &s, el, host_rows, &rows, bad_p);
    if (status != EEP_OK || *bad_p != NULL) {
        goto out;
    }
    /* the stand-in expert must be the view's: the local experts the sync reported */
    if (r->info.num_experts == s.experts &&
        !eep_step_local_match(&s, r->info.local_experts, r->info.num_local)) {
        *bad_p = "placement";
        goto out;
    }
    if (r->rank_major) {
        eep_step_expert_apply_ranked(&s, rows, r->h_ridx, r->h_rw, r->h_rows, r->h_y);
    } else {
        eep_step_expert_apply(&s, r->h_counts, r->h_rows, r->h_y);
    }
    status = eep_rank_cu(cu->cuMemcpyHtoD((CUdeviceptr)r->d_y, r->h_y, (size_t)rows * s.hidden * 2),
                         "HtoD(y)");
    if (status != EEP_OK) {
        goto out;
    }
    *phase_p = EEP_RANK_PH_COMBINE;
    if ((status = eep_rank_fault_before(r, EEP_RANK_PH_COMBINE)) != EEP_OK) {
        goto out;
    }
    t0     = eep_clock_ms();
    status = eep_combine(r->rt, r->d_y, h, r->d_out, NULL);
    if (status != EEP_OK) {
        goto out;
    }
    eep_rank_fault_after(r, EEP_RANK_PH_COMBINE);
    status = eep_rank_wait(r, EEP_RANK_PH_COMBINE, t0);
    if (status != EEP_OK) {
        goto out;
    }
    status = eep_rank_cu(
        cu->cuMemcpyDtoH(r->h_out, (CUdeviceptr)r->d_out, (size_t)s.tokens * s.hidden * 2),
        "DtoH(out)");
    if (status == EEP_OK) {
        status = eep_step_expected_out(&s, r->h_want_out);
    }
    if (status == EEP_OK &&
        eep_step_compare(r->h_out, r->h_want_out, (int64_t)s.tokens * s.hidden) >= 0) {
        *bad_p = "out";
    }
out:
    eep_ep_handle_destroy(h);
    return status;
}

/* Apply whatever view is there.  @return what eep_membership_sync returned. */
static eep_status_t eep_rank_sync(eep_rank_t *r, int *changed_p)
{
    eep_status_t status;

    eep_rank_view_flag = 0;
    r->info.size       = sizeof(r->info);
    status             = eep_membership_sync(r->rt, changed_p, &r->info);
    if (status == EEP_OK && *changed_p) {
        r->fresh_view = 1;
        r->view_step  = 0;
        eep_rank_line_view(r);
    }
    return status;
}

/*
 * After a failed step: wait (bounded) for a view that gives this rank a working communicator
 * again.  A timed-out peer is reported first.  @return EEP_OK when steps can go on.
 */
static eep_status_t eep_rank_recover(eep_rank_t *r, eep_status_t why, eep_rank_phase_t phase)
{
    double       deadline;
    eep_status_t status;
    int          changed = 0, reported = 0, fenced = 0;

    eep_rank_line_fault(r, why, phase);
    r->faults++;
    deadline = eep_clock_ms() + 1000.0 * (why == EEP_ERR_FENCED || why == EEP_ERR_LEASE_LOST
                                              ? r->join_timeout_s
                                              : r->view_wait_s);
    while (!eep_rank_stop) {
        status = eep_rank_sync(r, &changed);
        if (status == EEP_OK && changed) {
            return EEP_OK;
        }
        if ((status == EEP_ERR_FENCED || status == EEP_ERR_LEASE_LOST) && !fenced) {
            /* said once: this rank has no communicator until a view holds it again */
            printf("{\"t_ms\":%lld,\"event\":\"fenced\",\"epoch\":%llu,\"status\":\"%s\"}\n",
                   eep_clock_wall_ms(), (unsigned long long)r->info.epoch, eep_status_name(status));
            /* rejoining as a new member takes a lease, a view and a fresh communicator */
            deadline = eep_clock_ms() + 1000.0 * r->join_timeout_s;
        }
        fenced = fenced || status == EEP_ERR_FENCED || status == EEP_ERR_LEASE_LOST;
        if (status == EEP_OK && why == EEP_ERR_ABORTED) {
            /* stopped for a notice that brought no new view (a lost lease elsewhere, a view
               already applied): clear the abort and go on */
            return eep_runtime_clear_fault(r->rt);
        }
        if (status == EEP_OK && why == EEP_ERR_PEER_TIMEOUT && !reported) {
            /* nothing newer in sight: name the suspect so that eepd evicts it */
            eep_membership_fault(r->rt, eep_rank_phase_names[phase]);
            reported = 1;
        }
        if (eep_clock_ms() > deadline) {
            eep_error(EEP_SUBSYS_TOOL, "no view resolved %s within %d s (%s)", eep_status_name(why),
                      fenced ? r->join_timeout_s : r->view_wait_s, eep_status_name(status));
            return fenced ? EEP_ERR_FENCED : EEP_ERR_TIMEOUT;
        }
        eep_clock_sleep_ms(5);
    }
    return EEP_ERR_ABORTED;
}

/* The numeric options: name, field, bounds (inclusive), what it is. */
static const struct {
    const char *name;
    size_t      off;
    int         min, max;
    const char *doc;
} eep_rank_ints[] = {
    { "interval-ms", offsetof(eep_rank_t, interval_ms), 0, 100000000, "pause between steps" },
    { "seconds", offsetof(eep_rank_t, seconds), 0, 100000000, "stop after N s (0: never)" },
    { "max-steps", offsetof(eep_rank_t, max_steps), 0, 100000000,
      "stop after N good steps (0: never)" },
    { "timeout-ms", offsetof(eep_rank_t, timeout_ms), 1, 100000000, "device-wait deadline" },
    { "view-wait-s", offsetof(eep_rank_t, view_wait_s), 1, 100000000,
      "give up waiting for the view that resolves a fault" },
    { "join-timeout-s", offsetof(eep_rank_t, join_timeout_s), 1, 100000000,
      "give up when no view holds this rank (at start, when fenced)" },
    { "tokens", offsetof(eep_rank_t, tokens), 1, 100000000, "MoE: tokens per rank" },
    { "hidden", offsetof(eep_rank_t, hidden), 8, 100000000, "MoE: bf16 channels" },
    { "topk", offsetof(eep_rank_t, topk), 1, 100000000, "MoE: experts per token" },
    { "experts", offsetof(eep_rank_t, experts), 1, 100000000, "MoE: experts in all" },
    { "seed", offsetof(eep_rank_t, seed), 0, 100000000, "MoE: routing seed" },
};

#define EEP_RANK_N_INTS (int)(sizeof(eep_rank_ints) / sizeof(eep_rank_ints[0]))

enum {
    EEP_RANK_OPT_STEPS = 256,
    EEP_RANK_OPT_ARM,
    EEP_RANK_OPT_FAULT,
    EEP_RANK_OPT_AGENT_FAULTS,
    EEP_RANK_OPT_MOE_BARRIER,
    EEP_RANK_OPT_LAYOUT,
    EEP_RANK_OPT_MODE,
    EEP_RANK_OPT_VERSION,
    EEP_RANK_OPT_INT /* + index into eep_rank_ints */
};

/* @return 0 (@p out stdout) or 2, the exit status. */
static int eep_rank_usage(FILE *out, const eep_rank_t *defaults)
{
    int i;

    fprintf(out,
            "usage: eep-rank [OPTIONS]   one rank of an elastic job (JSON lines on stdout)\n"
            "  --steps=barrier|moe   a step is one barrier (default) or dispatch -> "
            "stand-in expert -> combine, checked\n"
            "  --moe-barrier         with --steps=moe: each step opens with a barrier\n"
            "  --layout=expert|rank  with --steps=moe: the received layout (default expert)\n"
            "  --mode=MODE           with --steps=moe: no-cpu-sync (default), cpu-sync, or\n"
            "                        cached (a second dispatch of other data on the handle)\n");
    for (i = 0; i < EEP_RANK_N_INTS; i++) {
        char flag[40];

        snprintf(flag, sizeof(flag), "--%s=N", eep_rank_ints[i].name);
        fprintf(out, "  %-21s %s; default %d\n", flag, eep_rank_ints[i].doc,
                *(const int *)((const char *)defaults + eep_rank_ints[i].off));
    }
    fprintf(out,
            "  --arm-file=PATH       on SIGUSR1, arm the fault SPEC written in PATH\n"
            "  --fault=SPEC          arm a fault (repeatable, at most %d): ACTION [key=value ...]\n"
            "                        ACTION: kill stop exit exit-dispatch exit-combine stall hang\n"
            "                        delay corrupt-id; keys: phase= step= ms= steps= expert=\n"
            "                        (docs/fault-schedule.md)\n"
            "  --agent-faults        arm the specs `eepctl inject-fault data-plane` sends\n"
            "  -v, --verbose         log the GPU probe\n"
            "  -h, --help, --version\n"
            "exit: 0 done or stopped (SIGTERM/SIGINT), 2 usage, 3 a wrong step, 4 an injected "
            "exit, else the negated eep_status_t (80: no GPU)\n",
            EEP_RANK_MAX_FAULTS);
    return out == stdout ? 0 : 2;
}

/*
 * getopt_long over @p argv into @p r (whose fields hold the defaults).
 * @return -1 to go on, else the exit status (0 after --help/--version, 2 after a usage error).
 */
static int eep_rank_args(eep_rank_t *r, int argc, char **argv, int *verbose_p)
{
    static const char *const modes[] = { "no-cpu-sync", "cpu-sync", "cached" };
    struct option            longopts[EEP_RANK_N_INTS + 11];
    eep_rank_t               defaults = *r;
    int                      c, i, n = 0, layout_given = 0, mode_given = 0;

    for (i = 0; i < EEP_RANK_N_INTS; i++) {
        longopts[n++] = (struct option){ eep_rank_ints[i].name, required_argument, NULL,
                                         EEP_RANK_OPT_INT + i };
    }
    longopts[n++] = (struct option){ "steps", required_argument, NULL, EEP_RANK_OPT_STEPS };
    longopts[n++] = (struct option){ "arm-file", required_argument, NULL, EEP_RANK_OPT_ARM };
    longopts[n++] = (struct option){ "fault", required_argument, NULL, EEP_RANK_OPT_FAULT };
    longopts[n++] = (struct option){ "agent-faults", no_argument, NULL, EEP_RANK_OPT_AGENT_FAULTS };
    longopts[n++] = (struct option){ "moe-barrier", no_argument, NULL, EEP_RANK_OPT_MOE_BARRIER };
    longopts[n++] = (struct option){ "layout", required_argument, NULL, EEP_RANK_OPT_LAYOUT };
    longopts[n++] = (struct option){ "mode", required_argument, NULL, EEP_RANK_OPT_MODE };
    longopts[n++] = (struct option){ "verbose", no_argument, NULL, 'v' };
    longopts[n++] = (struct option){ "help", no_argument, NULL, 'h' };
    longopts[n++] = (struct option){ "version", no_argument, NULL, EEP_RANK_OPT_VERSION };
    longopts[n++] = (struct option){ NULL, 0, NULL, 0 };

    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":vh", longopts, NULL)) != -1) {
        if (c >= EEP_RANK_OPT_INT && c < EEP_RANK_OPT_INT + EEP_RANK_N_INTS) {
            char *end = NULL;
            long  v;

            i = c - EEP_RANK_OPT_INT;
            v = strtol(optarg, &end, 10);
            if (optarg[0] == '\0' || *end != '\0' || v < eep_rank_ints[i].min ||
                v > eep_rank_ints[i].max) {
                fprintf(stderr,
                        "eep-rank: bad argument '--%s': '%s' is not a whole number in %d..%d\n",
                        eep_rank_ints[i].name, optarg, eep_rank_ints[i].min, eep_rank_ints[i].max);
                return 2;
            }
            *(int *)((char *)r + eep_rank_ints[i].off) = (int)v;
            continue;
        }
        switch (c) {
        case EEP_RANK_OPT_STEPS:
            if (strcmp(optarg, "moe") != 0 && strcmp(optarg, "barrier") != 0) {
                fprintf(stderr, "eep-rank: bad argument '%s' for --steps: barrier or moe\n",
                        optarg);
                return 2;
            }
            r->moe = strcmp(optarg, "moe") == 0;
            break;
        case EEP_RANK_OPT_ARM:
            r->arm_file = optarg;
            break;
        case EEP_RANK_OPT_FAULT:
            if (r->n_fault_specs == EEP_RANK_MAX_FAULTS) {
                fprintf(stderr, "eep-rank: bad argument '--fault': more than %d\n",
                        EEP_RANK_MAX_FAULTS);
                return 2;
            }
            r->fault_specs[r->n_fault_specs++] = optarg;
            break;
        case EEP_RANK_OPT_AGENT_FAULTS:
            r->agent_faults = 1;
            break;
        case EEP_RANK_OPT_MOE_BARRIER:
            r->moe_barrier = 1;
            break;
        case EEP_RANK_OPT_LAYOUT:
            if (strcmp(optarg, "expert") != 0 && strcmp(optarg, "rank") != 0) {
                fprintf(stderr, "eep-rank: bad argument '%s' for --layout: expert or rank\n",
                        optarg);
                return 2;
            }
            r->rank_major = strcmp(optarg, "rank") == 0;
            layout_given  = 1;
            break;
        case EEP_RANK_OPT_MODE:
            for (i = 0; i < 3 && strcmp(optarg, modes[i]) != 0; i++) {
            }
            if (i == 3) {
                fprintf(stderr,
                        "eep-rank: bad argument '%s' for --mode: no-cpu-sync, cpu-sync or "
                        "cached\n",
                        optarg);
                return 2;
            }
            r->ep_mode = i;
            mode_given = 1;
            break;
        case 'v':
            *verbose_p = 1;
            break;
        case 'h':
            return eep_rank_usage(stdout, &defaults);
        case EEP_RANK_OPT_VERSION:
            printf("eep-rank (ElasticEP) %s\n", eep_version());
            return 0;
        case ':':
            fprintf(stderr, "eep-rank: bad argument '%s': it needs a value\n", argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, "eep-rank: bad argument '%s': unknown option\n", argv[optind - 1]);
            return eep_rank_usage(stderr, &defaults);
        }
    }
    if (optind < argc) {
        fprintf(stderr, "eep-rank: bad argument '%s': eep-rank takes options only\n", argv[optind]);
        return eep_rank_usage(stderr, &defaults);
    }
    if (r->moe_barrier && !r->moe) {
        fprintf(stderr, "eep-rank: bad argument '--moe-barrier': it needs --steps=moe\n");
        return 2;
    }
    if ((layout_given || mode_given) && !r->moe) {
        fprintf(stderr, "eep-rank: bad argument '--%s': it needs --steps=moe\n",
                layout_given ? "layout" : "mode");
        return 2;
    }
    /* the faults last: they depend on --steps and --experts wherever those were given */
    for (i = 0; i < r->n_fault_specs; i++) {
        if (eep_rank_fault_arm(r, r->fault_specs[i], "--fault") != 0) {
            return 2;
        }
    }
    return -1;
}

/* @return EEP_OK when a CUDA driver loads and sees a device; quiet unless @p verbose. */
static eep_status_t eep_rank_gpu_check(int verbose)
{
    const eep_cuda_sym_t *cu    = NULL;
    eep_log_level_t       level = EEP_LOG_LEVEL_NONE;
    eep_status_t          status;
    int                   count = 0, l;

    /* The configured level, to put back after the quiet probe. */
    for (l = EEP_LOG_LEVEL_TRACE; l > EEP_LOG_LEVEL_NONE && level == EEP_LOG_LEVEL_NONE; l--) {
        if (eep_log_enabled((eep_log_level_t)l, EEP_SUBSYS_RUNTIME)) {
            level = (eep_log_level_t)l;
        }
    }
    if (!verbose) {
        eep_log_set_level(EEP_LOG_LEVEL_NONE);
    }
    status = eep_cuda_sym_driver(&cu);
    if (status == EEP_OK && (cu->cuDeviceGetCount(&count) != CUDA_SUCCESS || count < 1)) {
        status = EEP_ERR_NO_DEVICE;
    }
    if (!verbose) {
        eep_log_set_level(level);
    }
    return status != EEP_OK ? EEP_ERR_NO_DEVICE : EEP_OK;
}

int main(int argc, char **argv)
{
    eep_rank_t                    r;
    eep_agent_params_t            ap;
    eep_agent_membership_params_t mp;
    eep_runtime_params_t          rp;
    struct sigaction              sa;
    eep_status_t                  status, exit_status = EEP_OK;
    long long                     start_ms;
    int                           verbose = 0, wrong = 0, changed = 0, ret;

    memset(&r, 0, sizeof(r));
    r.interval_ms    = 10;
    r.timeout_ms     = 500;
    r.view_wait_s    = 30;
    r.join_timeout_s = 300;
    r.tokens         = 64;
    r.hidden         = 256;
    r.topk           = 2;
    r.experts        = 12;
    r.seed           = 1;
    ret              = eep_rank_args(&r, argc, argv, &verbose);
    if (ret >= 0) {
        return ret;
    }
    eep_config_check_env();
    status = eep_rank_gpu_check(verbose);
    if (status != EEP_OK) {
        fprintf(stderr,
                "eep-rank: no usable GPU (no CUDA driver, or it sees no device): a rank "
                "needs one; exiting with code %d (%s)\n",
                EEP_RANK_EXIT(status), eep_status_name(status));
        return EEP_RANK_EXIT(status);
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = eep_rank_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);

    memset(&ap, 0, sizeof(ap));
    ap.size   = sizeof(ap);
    ap.notify = eep_rank_notify;
    status    = eep_rank_obs_start(&r.obs, &ap); /* its metrics URL goes into the member key */
    if (status != EEP_OK) {
        fprintf(stderr, "eep-rank: no metrics endpoint: %s\n", eep_status_string(status));
        return EEP_RANK_EXIT(status);
    }
    status = eep_agent_create(&ap, &r.agent);
    if (status != EEP_OK) {
        fprintf(stderr, "eep-rank: cannot join the job: %s\n", eep_status_string(status));
        return EEP_RANK_EXIT(status);
    }
    memset(&mp, 0, sizeof(mp));
    mp.size  = sizeof(mp);
    mp.agent = r.agent;
    status   = eep_agent_membership_create(&mp, &r.ms);
    if (status == EEP_OK) {
        memset(&rp, 0, sizeof(rp));
        rp.size            = sizeof(rp);
        rp.device          = -1;
        rp.timeout_ms      = r.timeout_ms;
        rp.membership      = &r.ms;
        rp.join_timeout_ms = r.join_timeout_s * 1000;
        status             = eep_runtime_create(&rp, &r.rt);
    }
    if (status == EEP_OK && r.moe) {
        status = eep_rank_moe_alloc(&r);
    }
    if (status != EEP_OK) {
        fprintf(stderr, "eep-rank: no runtime: %s\n", eep_status_string(status));
        exit_status = status;
        goto out;
    }
    /* The view the runtime was built from, reported like any other. */
    r.info.size = sizeof(r.info);
    if (eep_membership_sync(r.rt, &changed, &r.info) == EEP_OK) {
        eep_rank_line_view(&r);
    }
    r.fresh_view = 1;
    start_ms     = eep_clock_wall_ms();
    while (!eep_rank_stop) {
        eep_rank_phase_t phase = EEP_RANK_PH_NONE;
        const char      *bad   = NULL;

        if ((r.seconds > 0 && eep_clock_wall_ms() - start_ms >= (long long)r.seconds * 1000) ||
            (r.max_steps > 0 && r.good >= (uint64_t)r.max_steps)) {
            break;
        }
        if (eep_rank_arm_req) {
            eep_rank_arm_read(&r);
        }
        if (r.agent_faults) {
            char spec[256];

            if (eep_agent_take_fault(r.agent, spec, sizeof(spec)) == EEP_OK &&
                eep_rank_fault_arm(&r, spec, "eepctl inject-fault") != 0) {
                eep_warn(EEP_SUBSYS_TOOL, "fault from eepctl not armed (see the line above)");
            }
        }
        if (eep_rank_view_flag) {
            status = eep_rank_sync(&r, &changed);
            if (status != EEP_OK && eep_rank_recover(&r, status, EEP_RANK_PH_NONE) != EEP_OK) {
                exit_status = EEP_ERR_TIMEOUT;
                break;
            }
        }
        r.step++;
        r.view_step++;
        memset(r.t_us, 0, sizeof(r.t_us));
        if (r.moe) {
            /* the first step of a view waits for peers that compile its kernels (seconds), as
               the first barrier does; later steps detect a dead peer at --timeout-ms */
            eep_runtime_set_timeout(r.rt, r.fresh_view ? EEP_RANK_FIRST_TIMEOUT_MS : 0);
        }
        status = r.moe ? eep_rank_step_moe(&r, &phase, &bad) : eep_rank_step_barrier(&r, &phase, 1);
        eep_rank_line_step(&r, status, status == EEP_OK && bad == NULL, bad);
        eep_rank_obs_step(&r.obs, r.rt,
                          &(eep_rank_obs_step_t){ r.step, r.info.epoch, r.info.rank, r.info.world,
                                                  status, r.t_us[EEP_RANK_PH_DISPATCH],
                                                  r.t_us[EEP_RANK_PH_COMBINE],
                                                  (uint64_t)r.tokens * r.topk * r.hidden * 2 });
        if (status == EEP_OK && bad != NULL) {
            eep_error(EEP_SUBSYS_TOOL, "step %llu of epoch %llu: wrong %s",
                      (unsigned long long)r.step, (unsigned long long)r.info.epoch, bad);
            wrong = 1;
            break;
        }
        if (status == EEP_ERR_UNSUPPORTED) {
            fprintf(stderr,
                    "eep-rank: this step mode is not supported on this job (%s): on the "
                    "one-GPU cluster MoE steps need the GIN dispatch/combine; use --steps "
                    "barrier\n",
                    eep_status_string(status));
            exit_status = status;
            break;
        }
        if (status != EEP_OK && eep_rank_stop) {
            break; /* asked to stop (SIGTERM/SIGINT) mid-step: a clean exit, not a fault */
        }
        if (status != EEP_OK) {
            status = eep_rank_recover(&r, status, phase);
            if (status != EEP_OK) {
                exit_status = status;
                break;
            }
            continue;
        }
        r.good++;
        r.fresh_view = 0;
        if (r.interval_ms > 0) {
            eep_clock_sleep_ms(r.interval_ms);
        }
    }
out:
    printf("{\"t_ms\":%lld,\"event\":\"exit\",\"epoch\":%llu,\"rank\":%d,\"steps\":%llu,"
           "\"good\":%llu,\"faults\":%llu,\"injected\":%llu,\"status\":\"%s\",\"wrong\":%d}\n",
           eep_clock_wall_ms(), (unsigned long long)r.info.epoch, r.info.rank,
           (unsigned long long)r.step, (unsigned long long)r.good, (unsigned long long)r.faults,
           (unsigned long long)r.injected, eep_status_name(exit_status), wrong);
    eep_runtime_destroy(r.rt);
    eep_rank_moe_free(&r);
    eep_agent_membership_destroy(&r.ms);
    eep_agent_leave(r.agent);
    eep_agent_destroy(r.agent);
    eep_rank_obs_stop(&r.obs);
    return wrong ? EEP_RANK_EXIT_WRONG : exit_status == EEP_OK ? 0 : EEP_RANK_EXIT(exit_status);
}
