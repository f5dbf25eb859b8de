/*
 * runtime_membership.c - a runtime that follows membership views: eep_membership_sync and
 * eep_membership_fault (include/eep/membership.h).
 *
 * The view machine (runtime_view.c) decides and orders the communicator steps; this file makes
 * the safe point (raise the abort flag so a kernel still waiting leaves, synchronize), hands the
 * machine's new set to the runtime (runtime_nccl.cc), resets what lives in the old window (the
 * parts' view hooks: the EP layout), clears the fault page and moves the epoch.  A rank with no
 * communicator of the current view (fenced, failed, lease lost) keeps its abort flag raised, so
 * every call fails fast with EEP_ERR_FENCED instead of launching on a freed device communicator.
 */
#include <stdlib.h>
#include <string.h>

#include "eep/eep.h"
#include "elastic/gpu/cuda_sym.h"
#include "elastic/runtime/runtime.h"
#include "util/clock.h"
#include "util/log.h"

/* How long a view apply waits for the old communicator's abort (then it warns and goes on). */
#define EEP_VIEW_ABORT_WAIT_MS 5000

eep_status_t eep_runtime_add_view_hook(eep_runtime_t *rt, eep_runtime_dtor_func_t func, void *arg)
{
    if (rt->n_view_hooks == EEP_RUNTIME_MAX_DTORS) {
        eep_error(EEP_SUBSYS_RUNTIME, "runtime: more than %d view hooks", EEP_RUNTIME_MAX_DTORS);
        return EEP_ERR_NO_RESOURCE;
    }
    rt->view_hooks[rt->n_view_hooks].func = func;
    rt->view_hooks[rt->n_view_hooks].arg  = arg;
    rt->n_view_hooks++;
    return EEP_OK;
}

/* Keep the current view's placement and this rank's experts: checked again here (the
   dispatch/combine kernels index it without a bounds check of their own), with the most experts
   a rank holds and whether it is the default policy's (the kernels' tables are built from it). */
static eep_status_t eep_runtime_keep_placement(eep_runtime_t *rt, const eep_view_copy_t *v)
{
    eep_expert_place_t *pl     = NULL;
    int32_t            *local  = NULL;
    int                *counts = NULL;
    eep_status_t        status;
    int                 e, n = 0, most = 0, def = 0;

    if (v->num_experts > 0) {
        pl     = malloc((size_t)v->num_experts * sizeof(*pl));
        local  = malloc((size_t)v->num_experts * sizeof(*local));
        counts = malloc((size_t)v->world * sizeof(*counts));
        if (pl == NULL || local == NULL || counts == NULL) {
            free(pl);
            free(local);
            free(counts);
            return EEP_ERR_NO_MEMORY;
        }
        memcpy(pl, v->placement, (size_t)v->num_experts * sizeof(*pl));
        status = eep_placement_check(pl, v->num_experts, v->world, counts);
        if (status != EEP_OK) {
            eep_error(EEP_SUBSYS_RUNTIME, "view %llu: invalid argument placement (above)",
                      (unsigned long long)v->epoch);
            free(pl);
            free(local);
            free(counts);
            return status;
        }
        for (e = 0; e < v->world; e++) {
            most = counts[e] > most ? counts[e] : most;
        }
        for (e = 0; e < v->num_experts; e++) {
            if (pl[e].rank == v->my_rank) {
                local[pl[e].slot] = e; /* slots are dense (eep_placement_check) */
                n++;
            }
        }
        /* the default's blocks: expert e on floor(e world / E), in order (eep_placement_default) */
        def = 1;
        for (e = 0; e < v->num_experts && def; e++) {
            const int r = (int)(((int64_t)e * v->world) / v->num_experts);

            def = pl[e].rank == r &&
                  pl[e].slot == e - (int)(((int64_t)r * v->num_experts + v->world - 1) / v->world);
        }
        free(counts);
    }
    free(rt->placement);
    free(rt->local_experts);
    rt->placement       = pl;
    rt->local_experts   = local;
    rt->num_local       = n;
    rt->num_experts     = v->num_experts;
    rt->place_local_max = most;
    rt->place_default   = def;
    return EEP_OK;
}

