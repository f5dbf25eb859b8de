/*
 * runtime_view.c - the view-application state machine (runtime_view.h has the rules).
 *
 * Two halves: eep_view_decide() is a pure function of the two views (so every survivor computes
 * the same action and exclusion list), and eep_view_machine_apply() carries the decision out
 * through the communicator ops in a fixed order: build the whole new set, swap it in, and only
 * then hand the old set to abort_async.  Member ids, not ranks, carry identity across views:
 * the dead-peer mask is translated through them when ranks move.
 */
#include "elastic/runtime/runtime_view.h"

#include <stdlib.h>
#include <string.h>

#include "util/log.h"

#define EEP_VIEW_DEFAULT_TIMEOUT_MS 10000

const char *eep_view_state_name(eep_view_state_t state)
{
    switch (state) {
    case EEP_VIEW_STATE_NONE:
        return "none";
    case EEP_VIEW_STATE_RUNNING:
        return "running";
    case EEP_VIEW_STATE_DEGRADED:
        return "degraded";
    case EEP_VIEW_STATE_FENCED:
        return "fenced";
    case EEP_VIEW_STATE_FAILED:
        return "failed";
    }
    return "unknown";
}

const char *eep_view_action_name(eep_view_action_t action)
{
    switch (action) {
    case EEP_VIEW_ACTION_NONE:
        return "none";
    case EEP_VIEW_ACTION_SHRINK:
        return "shrink";
    case EEP_VIEW_ACTION_FRESH:
        return "fresh";
    case EEP_VIEW_ACTION_REFUSE_STALE:
        return "refuse (stale epoch)";
    case EEP_VIEW_ACTION_REFUSE_REMOVED:
        return "refuse (removed)";
    }
    return "unknown";
}

/* @return the rank of member @p id in @p ids[0..n), or -1. */
static int eep_view_find(char *const *ids, int n, const char *id)
{
    int i;

    for (i = 0; i < n; i++) {
        if (strcmp(ids[i], id) == 0) {
            return i;
        }
    }
    return -1;
}

static int eep_view_find_const(const char *const *ids, int n, const char *id)
{
    int i;

    for (i = 0; i < n; i++) {
        if (strcmp(ids[i], id) == 0) {
            return i;
        }
    }
    return -1;
}

eep_status_t eep_view_decide(const eep_view_copy_t *cur, int have_comm, uint64_t last_epoch,
                             const eep_view_t *next, eep_view_plan_t *plan_p)
{
    eep_view_plan_t plan;
    int             r, n_surv = 0;

    if (next == NULL || plan_p == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "eep_view_decide: next and plan_p must not be NULL");
        return EEP_ERR_INVALID_ARG;
    }
    memset(&plan, 0, sizeof(plan));
    plan.new_rank  = next->my_rank;
    plan.new_world = next->world;
    plan.root      = next->root;
    if (next->epoch <= last_epoch) {
        plan.action = EEP_VIEW_ACTION_REFUSE_STALE;
        plan.why    = "the epoch is not newer than the last one seen";
    } else if (next->my_rank < 0) {
        plan.action = EEP_VIEW_ACTION_REFUSE_REMOVED;
        plan.why    = "this rank is not in the view";
    } else if (cur == NULL || cur->world == 0 || !have_comm) {
        plan.action = EEP_VIEW_ACTION_FRESH;
        plan.why    = "no usable communicator here";
    } else {
        /* Survivors: old ranks whose member is in the new view; they must come in the same
           relative order as the new view's ranks, and be all of them. */
        int in_order = 1;

        for (r = 0; r < cur->world; r++) {
            int nr = eep_view_find_const(next->member_ids, next->world, cur->member_ids[r]);

            if (nr < 0) {
                plan.exclude[plan.n_exclude++] = r;
            } else {
                in_order = in_order && nr == n_surv;
                n_surv++;
            }
        }
        if (n_surv < next->world) {
            plan.action = EEP_VIEW_ACTION_FRESH;
            plan.why    = "the view adds members";
        } else if (!in_order) {
            plan.action = EEP_VIEW_ACTION_FRESH;
            plan.why    = "the view reorders the survivors";
        } else if (plan.n_exclude == 0) {
            plan.action = EEP_VIEW_ACTION_NONE;
            plan.why    = "the same members in the same order";
        } else {
            plan.action = EEP_VIEW_ACTION_SHRINK;
            plan.why    = "only removals";
        }
        if (plan.action != EEP_VIEW_ACTION_SHRINK) {
            plan.n_exclude = 0;
        }
    }
    *plan_p = plan;
    return EEP_OK;
}

