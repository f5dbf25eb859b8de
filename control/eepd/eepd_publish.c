/*
 * eepd_publish.c - what eepd's leader writes: the next view by one Txn, evictions on faults.
 *
 * View N is written with one Txn whose compares are: views/<N> absent, the leader key still ours
 * (value and create revision), and view/current unchanged since we read it; so two replicas that
 * both think they lead cannot both publish, and an epoch is never written twice.  One round trip
 * per view change in the steady state.  A fault report makes the leader delete the suspect's
 * member key with the report (its agent rejoins as a new member).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/eepd/eepd.h"
#include "util/clock.h"
#include "util/log.h"

/* ---- publishing ------------------------------------------------------------------------- */

/* Helper thread: the publish Txn; when it loses, read the leader key and view/current. */
static void eepd_publish_run(eep_etcd_t *etcd, eepd_job_t *job)
{
    job->status = eep_etcd_txn(etcd, job->cmps, job->n_cmps, job->ops, job->n_ops, NULL, 0,
                               &job->ok, &job->rev);
    if (job->status != EEP_OK || job->ok) {
        return;
    }
    job->have_r1 = eep_etcd_range(etcd, job->keys[2], 0, &job->r1) == EEP_OK;
    job->have_r2 = eep_etcd_range(etcd, job->keys[1], 0, &job->r2) == EEP_OK;
}

static void eepd_publish_done(eepd_t *eepd, eepd_job_t *job)
{
    eepd->cron_busy    = 0;
    eepd->publishing   = 0;
    eepd->etcd_failing = job->status == EEP_ERR_CONTROL_UNAVAILABLE;
    if (job->status != EEP_OK) {
        eepd->late_changes = eepd->late_urgent = 0; /* still pending: retried at a later cron */
        return;
    }
    if (!job->ok) {
        eepd->publish_conflicts++;
        eepd->etcd_round_trips += 2;
        eep_warn(EEP_SUBSYS_EEPD,
                 "publishing view %llu lost a race (leader key or view/current changed)%s; "
                 "re-reading",
                 (unsigned long long)job->epoch, job->flags ? " as it should (injected)" : "");
        eepd->late_changes = eepd->late_urgent = 0;
        eepd_refresh_apply(eepd, job);
        return;
    }
    if (job->flags) {
        eep_error(EEP_SUBSYS_EEPD, "a stale publish succeeded: the epoch guard is broken");
    } else {
        eepd->last_publish_ms = (double)(eepd_now_ms() - eepd->settle.pending_since_ms);
        /* Changes seen while the Txn was in flight are found again: adopting the view notes a
         * reconcile on the leader. */
        eepd_settle_reset(&eepd->settle);
        eepd->urgent    = 0;
        eepd->reason[0] = '\0';
    }
    eepd->views_published++;
    /* Every etcd call the loop made since the previous publish, this Txn included. */
    eepd->last_view_round_trips  = eepd->etcd_round_trips - eepd->round_trips_at_publish;
    eepd->round_trips_at_publish = eepd->etcd_round_trips;
    eep_info(EEP_SUBSYS_EEPD, "published view %llu: %zu ranks (%s)", (unsigned long long)job->epoch,
             job->n_ranks, job->text);
    eepd->own_publish_rev = job->rev;
    eepd->adopting_own    = 1;
    eepd_adopt_view(eepd, job->value, job->value_len, job->rev);
    eepd->adopting_own = 0;
    if (eepd->late_changes) {
        eepd->late_changes = 0;
        eepd_note_change(eepd, eepd->late_reason, eepd->late_urgent);
        eepd->late_urgent = 0;
    }
}

/* Build the next view and queue its Txn: EEP_INPROGRESS, or EEP_OK when nothing is to be
 * published, or an error. */