/* No communicator of a current view: raise the flag so that every call stops at once. */
static void eep_runtime_fence(eep_runtime_t *rt)
{
    eep_runtime_abort(rt);
    eep_runtime_nccl_view_clear(rt);
    rt->fenced = 1;
}

static void eep_runtime_info_fill(const eep_runtime_t *rt, eep_membership_info_t *info)
{
    int n_lost = 0;

    memset(info, 0, sizeof(*info));
    info->size          = sizeof(*info);
    info->epoch         = rt->fenced ? 0 : rt->epoch;
    info->rank          = rt->fenced ? -1 : rt->rank;
    info->world         = rt->fenced ? 0 : rt->nranks;
    info->num_experts   = rt->fenced ? 0 : rt->num_experts;
    info->num_local     = rt->fenced ? 0 : rt->num_local;
    info->local_experts = rt->fenced ? NULL : rt->local_experts;
    info->placement     = rt->fenced ? NULL : rt->placement;
    info->degraded      = rt->vm->state == EEP_VIEW_STATE_DEGRADED;
    if (eep_view_machine_lost_experts(rt->vm, NULL, &n_lost) == EEP_OK) {
        info->n_lost = n_lost;
    }
    info->action   = rt->last_action != NULL ? rt->last_action : "none";
    info->apply_ms = rt->last_apply_ms;
}

/* Apply @p view at a safe point. */
static eep_status_t eep_runtime_view_apply(eep_runtime_t *rt, const eep_view_t *view)
{
    const eep_cuda_sym_t *cu;
    eep_view_plan_t       plan;
    eep_status_t          status;
    double                t0 = eep_clock_ms();
    unsigned              before;
    int                   i;

    if ((status = eep_cuda_sym_driver(&cu)) != EEP_OK) {
        return status;
    }
    before = __atomic_load_n(&rt->fault_host->abort_flag, __ATOMIC_ACQUIRE);
    if (view != NULL && view->epoch > rt->vm->last_epoch) {
        /* A kernel still waiting (on a peer this view removes) leaves now, not at its deadline. */
        eep_runtime_abort(rt);
        eep_status_from_cu(cu->cuCtxSynchronize(), "cuCtxSynchronize(view)");
    }
    memset(&plan, 0, sizeof(plan));
    rt->applying_epoch = view != NULL ? view->epoch : 0;
    status             = eep_view_machine_apply(rt->vm, view, &plan);
    if (status == EEP_ERR_STALE_EPOCH && !rt->fenced && rt->vm->set.comm == NULL) {
        /* Given up after the old set was released early (EEP_VIEW_RELEASE_EARLY): none is
           left, so nothing may run until the newer view is applied (fresh). */
        eep_runtime_fence(rt);
        rt->last_action = "abandoned";
        return status;
    }
    if (status == EEP_ERR_STALE_EPOCH || status == EEP_ERR_INVALID_ARG) {
        /* Nothing changed; a flag raised above for nothing is lowered again. */
        if (!rt->fenced && rt->buf != NULL && before == EEP_ABORT_NONE) {
            eep_runtime_clear_fault(rt);
        }
        return status;
    }
    if (status != EEP_OK) {
        eep_runtime_fence(rt);
        rt->last_action = status == EEP_ERR_FENCED ? "fenced" : "failed";
        return status;
    }
    if (plan.action != EEP_VIEW_ACTION_NONE) {
        status = eep_runtime_nccl_view_adopt(rt, &rt->vm->set, rt->vm->view.my_rank,
                                             rt->vm->view.world);
        if (status != EEP_OK) {
            eep_runtime_fence(rt);
            return status;
        }
        for (i = rt->n_view_hooks - 1; i >= 0; i--) {
            rt->view_hooks[i].func(rt, rt->view_hooks[i].arg);
        }
        /* The old set's release (a thread of its own: NCCL's finalize + destroy, ~0.5 s, or its
           abort, ~1 s, of teardown and frees; runtime_nccl.cc) must end before this view's first
           kernel: its driver calls can wait for the GPU while that
           kernel spins on a peer's signal that this process's GIN proxy applies through the same
           driver (the deadlock of elastic/jit/jit.h, eep_jit_get_kernel_on).  Overlapped with
           the new view's steps, it made a rank time out ~1 s into every fresh view and be
           evicted, view after view (make run FAULTS=1 on 1 x H200, 2026-12-02). */
        eep_runtime_nccl_view_drain(rt, EEP_VIEW_ABORT_WAIT_MS);
    }
    rt->rank   = rt->vm->view.my_rank;
    rt->nranks = rt->vm->view.world;
    eep_log_set_rank(rt->rank);
    rt->epoch  = rt->vm->view.epoch; /* strictly newer: the machine refused anything else */
    rt->fenced = 0;
    status     = eep_runtime_keep_placement(rt, &rt->vm->view);
    if (status == EEP_OK) {
        status = eep_runtime_clear_fault(rt); /* sync, claim counter, records, flag */
    }
    if (status != EEP_OK) {
        eep_runtime_fence(rt);
        return status;
    }
    rt->last_action   = eep_view_action_name(plan.action);
    rt->last_apply_ms = eep_clock_ms() - t0;
    eep_info(EEP_SUBSYS_RUNTIME, "view %llu: %s in %.1f ms, rank %d of %d, %d local experts",
             (unsigned long long)rt->epoch, rt->last_action, rt->last_apply_ms, rt->rank,
             rt->nranks, rt->num_local);
    return EEP_OK;
}