static void eep_view_copy_free(eep_view_copy_t *c)
{
    int i;

    if (c->member_ids != NULL) {
        for (i = 0; i < c->world; i++) {
            free(c->member_ids[i]);
        }
    }
    free(c->member_ids);
    free(c->placement);
    memset(c, 0, sizeof(*c));
}

static eep_status_t eep_view_copy_make(const eep_view_t *v, eep_view_copy_t *c_p)
{
    eep_view_copy_t c;
    int             i;

    memset(&c, 0, sizeof(c));
    c.epoch       = v->epoch;
    c.world       = v->world;
    c.my_rank     = v->my_rank;
    c.root        = v->root;
    c.num_experts = v->num_experts;
    c.member_ids  = calloc((size_t)v->world, sizeof(char *));
    if (c.member_ids == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    for (i = 0; i < v->world; i++) {
        c.member_ids[i] = strdup(v->member_ids[i]);
        if (c.member_ids[i] == NULL) {
            goto err_free;
        }
    }
    if (v->num_experts > 0) {
        c.placement = malloc((size_t)v->num_experts * sizeof(*c.placement));
        if (c.placement == NULL) {
            goto err_free;
        }
        memcpy(c.placement, v->placement, (size_t)v->num_experts * sizeof(*c.placement));
    }
    *c_p = c;
    return EEP_OK;

err_free:
    eep_view_copy_free(&c);
    return EEP_ERR_NO_MEMORY;
}

static int eep_view_bit(const uint64_t *mask, int r)
{
    return (int)((mask[r / 64] >> (r % 64)) & 1u);
}

static void eep_view_bit_set(uint64_t *mask, int r)
{
    mask[r / 64] |= 1ull << (r % 64);
}

static int eep_view_mask_any(const uint64_t *mask)
{
    int i;

    for (i = 0; i < EEP_VIEW_DEAD_WORDS; i++) {
        if (mask[i] != 0) {
            return 1;
        }
    }
    return 0;
}

eep_status_t eep_view_machine_init(eep_view_machine_t *m, const eep_view_machine_params_t *params)
{
    if (m == NULL || params == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "eep_view_machine_init: m and params must not be NULL");
        return EEP_ERR_INVALID_ARG;
    }
    if (params->size != sizeof(*params)) {
        eep_error(EEP_SUBSYS_RUNTIME,
                  "eep_view_machine_params_t.size %zu is not sizeof(eep_view_machine_params_t) %zu",
                  params->size, sizeof(*params));
        return EEP_ERR_INVALID_ARG;
    }
    if (params->comm_ops == NULL || params->membership == NULL || params->membership->ops == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME,
                  "eep_view_machine_init: params.comm_ops and params.membership are required");
        return EEP_ERR_INVALID_ARG;
    }
    if (params->timeout_ms < 0) {
        eep_error(EEP_SUBSYS_RUNTIME, "eep_view_machine_init: params.timeout_ms %d is negative",
                  params->timeout_ms);
        return EEP_ERR_INVALID_ARG;
    }
    memset(m, 0, sizeof(*m));
    m->p = *params;
    if (m->p.timeout_ms == 0) {
        m->p.timeout_ms = EEP_VIEW_DEFAULT_TIMEOUT_MS;
    }
    m->state = EEP_VIEW_STATE_NONE;
    return EEP_OK;
}

static int eep_view_have_set(const eep_view_machine_t *m)
{
    return m->set.comm != NULL;
}

/* Hand the current set to abort_async (off the critical path) and forget it. */
static void eep_view_drop_set(eep_view_machine_t *m)
{
    if (eep_view_have_set(m)) {
        m->p.comm_ops->abort_async(m->p.comm_ctx, &m->set);
    }
    memset(&m->set, 0, sizeof(m->set));
}

void eep_view_machine_cleanup(eep_view_machine_t *m)
{
    if (m == NULL) {
        return;
    }
    eep_view_drop_set(m);
    eep_view_copy_free(&m->view);
    m->state = EEP_VIEW_STATE_NONE;
}