eep_status_t eepd_publish(eepd_t *eepd, int force)
{
    size_t                    n_cands = eepd->n_members, n = 0, i, n_cur = 0;
    eepd_candidate_t         *cands = NULL;
    size_t                   *order = NULL;
    const char              **cur = NULL, **next_ids = NULL;
    Eep__V1__View             view = EEP__V1__VIEW__INIT;
    Eep__V1__Member         **vm   = NULL;
    Eep__V1__ExpertPlacement *pl = NULL, **plp = NULL;
    uint32_t                 *ranks = NULL, copies = 0;
    uint32_t                  n_exp = (uint32_t)eepd->cfg.num_experts;
    uint8_t                  *buf   = NULL;
    size_t                    len;
    eepd_job_t               *job;
    uint64_t                  epoch;
    eep_status_t              status = EEP_ERR_NO_MEMORY;

    n_cur    = eepd->view != NULL ? eepd->view->n_members : 0;
    cands    = calloc(n_cands + 1, sizeof(*cands));
    order    = calloc(n_cands + 1, sizeof(*order));
    cur      = calloc(n_cur + 1, sizeof(*cur));
    next_ids = calloc(n_cands + 1, sizeof(*next_ids));
    vm       = calloc(n_cands + 1, sizeof(*vm));
    if (cands == NULL || order == NULL || cur == NULL || next_ids == NULL || vm == NULL) {
        goto out;
    }
    for (i = 0; i < n_cur; i++) {
        cur[i] = eepd->view->members[i]->id;
    }
    for (i = 0; i < n_cands; i++) {
        const eepd_member_t *m = &eepd->members[i];
        int cordoned = eepd_idset_has(&eepd->cordoned, m->id) && !eepd_in_view(eepd, m->id);

        cands[i].id            = m->id;
        cands[i].join_revision = m->create_rev;
        cands[i].eligible      = !m->member->leaving && !cordoned &&
                            !eepd_idset_has(&eepd->drained, m->id);
    }
    status = eepd_view_order(cur, n_cur, cands, n_cands, (size_t)eepd->cfg.max_ranks, order, &n);
    if (status != EEP_OK) {
        goto out;
    }
    for (i = 0; i < n; i++) {
        next_ids[i] = eepd->members[order[i]].id;
    }
    if (!force && !eepd_view_differs(cur, n_cur, next_ids, n)) {
        status = EEP_OK; /* nothing to publish */
        goto out;
    }
    if (n < (size_t)eepd->cfg.min_ranks) {
        if (!eepd->below_min_warned) {
            eep_warn(EEP_SUBSYS_EEPD,
                     "%zu eligible members, fewer than EEP_EEPD_MIN_RANKS %lld: "
                     "no view published",
                     n, (long long)eepd->cfg.min_ranks);
            eepd->below_min_warned = 1;
        }
        status = EEP_ERR_BUSY;
        goto out;
    }
    eepd->below_min_warned = 0;
    /* The next epoch follows every epoch etcd still shows (view/current, views/<N>) and every
     * one this replica ever saw, so a deleted view/current never makes an epoch come again. */
    epoch = eepd->view != NULL ? eepd->view->epoch : 0;
    if (eepd->max_epoch > epoch) {
        epoch = eepd->max_epoch;
    }
    if (epoch >= EEPD_EPOCH_MAX) {
        eep_error(EEP_SUBSYS_EEPD, "epoch %llu is at the limit 2^53: no view published",
                  (unsigned long long)epoch);
        status = EEP_ERR_STALE_EPOCH;
        goto out;
    }
    epoch++;
    for (i = 0; i < n; i++) {
        vm[i]           = eepd->members[order[i]].member;
        vm[i]->cordoned = eepd_idset_has(&eepd->cordoned, vm[i]->id);
    }
    if (n_exp > 0) {
        ranks = calloc((size_t)n_exp * (1 + (size_t)eepd->cfg.redundant_experts), sizeof(*ranks));
        pl    = calloc(n_exp, sizeof(*pl));
        plp   = calloc(n_exp, sizeof(*plp));
        if (ranks == NULL || pl == NULL || plp == NULL) {
            status = EEP_ERR_NO_MEMORY;
            goto out;
        }
        status = eepd_view_place(n_exp, (uint32_t)eepd->cfg.redundant_experts, (uint32_t)n, ranks,
                                 &copies);
        if (status != EEP_OK) {
            goto out;
        }
        for (i = 0; i < n_exp; i++) {
            eep__v1__expert_placement__init(&pl[i]);
            pl[i].expert  = (uint32_t)i;
            pl[i].n_ranks = copies;
            pl[i].ranks   = &ranks[i * copies];
            plp[i]        = &pl[i];
        }
    }
    view.epoch           = epoch;
    view.n_members       = n;
    view.members         = vm;
    view.n_placement     = n_exp;
    view.placement       = plp;
    view.root            = 0;
    view.reason          = eepd->reason[0] ? eepd->reason : "change";
    view.leader          = eepd->replica_id;
    view.created_unix_ms = eep_clock_wall_ms();
    view.num_experts     = n_exp;
    len                  = eep__v1__view__get_packed_size(&view);
    buf                  = malloc(len ? len : 1);
    if (buf == NULL) {
        status = EEP_ERR_NO_MEMORY;
        goto out;
    }
    eep__v1__view__pack(&view, buf);
    if (len > (size_t)(eepd->cfg.max_view_bytes > 0 ? eepd->cfg.max_view_bytes : 524288)) {
        size_t big = 0, big_len = 0;

        for (i = 0; i < n; i++) {
            size_t l = eep__v1__member__get_packed_size(vm[i]);

            if (l > big_len) {
                big_len = l;
                big     = i;
            }
        }
        if (!eepd->view_size_warned) {
            eep_error(EEP_SUBSYS_EEPD,
                      "view %llu would be %zu bytes with %zu ranks, over EEP_EEPD_MAX_VIEW_BYTES "
                      "%lld; not published (largest member %s, %zu bytes)",
                      (unsigned long long)epoch, len, n, (long long)eepd->cfg.max_view_bytes,
                      n > 0 ? vm[big]->id : "-", big_len);
            eepd->view_size_warned = 1;
        }
        status = EEP_ERR_NO_RESOURCE;
        goto out;
    }
    eepd->view_size_warned = 0;

    job = eepd_job_new(eepd_publish_run, eepd_publish_done);
    if (job == NULL) {
        status = EEP_ERR_NO_MEMORY;
        goto out;
    }
    /* keys[0] views/<N>, [1] view/current, [2] leader, [3] the oldest kept view, [4] our id. */
    eepd_key(eepd, job->keys[0], sizeof(job->keys[0]), "views/%020llu", (unsigned long long)epoch);
    eepd_key(eepd, job->keys[1], sizeof(job->keys[1]), "view/current");
    eepd_key(eepd, job->keys[2], sizeof(job->keys[2]), "leader");
    snprintf(job->keys[4], sizeof(job->keys[4]), "%s", eepd->replica_id);
    job->cmps[0] = (eep_etcd_cmp_t){
        .key = job->keys[0], .target = EEP_ETCD_CMP_CREATE, .op = EEP_ETCD_EQUAL, .number = 0
    };
    job->cmps[1] = (eep_etcd_cmp_t){ .key    = job->keys[2],
                                     .target = EEP_ETCD_CMP_CREATE,
                                     .op     = EEP_ETCD_EQUAL,
                                     .number = eepd->leader_create_rev };
    job->cmps[2] = (eep_etcd_cmp_t){ .key       = job->keys[2],
                                     .target    = EEP_ETCD_CMP_VALUE,
                                     .op        = EEP_ETCD_EQUAL,
                                     .value     = (const uint8_t *)job->keys[4],
                                     .value_len = strlen(job->keys[4]) };
    job->cmps[3] = (eep_etcd_cmp_t){ .key    = job->keys[1],
                                     .target = EEP_ETCD_CMP_MOD,
                                     .op     = EEP_ETCD_EQUAL,
                                     .number = eepd->view_mod_rev };
    job->n_cmps  = 4;
    job->ops[0]  = (eep_etcd_op_t){
         .type = EEP_ETCD_OP_PUT, .key = job->keys[0], .value = buf, .value_len = len
    };
    job->ops[1] = (eep_etcd_op_t){
        .type = EEP_ETCD_OP_PUT, .key = job->keys[1], .value = buf, .value_len = len
    };
    job->n_ops = 2;
    if (epoch > (uint64_t)eepd->cfg.view_history) {
        eepd_key(eepd, job->keys[3], sizeof(job->keys[3]), "views/%020llu",
                 (unsigned long long)(epoch - (uint64_t)eepd->cfg.view_history));
        job->ops[job->n_ops++] = (eep_etcd_op_t){ .type = EEP_ETCD_OP_DELETE, .key = job->keys[3] };
    }
    job->value             = buf; /* the job owns the view's bytes now */
    job->value_len         = len;
    buf                    = NULL;
    job->epoch             = epoch;
    job->n_ranks           = n;
    job->flags             = eepd->inject_stale_publish_now;
    eepd->publishing       = !job->flags;
    eepd->publishing_epoch = epoch;
    snprintf(job->text, sizeof(job->text), "%s", view.reason);
    eepd->cron_busy = 1;
    eepd->etcd_round_trips++;
    eepd_jobs_submit(eepd, job);
    status = EEP_INPROGRESS;
out:
    free(buf);
    free(plp);
    free(pl);
    free(ranks);
    free(vm);
    free(next_ids);
    free(cur);
    free(order);
    free(cands);
    return status;
}

