/*
 * eepd_watch.c - eepd's prefix watch: etcd's thread hands events to the loop through a queue.
 *
 * The etcd client's callbacks (watch events, the replica lease's loss) only copy what arrived
 * into eepd_event_t's under @c lock; the loop drains them in order and applies them
 * (eepd_mirror.c).  The watch is (re)started by a sync: a helper-thread job reads the whole
 * prefix at one revision and watches from the next, and the loop holds the new watch's events
 * until the snapshot is applied, so nothing is lost or applied twice.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/eepd/eepd.h"
#include "util/log.h"

/* ---- etcd thread -> loop ---------------------------------------------------------------- */

static void eepd_push(eepd_t *eepd, eepd_event_t *ev)
{
    pthread_mutex_lock(&eepd->lock);
    if (eepd->ev_tail != NULL) {
        eepd->ev_tail->next = ev;
    } else {
        eepd->ev_head = ev;
    }
    eepd->ev_tail = ev;
    pthread_mutex_unlock(&eepd->lock);
}

static void eepd_on_watch(const eep_etcd_event_t *events, size_t count, int64_t revision,
                          eep_status_t status, void *arg)
{
    eepd_t *eepd = arg;
    size_t  i;

    if (events == NULL) {
        eepd_event_t *ev = calloc(1, sizeof(*ev));

        if (ev != NULL) {
            ev->type = EEPD_EV_WATCH_LOST;
            eepd_push(eepd, ev);
        }
        eep_warn(EEP_SUBSYS_EEPD, "watch ended: %s", eep_status_string(status));
        return;
    }
    for (i = 0; i < count; i++) {
        const eep_etcd_kv_t *kv = &events[i].kv;
        eepd_event_t        *ev = calloc(1, sizeof(*ev));

        if (ev == NULL) {
            continue;
        }
        ev->type       = events[i].type == EEP_ETCD_EVENT_PUT ? EEPD_EV_PUT : EEPD_EV_DELETE;
        ev->key        = strndup((const char *)kv->key, kv->key_len);
        ev->value      = malloc(kv->value_len + 1);
        ev->value_len  = kv->value_len;
        ev->create_rev = kv->create_revision;
        ev->mod_rev    = kv->mod_revision;
        ev->revision   = revision;
        if (ev->key == NULL || ev->value == NULL) {
            free(ev->key);
            free(ev->value);
            free(ev);
            continue;
        }
        if (kv->value_len > 0) {
            memcpy(ev->value, kv->value, kv->value_len);
        }
        eepd_push(eepd, ev);
    }
}

void eepd_on_lease_lost(int64_t lease, eep_status_t status, void *arg)
{
    eepd_t       *eepd = arg;
    eepd_event_t *ev   = calloc(1, sizeof(*ev));

    eep_warn(EEP_SUBSYS_EEPD, "replica lease %llx lost: %s", (unsigned long long)lease,
             eep_status_string(status));
    if (ev != NULL) {
        ev->type     = EEPD_EV_LEASE_LOST;
        ev->revision = lease;
        eepd_push(eepd, ev);
    }
}

void eepd_drain_events(eepd_t *eepd)
{
    eepd_event_t *ev, *next;

    if (eepd->syncing) {
        return; /* the snapshot in flight goes first (eepd_sync_done) */
    }
    pthread_mutex_lock(&eepd->lock);
    ev            = eepd->ev_head;
    eepd->ev_head = eepd->ev_tail = NULL;
    pthread_mutex_unlock(&eepd->lock);
    for (; ev != NULL; ev = next) {
        next = ev->next;
        switch (ev->type) {
        case EEPD_EV_PUT:
        case EEPD_EV_DELETE:
            eepd_apply(eepd, ev->type, ev->key, ev->value, ev->value_len, ev->create_rev,
                       ev->mod_rev);
            break;
        case EEPD_EV_WATCH_LOST:
            eepd->watch_lost = 1;
            break;
        case EEPD_EV_LEASE_LOST:
            if (ev->revision == eepd->lease) {
                eepd->lease = 0;
                if (eepd->is_leader) {
                    eep_warn(EEP_SUBSYS_EEPD, "lost leadership with the lease");
                }
                eepd->is_leader = 0;
            }
            break;
        }
        free(ev->key);
        free(ev->value);
        free(ev);
    }
}