static void eep_view_report(eep_view_machine_t *m, int rank, uint64_t epoch, const char *reason)
{
    const eep_membership_t *ms = m->p.membership;
    eep_status_t            status;

    if (ms->ops->report_fault == NULL) {
        return;
    }
    status = ms->ops->report_fault(ms->ctx, rank, epoch, reason);
    m->stats.faults_reported++;
    if (status != EEP_OK) {
        /* The view that handles the fault comes anyway (the lease, or another survivor). */
        eep_warn(EEP_SUBSYS_RUNTIME, "view: reporting the fault (rank %d, epoch %llu) failed: %s",
                 rank, (unsigned long long)epoch, eep_status_string(status));
    }
}

/* Window and device communicator on a new comm, into @p set (set->comm already made).  On
   failure the partial set is discarded and cleared. */
static eep_status_t eep_view_finish_set(eep_view_machine_t *m, eep_view_comm_set_t *set,
                                        const char *what)
{
    const eep_view_comm_ops_t *ops = m->p.comm_ops;
    eep_status_t               status;

    status = ops->window_register(m->p.comm_ctx, set->comm, &set->window);
    if (status == EEP_OK) {
        status = ops->devcomm_create(m->p.comm_ctx, set->comm, set->window, &set->devcomm);
    }
    if (status != EEP_OK) {
        eep_error(EEP_SUBSYS_RUNTIME, "view: %s the %s communicator's %s failed: %s",
                  set->window == NULL ? "registering" : "creating", what,
                  set->window == NULL ? "window" : "device communicator",
                  eep_status_string(status));
        ops->discard(m->p.comm_ctx, set);
        memset(set, 0, sizeof(*set));
    }
    return status;
}

static eep_status_t eep_view_make_shrunk(eep_view_machine_t *m, const eep_view_plan_t *plan,
                                         eep_view_comm_set_t *set_p)
{
    eep_view_comm_set_t set = { NULL, NULL, NULL };
    eep_status_t        status;

    status = m->p.comm_ops->shrink(m->p.comm_ctx, m->set.comm, plan->exclude, plan->n_exclude,
                                   &set.comm);
    if (status != EEP_OK) {
        if (status != EEP_ERR_STALE_EPOCH) { /* given up for a newer view: said by the caller */
            eep_error(EEP_SUBSYS_RUNTIME,
                      "view: shrinking the communicator (%d ranks out) failed: %s", plan->n_exclude,
                      eep_status_string(status));
        }
        return status;
    }
    status = eep_view_finish_set(m, &set, "shrunk");
    if (status == EEP_OK) {
        *set_p = set;
    }
    return status;
}

static eep_status_t eep_view_make_fresh(eep_view_machine_t *m, const eep_view_t *next, int attempt,
                                        eep_view_comm_set_t *set_p)
{
    const eep_membership_t *ms  = m->p.membership;
    eep_view_comm_set_t     set = { NULL, NULL, NULL };
    eep_comm_uid_t          uid;
    eep_status_t            status;

    if (next->my_rank == next->root) {
        status = m->p.comm_ops->uid_create(m->p.comm_ctx, &uid);
        if (status == EEP_OK) {
            status = ms->ops->publish_uid(ms->ctx, next->epoch, attempt, &uid);
        }
    } else {
        status = ms->ops->fetch_uid(ms->ctx, next->epoch, attempt, m->p.timeout_ms, &uid);
    }
    if (status != EEP_OK) {
        if (status != EEP_ERR_STALE_EPOCH) {
            eep_error(EEP_SUBSYS_RUNTIME,
                      "view: %s the unique id of epoch %llu (attempt %d, root %d) failed: %s",
                      next->my_rank == next->root ? "publishing" : "fetching",
                      (unsigned long long)next->epoch, attempt, next->root,
                      eep_status_string(status));
        }
        return status;
    }
    status = m->p.comm_ops->create(m->p.comm_ctx, &uid, next->world, next->my_rank, &set.comm);
    if (status != EEP_OK) {
        if (status != EEP_ERR_STALE_EPOCH) {
            eep_error(EEP_SUBSYS_RUNTIME, "view: creating a communicator of %d ranks failed: %s",
                      next->world, eep_status_string(status));
        }
        return status;
    }
    status = eep_view_finish_set(m, &set, "new");
    if (status == EEP_OK) {
        *set_p = set;
    }
    return status;
}

/* Carry the dead-peer mask over to @p next's ranks, through member ids; @p cleared: the comm was
   rebuilt, so a fault with no known suspect is over. */