/* One poll of the provider, applied.  @p changed_p: a view was applied. */
static eep_status_t eep_runtime_view_step_once(eep_runtime_t *rt, int *changed_p, int *abandoned_p)
{
    const eep_membership_t *ms = &rt->membership;
    eep_view_t              view;
    eep_status_t            status;
    int                     changed          = 0;
    uint64_t                abandoned_before = rt->vm->stats.abandoned;

    *changed_p   = 0;
    *abandoned_p = 0;
    memset(&view, 0, sizeof(view));
    status = ms->ops->poll(ms->ctx, &view, &changed);
    if (status == EEP_ERR_LEASE_LOST) {
        /* This member is gone: its rank in every known view is someone else's.  Drop the set;
           the view that holds the new member builds a fresh one (the machine keeps its epoch). */
        eep_warn(EEP_SUBSYS_RUNTIME, "membership: lease lost: fenced until a view holds this rank "
                                     "again");
        eep_view_machine_cleanup(rt->vm);
        eep_runtime_fence(rt);
        rt->last_action = "fenced";
        return EEP_ERR_LEASE_LOST;
    }
    if (status != EEP_OK) {
        return status; /* control plane unavailable: the data plane goes on */
    }
    if (!changed) {
        return rt->fenced ? EEP_ERR_FENCED : EEP_OK;
    }
    status = eep_runtime_view_apply(rt, &view);
    if (ms->ops->release != NULL) {
        ms->ops->release(ms->ctx, &view);
    }
    if (status == EEP_OK) {
        *changed_p = 1;
    } else if (status == EEP_ERR_STALE_EPOCH) {
        *abandoned_p = rt->vm->stats.abandoned != abandoned_before;
        status       = rt->fenced ? EEP_ERR_FENCED : EEP_OK;
    }
    return status;
}

/* A view given up for a newer one: take that one at once (bounded: a few in a row). */
static eep_status_t eep_runtime_view_step(eep_runtime_t *rt, int *changed_p)
{
    eep_status_t status;
    int          abandoned = 0, tries;

    for (tries = 0; tries < 4; tries++) {
        status = eep_runtime_view_step_once(rt, changed_p, &abandoned);
        if (!abandoned) {
            break;
        }
    }
    return status;
}