/* Helper thread: read everything under the prefix, then watch from the next revision. */
static void eepd_sync_run(eep_etcd_t *etcd, eepd_job_t *job)
{
    job->status = eep_etcd_range(etcd, job->keys[0], 1, &job->r1);
    if (job->status != EEP_OK) {
        return;
    }
    job->have_r1 = 1;
    job->status  = eep_etcd_watch_create(etcd, job->keys[0], 1, job->r1.revision + 1, eepd_on_watch,
                                         job->arg, &job->watch);
}

/* Loop: the mirror becomes the snapshot just read; the new watch's events (held meanwhile)
 * follow it. */
static void eepd_sync_done(eepd_t *eepd, eepd_job_t *job)
{
    eep_etcd_range_t *r = &job->r1;
    size_t            i;
    char              ckey[EEPD_KEY_MAX];
    int               have_current = 0;

    eepd->cron_busy    = 0;
    eepd->syncing      = 0;
    eepd->etcd_failing = job->status != EEP_OK && !job->have_r1;
    if (!job->have_r1) {
        eep_warn(EEP_SUBSYS_EEPD, "cannot read /eep/%s/ from etcd; retrying in 1 s", eepd->cfg.job);
        return;
    }
    eepd_members_clear(eepd);
    eepd_idset_clear(&eepd->cordoned);
    eepd_idset_clear(&eepd->drained);
    eepd_idset_clear(&eepd->faults);
    eepd->leader_id[0] = '\0';
    eepd_key(eepd, ckey, sizeof(ckey), "view/current");
    for (i = 0; i < r->count; i++) {
        char *key = strndup((const char *)r->kvs[i].key, r->kvs[i].key_len);

        if (key != NULL) {
            have_current |= strcmp(key, ckey) == 0;
            eepd_apply(eepd, EEPD_EV_PUT, key, r->kvs[i].value, r->kvs[i].value_len,
                       r->kvs[i].create_revision, r->kvs[i].mod_revision);
            free(key);
        }
    }
    if (!have_current) {
        eepd_adopt_view(eepd, NULL, 0, 0);
    }
    if (eepd->is_leader && strcmp(eepd->leader_id, eepd->replica_id) != 0) {
        eep_warn(EEP_SUBSYS_EEPD, "the leader key is gone or not ours: stepping down");
        eepd->is_leader = 0;
    }
    if (job->status == EEP_OK) {
        eepd->watch      = job->watch;
        job->watch       = NULL;
        eepd->watch_lost = 0;
    }
    eepd_drain_events(eepd);
}

void eepd_sync(eepd_t *eepd)
{
    eepd_job_t *job = eepd_job_new(eepd_sync_run, eepd_sync_done);

    if (job == NULL) {
        return;
    }
    if (eepd->watch != NULL) {
        eep_etcd_watch_cancel(eepd->watch);
        eepd->watch = NULL;
    }
    eepd_drain_events(eepd);
    snprintf(job->keys[0], sizeof(job->keys[0]), "%s", eepd->prefix);
    job->arg        = eepd;
    eepd->cron_busy = 1;
    eepd->syncing   = 1;
    eepd->etcd_round_trips++;
    eepd_jobs_submit(eepd, job);
}

int eepd_etcd_ok(eepd_t *eepd)
{
    int64_t deadline;

    if (eepd->etcd == NULL || eepd->watch == NULL || eepd->watch_lost || eepd->etcd_failing) {
        return 0;
    }
    /* A leader makes no etcd call in the steady state: its keepalive tells whether etcd
     * answers (one goes out every TTL/3). */
    if (eepd->lease != 0 && eep_etcd_lease_deadline(eepd->etcd, eepd->lease, &deadline) == EEP_OK &&
        deadline - eepd_now_ms() < eepd->cfg.lease_ttl_s * 1000 / 3) {
        return 0;
    }
    return 1;
}