static void eep_view_carry_faults(eep_view_machine_t *m, const eep_view_copy_t *next, int rebuilt)
{
    uint64_t dead[EEP_VIEW_DEAD_WORDS] = { 0 };
    int      r;

    for (r = 0; r < m->view.world; r++) {
        if (eep_view_bit(m->dead, r)) {
            int nr = eep_view_find(next->member_ids, next->world, m->view.member_ids[r]);

            if (nr >= 0) {
                eep_view_bit_set(dead, nr);
            }
        }
    }
    memcpy(m->dead, dead, sizeof(dead));
    /* Reports are per epoch: a suspect still in the new view is reported again if it faults. */
    memset(m->reported, 0, sizeof(m->reported));
    if (eep_view_mask_any(m->dead)) {
        m->fault_pending = 1;
    } else if (rebuilt) {
        m->fault_pending = 0;
    }
}

eep_status_t eep_view_machine_apply(eep_view_machine_t *m, const eep_view_t *next,
                                    eep_view_plan_t *plan_p)
{
    eep_view_comm_set_t set = { NULL, NULL, NULL };
    eep_view_copy_t     copy;
    eep_view_plan_t     plan;
    eep_status_t        status;
    int                 attempt = 0, released = 0;

    if (m == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "eep_view_machine_apply: m is NULL");
        return EEP_ERR_INVALID_ARG;
    }
    status = eep_view_check(next);
    if (status != EEP_OK) {
        return status;
    }
    status = eep_view_decide(&m->view, eep_view_have_set(m), m->last_epoch, next, &plan);
    if (status != EEP_OK) {
        return status;
    }
    if (plan_p != NULL) {
        *plan_p = plan;
    }
    if (plan.action == EEP_VIEW_ACTION_REFUSE_STALE) {
        eep_warn(EEP_SUBSYS_RUNTIME, "view: epoch %llu refused: not newer than epoch %llu",
                 (unsigned long long)next->epoch, (unsigned long long)m->last_epoch);
        m->stats.refused++;
        return EEP_ERR_STALE_EPOCH;
    }
    m->last_epoch = next->epoch;
    if (plan.action == EEP_VIEW_ACTION_REFUSE_REMOVED) {
        eep_warn(EEP_SUBSYS_RUNTIME, "view: epoch %llu does not hold this rank: fenced",
                 (unsigned long long)next->epoch);
        eep_view_drop_set(m);
        eep_view_copy_free(&m->view);
        m->fault_pending = 0;
        memset(m->dead, 0, sizeof(m->dead));
        m->state = EEP_VIEW_STATE_FENCED;
        m->stats.refused++;
        return EEP_ERR_FENCED;
    }
    status = eep_view_copy_make(next, &copy);
    if (status != EEP_OK) {
        return status;
    }
    if (plan.action == EEP_VIEW_ACTION_SHRINK) {
        status = eep_view_make_shrunk(m, &plan, &set);
        if (status != EEP_OK && status != EEP_ERR_STALE_EPOCH) {
            /* Every survivor whose shrink failed takes this path too; the root publishes the
               fallback's id only if its own shrink failed (see docs/architecture.md). */
            eep_warn(EEP_SUBSYS_RUNTIME, "view: epoch %llu: falling back to a fresh communicator",
                     (unsigned long long)next->epoch);
            m->stats.fallbacks++;
            plan.action = EEP_VIEW_ACTION_FRESH;
            plan.why    = "the shrink failed";
            attempt     = 1;
        }
    }
    if (plan.action == EEP_VIEW_ACTION_FRESH && status != EEP_ERR_STALE_EPOCH) {
        if (m->p.release_early && eep_view_have_set(m)) {
            /* the old set's release overlaps the new communicator's creation */
            eep_view_drop_set(m);
            released = 1;
        }
        status = eep_view_make_fresh(m, next, attempt, &set);
    }
    if (plan_p != NULL) {
        *plan_p = plan;
    }
    if (status == EEP_ERR_STALE_EPOCH && released) {
        /* Abandoned, but the old set is gone: no communicator here until a view is applied
           (fresh, as for a newcomer); no report, since nothing failed. */
        eep_warn(EEP_SUBSYS_RUNTIME,
                 "view: epoch %llu abandoned (fresh): a newer view is waiting; the old set was "
                 "released early, so none is left",
                 (unsigned long long)next->epoch);
        eep_view_copy_free(&copy);
        m->fault_pending = 0;
        memset(m->dead, 0, sizeof(m->dead));
        m->state = EEP_VIEW_STATE_FAILED;
        m->stats.abandoned++;
        return EEP_ERR_STALE_EPOCH;
    }
    if (status == EEP_ERR_STALE_EPOCH) {
        /* Abandoned for a newer view: keep everything as it was (the epoch counts as seen). */
        eep_warn(EEP_SUBSYS_RUNTIME,
                 "view: epoch %llu abandoned (%s): a newer view is waiting; staying at epoch %llu",
                 (unsigned long long)next->epoch, eep_view_action_name(plan.action),
                 (unsigned long long)m->view.epoch);
        eep_view_copy_free(&copy);
        m->stats.abandoned++;
        return EEP_ERR_STALE_EPOCH;
    }
    if (status != EEP_OK) {
        /* No communicator for this view: the old one belongs to an epoch the others left. */
        eep_view_drop_set(m);
        eep_view_copy_free(&m->view);
        eep_view_copy_free(&copy);
        m->fault_pending = 0;
        memset(m->dead, 0, sizeof(m->dead));
        m->state = EEP_VIEW_STATE_FAILED;
        m->stats.failed++;
        eep_view_report(m, next->my_rank, next->epoch, "view apply failed");
        return status;
    }
    if (plan.action != EEP_VIEW_ACTION_NONE) {
        /* The new set is complete: swap it in, then let the old one go off the critical path. */
        eep_view_comm_set_t old = m->set;

        m->set = set;
        if (old.comm != NULL) {
            m->p.comm_ops->abort_async(m->p.comm_ctx, &old);
        }
        if (plan.action == EEP_VIEW_ACTION_SHRINK) {
            m->stats.shrinks++;
        } else {
            m->stats.fresh++;
        }
    }
    eep_view_carry_faults(m, &copy, plan.action != EEP_VIEW_ACTION_NONE);
    eep_view_copy_free(&m->view);
    m->view  = copy;
    m->state = m->fault_pending ? EEP_VIEW_STATE_DEGRADED : EEP_VIEW_STATE_RUNNING;
    m->stats.applied++;
    eep_info(EEP_SUBSYS_RUNTIME, "view: epoch %llu applied (%s: %s), rank %d of %d, root %d",
             (unsigned long long)next->epoch, eep_view_action_name(plan.action), plan.why,
             next->my_rank, next->world, next->root);
    return EEP_OK;
}