eep_status_t eep_runtime_membership_start(eep_runtime_t *rt, const eep_membership_t *ms,
                                          int join_timeout_ms)
{
    eep_view_machine_params_t  mp;
    const eep_view_comm_ops_t *ops;
    eep_status_t               status;
    double                     deadline;
    int                        changed = 0;

    if (ms->ops == NULL || ms->ops->poll == NULL || ms->ops->publish_uid == NULL ||
        ms->ops->fetch_uid == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "params.membership: ops with poll, publish_uid and "
                                      "fetch_uid are required");
        return EEP_ERR_INVALID_ARG;
    }
    status = eep_runtime_nccl_view_begin(rt, &ops);
    if (status != EEP_OK) {
        return status;
    }
    rt->membership = *ms;
    rt->vm         = calloc(1, sizeof(*rt->vm));
    if (rt->vm == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    memset(&mp, 0, sizeof(mp));
    mp.size          = sizeof(mp);
    mp.comm_ops      = ops;
    mp.comm_ctx      = rt;
    mp.membership    = &rt->membership;
    mp.timeout_ms    = (int)rt->cfg.init_timeout_ms;
    mp.release_early = (int)rt->cfg.view_release_early;
    status           = eep_view_machine_init(rt->vm, &mp);
    if (status != EEP_OK) {
        free(rt->vm);
        rt->vm = NULL;
        return status;
    }
    rt->fenced = 1;
    eep_runtime_abort(rt);
    deadline = eep_clock_ms() +
               (double)(join_timeout_ms > 0 ? join_timeout_ms : (int)rt->cfg.init_timeout_ms);
    /* Bounded: each poll is the provider's quick look; between them 10 ms. */
    for (;;) {
        status = eep_runtime_view_step(rt, &changed);
        if (status == EEP_OK && changed) {
            return EEP_OK;
        }
        if (status != EEP_OK && status != EEP_ERR_FENCED && status != EEP_ERR_LEASE_LOST &&
            status != EEP_ERR_CONTROL_UNAVAILABLE) {
            return status; /* a view held this rank but could not be applied */
        }
        if (eep_clock_ms() > deadline) {
            eep_error(EEP_SUBSYS_RUNTIME, "membership: no view holding this rank within %d ms",
                      join_timeout_ms > 0 ? join_timeout_ms : (int)rt->cfg.init_timeout_ms);
            return EEP_ERR_TIMEOUT;
        }
        eep_clock_sleep_ms(10);
    }
}

void eep_runtime_membership_end(eep_runtime_t *rt)
{
    if (rt->vm == NULL) {
        return;
    }
    eep_view_machine_cleanup(rt->vm);
    eep_runtime_nccl_view_clear(rt);
    free(rt->vm);
    rt->vm = NULL;
    free(rt->placement);
    free(rt->local_experts);
    rt->placement     = NULL;
    rt->local_experts = NULL;
}

eep_status_t eep_membership_sync(eep_runtime_t *rt, int *changed_p, eep_membership_info_t *info_p)
{
    eep_status_t status;
    int          changed = 0;

    if (rt == NULL || changed_p == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "eep_membership_sync: rt and changed_p must not be NULL");
        return EEP_ERR_INVALID_ARG;
    }
    if (info_p != NULL && info_p->size != sizeof(*info_p)) {
        eep_error(EEP_SUBSYS_RUNTIME,
                  "eep_membership_sync: info_p->size %zu is not sizeof(eep_membership_info_t) %zu",
                  info_p->size, sizeof(*info_p));
        return EEP_ERR_INVALID_ARG;
    }
    if (rt->vm == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "eep_membership_sync: rt was not created with "
                                      "params.membership");
        return EEP_ERR_INVALID_ARG;
    }
    status     = eep_runtime_view_step(rt, &changed);
    *changed_p = changed;
    if (info_p != NULL && (status == EEP_OK || status == EEP_ERR_FENCED)) {
        eep_runtime_info_fill(rt, info_p);
    }
    return status;
}

eep_status_t eep_membership_fault(eep_runtime_t *rt, const char *phase)
{
    eep_fault_record_t rec;
    eep_status_t       status;
    int                suspect;

    if (rt == NULL || phase == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "eep_membership_fault: rt and phase must not be NULL");
        return EEP_ERR_INVALID_ARG;
    }
    if (rt->vm == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "eep_membership_fault: rt was not created with "
                                      "params.membership");
        return EEP_ERR_INVALID_ARG;
    }
    if (rt->fenced) {
        return EEP_ERR_FENCED;
    }
    status = eep_runtime_fault(rt, &rec);
    if (status != EEP_OK) {
        return status;
    }
    suspect = rec.peer >= 0 && rec.peer < rt->nranks && rec.peer != rt->rank ? rec.peer : -1;
    return eep_view_machine_fault(rt->vm, suspect, phase);
}
