/*
 * eepd_election.c - eepd's leader election: the replica lease and the leader key's create Txn.
 *
 * A campaign (a helper-thread job) grants the replica lease if there is none, keeps it alive,
 * then creates `leader` only if absent (create_revision 0).  A lost Txn reads the key: holding
 * our id under our live lease, it is ours and we lead again.  After a publish lost its race,
 * the two reads it made tell whether we still lead and what the current view is.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/eepd/eepd.h"
#include "util/log.h"

/* ---- election ----------------------------------------------------------------------------- */

/* Helper thread: a lease (if we have none) with its keepalive, then the Txn that creates the
 * leader key; a lost Txn reads the key (eepd_campaign_done may find it is ours). */
static void eepd_campaign_run(eep_etcd_t *etcd, eepd_job_t *job)
{
    int64_t ttl = 0;

    job->flags = 0;
    if (job->lease == 0) {
        job->status = eep_etcd_lease_grant(etcd, job->ttl, &job->lease, &ttl);
        if (job->status != EEP_OK) {
            job->lease = 0;
            return;
        }
        if (ttl != job->ttl) {
            eep_warn(EEP_SUBSYS_EEPD, "etcd granted a %lld s leader lease (asked %lld s)",
                     (long long)ttl, (long long)job->ttl);
        }
        job->status = eep_etcd_lease_keepalive(etcd, job->lease, eepd_on_lease_lost, job->arg);
        if (job->status != EEP_OK) {
            eep_etcd_lease_revoke(etcd, job->lease);
            job->lease = 0;
            return;
        }
        job->flags = 1; /* a new lease */
    }
    job->ops[0].lease = job->lease;
    job->status       = eep_etcd_txn(etcd, job->cmps, 1, job->ops, 1, NULL, 0, &job->ok, &job->rev);
    if (job->status == EEP_OK && !job->ok &&
        eep_etcd_range(etcd, job->keys[0], 0, &job->r1) == EEP_OK) {
        job->have_r1 = 1;
    }
}

static void eepd_campaign_done(eepd_t *eepd, eepd_job_t *job)
{
    eep_etcd_kv_t *kv = job->have_r1 && job->r1.count == 1 ? &job->r1.kvs[0] : NULL;

    eepd->cron_busy    = 0;
    eepd->etcd_failing = job->status == EEP_ERR_CONTROL_UNAVAILABLE;
    if (job->flags) {
        eepd->lease = job->lease;
    }
    if (job->status != EEP_OK || job->lease != eepd->lease || eepd->lease == 0) {
        return; /* failed, or the lease was lost meanwhile */
    }
    if (!job->ok) {
        /* Lost because the leader key exists: if it holds our id under our live lease, it is
         * ours (we missed or mis-ordered its events) and we lead; a replica must never sit
         * beside a key that names it while nobody leads. */
        if (kv != NULL && kv->lease == eepd->lease && kv->value_len == strlen(eepd->replica_id) &&
            memcmp(kv->value, eepd->replica_id, kv->value_len) == 0 && !eepd->is_leader) {
            eepd->is_leader         = 1;
            eepd->leader_create_rev = kv->create_revision;
            if (kv->mod_revision > eepd->leader_seen_rev) {
                eepd->leader_seen_rev = kv->mod_revision;
            }
            snprintf(eepd->leader_id, sizeof(eepd->leader_id), "%s", eepd->replica_id);
            eep_warn(EEP_SUBSYS_EEPD,
                     "the leader key (revision %lld) is ours under our lease: leading again",
                     (long long)kv->create_revision);
            eepd_note_change(eepd, "failover", 1);
        } else if (kv != NULL && !eepd->is_leader) {
            snprintf(eepd->leader_id, sizeof(eepd->leader_id), "%.*s", (int)kv->value_len,
                     (const char *)kv->value);
        }
        return;
    }
    if (job->rev < eepd->leader_seen_rev) {
        return; /* the key we created is already gone again (its delete was applied) */
    }
    eepd->is_leader         = 1;
    eepd->leader_create_rev = job->rev;
    eepd->leader_seen_rev   = job->rev;
    snprintf(eepd->leader_id, sizeof(eepd->leader_id), "%s", eepd->replica_id);
    eepd->elections_won++;
    eep_info(EEP_SUBSYS_EEPD, "replica %s is the leader (revision %lld)", eepd->replica_id,
             (long long)job->rev);
    /* Reconcile at once: members may have come and gone while nobody led. */
    eepd_note_change(eepd, "failover", 1);
}

void eepd_campaign(eepd_t *eepd)
{
    eepd_job_t *job = eepd_job_new(eepd_campaign_run, eepd_campaign_done);

    if (job == NULL) {
        return;
    }
    eepd_key(eepd, job->keys[0], sizeof(job->keys[0]), "leader");
    snprintf(job->keys[1], sizeof(job->keys[1]), "%s", eepd->replica_id);
    job->cmps[0] = (eep_etcd_cmp_t){
        .key = job->keys[0], .target = EEP_ETCD_CMP_CREATE, .op = EEP_ETCD_EQUAL, .number = 0
    };
    job->ops[0]     = (eep_etcd_op_t){ .type      = EEP_ETCD_OP_PUT,
                                       .key       = job->keys[0],
                                       .value     = (const uint8_t *)job->keys[1],
                                       .value_len = strlen(job->keys[1]) };
    job->lease      = eepd->lease;
    job->ttl        = eepd->cfg.lease_ttl_s;
    job->arg        = eepd;
    eepd->cron_busy = 1;
    eepd->etcd_round_trips += eepd->lease == 0 ? 3 : 1;
    eepd_jobs_submit(eepd, job);
}

/* After a failed publish (loop): whether we still lead, and what the current view is, from the
 * two reads the publish job made. */
void eepd_refresh_apply(eepd_t *eepd, eepd_job_t *job)
{
    if (job->have_r1) {
        if (job->r1.count == 0 || job->r1.kvs[0].create_revision != eepd->leader_create_rev) {
            if (eepd->is_leader) {
                eep_warn(EEP_SUBSYS_EEPD, "no longer the leader: stepping down");
            }
            eepd->is_leader = 0;
        }
    }
    if (job->have_r2) {
        if (job->r2.count == 1) {
            eepd_adopt_view(eepd, job->r2.kvs[0].value, job->r2.kvs[0].value_len,
                            job->r2.kvs[0].mod_revision);
        } else {
            eepd_adopt_view(eepd, NULL, 0, 0);
        }
    }
}