eep_status_t eep_view_machine_fault(eep_view_machine_t *m, int suspect, const char *reason)
{
    if (m == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "eep_view_machine_fault: m is NULL");
        return EEP_ERR_INVALID_ARG;
    }
    if (!eep_view_have_set(m)) {
        eep_warn(EEP_SUBSYS_RUNTIME, "view: fault (%s) with no communicator (state %s): ignored",
                 reason != NULL ? reason : "?", eep_view_state_name(m->state));
        return EEP_ERR_FENCED;
    }
    if (suspect < -1 || suspect >= m->view.world) {
        eep_error(EEP_SUBSYS_RUNTIME, "view: fault suspect %d outside [-1, %d)", suspect,
                  m->view.world);
        return EEP_ERR_INVALID_ARG;
    }
    m->fault_pending = 1;
    m->state         = EEP_VIEW_STATE_DEGRADED;
    if (suspect >= 0) {
        eep_view_bit_set(m->dead, suspect);
        if (eep_view_bit(m->reported, suspect)) {
            return EEP_OK;
        }
        eep_view_bit_set(m->reported, suspect);
    }
    eep_view_report(m, suspect, m->view.epoch, reason != NULL ? reason : "fault");
    return EEP_OK;
}

int eep_view_machine_dead(const eep_view_machine_t *m, int rank)
{
    if (m == NULL || rank < 0 || rank >= m->view.world) {
        return 0;
    }
    return eep_view_bit(m->dead, rank);
}

eep_status_t eep_view_machine_lost_experts(const eep_view_machine_t *m, uint8_t *lost_p,
                                           int *n_lost_p)
{
    int e, n = 0;

    if (m == NULL || m->view.world == 0) {
        return EEP_ERR_NOT_FOUND;
    }
    for (e = 0; e < m->view.num_experts; e++) {
        int dead = eep_view_bit(m->dead, m->view.placement[e].rank);

        if (lost_p != NULL) {
            lost_p[e] = (uint8_t)dead;
        }
        n += dead;
    }
    if (n_lost_p != NULL) {
        *n_lost_p = n;
    }
    return EEP_OK;
}