/* Helper thread: delete the suspect's member key and the report in one Txn. */
static void eepd_fault_run(eep_etcd_t *etcd, eepd_job_t *job)
{
    job->status = eep_etcd_txn(etcd, NULL, 0, job->ops, 2, NULL, 0, &job->ok, NULL);
}

static void eepd_fault_done(eepd_t *eepd, eepd_job_t *job)
{
    const char *id = job->text;

    eepd->cron_busy    = 0;
    eepd->etcd_failing = job->status == EEP_ERR_CONTROL_UNAVAILABLE;
    if (job->status != EEP_OK) {
        return; /* retried at the next cron */
    }
    if (eepd_member_find(eepd, id) != NULL) {
        eep_warn(EEP_SUBSYS_EEPD, "evicted member %s after a fault report", id);
        eepd_member_remove(eepd, id);
        eepd_note_change(eepd, "fault", 1);
    }
    eepd_idset_del(&eepd->faults, id);
}

/* The leader acts on fault reports: evict the suspect (its agent rejoins as a new member). */
void eepd_handle_faults(eepd_t *eepd)
{
    const char *id  = eepd->faults.ids[eepd->faults.count - 1];
    eepd_job_t *job = eepd_job_new(eepd_fault_run, eepd_fault_done);

    if (job == NULL) {
        return;
    }
    snprintf(job->text, sizeof(job->text), "%s", id);
    eepd_key(eepd, job->keys[0], sizeof(job->keys[0]), "members/%s", id);
    eepd_key(eepd, job->keys[1], sizeof(job->keys[1]), "faults/%s", id);
    job->ops[0]     = (eep_etcd_op_t){ .type = EEP_ETCD_OP_DELETE, .key = job->keys[0] };
    job->ops[1]     = (eep_etcd_op_t){ .type = EEP_ETCD_OP_DELETE, .key = job->keys[1] };
    eepd->cron_busy = 1;
    eepd->etcd_round_trips++;
    eepd_jobs_submit(eepd, job);
}
