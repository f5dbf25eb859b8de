/*
 * eepd.c - the eepd controller: one loop thread, etcd as the source of truth, views by Txn.
 *
 * Redis's shape (STYLE.md habit 13): the loop waits in gRPC's completion queue for at most
 * 1/hz s, then drains the queue of etcd events (filled by the etcd client's thread, copied under
 * a lock) and runs the cron (election, settle window, metrics).  Every replica mirrors all of
 * /eep/<job>/ through one prefix watch, so a follower that wins the election already knows the
 * members and the current view.  The leader publishes view N with one Txn whose compares are:
 * views/<N> absent, the leader key still ours (value and create revision), and view/current
 * unchanged since we read it; so two replicas that both think they lead cannot both publish, and
 * an epoch is never written twice.  One round trip per view change in the steady state.
 */
#include "control/eepd/eepd.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"

int64_t eepd_now_ms(void)
{
    return (int64_t)eep_clock_ms();
}

void eepd_key(const eepd_t *eepd, char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    int     n = snprintf(buf, len, "%s", eepd->prefix);

    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < len) {
        vsnprintf(buf + n, len - (size_t)n, fmt, ap);
    }
    va_end(ap);
}

/* ---- id sets and the member table ------------------------------------------------------- */

int eepd_idset_has(const eepd_idset_t *set, const char *id)
{
    size_t i;

    for (i = 0; i < set->count; i++) {
        if (strcmp(set->ids[i], id) == 0) {
            return 1;
        }
    }
    return 0;
}

static int eepd_idset_add(eepd_idset_t *set, const char *id)
{
    if (eepd_idset_has(set, id)) {
        return 0;
    }
    if (set->count == set->cap) {
        size_t cap = set->cap ? 2 * set->cap : 8;
        char **ids = realloc(set->ids, cap * sizeof(*ids));

        if (ids == NULL) {
            return 0;
        }
        set->ids = ids;
        set->cap = cap;
    }
    set->ids[set->count] = strdup(id);
    if (set->ids[set->count] == NULL) {
        return 0;
    }
    set->count++;
    return 1;
}

static int eepd_idset_del(eepd_idset_t *set, const char *id)
{
    size_t i;

    for (i = 0; i < set->count; i++) {
        if (strcmp(set->ids[i], id) == 0) {
            free(set->ids[i]);
            set->ids[i] = set->ids[--set->count];
            return 1;
        }
    }
    return 0;
}

static void eepd_idset_clear(eepd_idset_t *set)
{
    while (set->count > 0) {
        free(set->ids[--set->count]);
    }
    free(set->ids);
    set->ids = NULL;
    set->cap = 0;
}

eepd_member_t *eepd_member_find(eepd_t *eepd, const char *id)
{
    size_t i;

    for (i = 0; i < eepd->n_members; i++) {
        if (strcmp(eepd->members[i].id, id) == 0) {
            return &eepd->members[i];
        }
    }
    return NULL;
}

static void eepd_member_remove(eepd_t *eepd, const char *id)
{
    eepd_member_t *m = eepd_member_find(eepd, id);

    if (m == NULL) {
        return;
    }
    free(m->id);
    eep__v1__member__free_unpacked(m->member, NULL);
    *m = eepd->members[--eepd->n_members];
}

static void eepd_members_clear(eepd_t *eepd)
{
    while (eepd->n_members > 0) {
        eepd_member_remove(eepd, eepd->members[0].id);
    }
}

static int eepd_in_view(const eepd_t *eepd, const char *id)
{
    size_t i;

    for (i = 0; eepd->view != NULL && i < eepd->view->n_members; i++) {
        if (strcmp(eepd->view->members[i]->id, id) == 0) {
            return 1;
        }
    }
    return 0;
}

/* ---- changes -------------------------------------------------------------------------- */

static void eepd_note_change(eepd_t *eepd, const char *reason, int urgent)
{
    if (eepd->publishing) {
        /* Seen while a publish is in flight: it still needs a look after that one lands. */
        if (!eepd->late_changes) {
            snprintf(eepd->late_reason, sizeof(eepd->late_reason), "%s", reason);
        }
        eepd->late_changes = 1;
        eepd->late_urgent |= urgent;
    }
    if (eepd->settle.pending_since_ms < 0) {
        snprintf(eepd->reason, sizeof(eepd->reason), "%s", reason);
    }
    eepd_settle_note(&eepd->settle, eepd_now_ms());
    eepd->urgent |= urgent;
}

static uint64_t eepd_max_jump(const eepd_t *eepd)
{
    return eepd->cfg.max_epoch_jump > 0 ? (uint64_t)eepd->cfg.max_epoch_jump : 1000000;
}

/* Mark view/current as needing a fresh view from the leader (absent, corrupt, foreign, old). */
static void eepd_current_bad(eepd_t *eepd, const char *why)
{
    if (!eepd->current_bad) {
        eep_warn(EEP_SUBSYS_EEPD, "view/current %s%s", why,
                 eepd->is_leader ? ": the leader publishes a new view over it" : "");
    }
    eepd->current_bad = 1;
    if (eepd->is_leader) {
        eepd_note_change(eepd, "repair", 1);
    }
}

/*
 * view/current was seen (watch, startup read, re-read) at @p mod_rev, or is absent (@p value
 * NULL, mod_rev 0).  Whatever it holds, its revision is what the next publish compares, so
 * garbage or a deletion never blocks publishing; a value that does not decode, or whose epoch is
 * implausible (0, above 2^53, or a jump past max_epoch_jump), is counted and ignored, and a
 * plausible epoch raises max_epoch even when the view is not adopted, so no epoch is reused.
 */
static void eepd_adopt_view(eepd_t *eepd, const uint8_t *value, size_t len, int64_t mod_rev)
{
    Eep__V1__View *v;

    eepd->view_mod_rev = mod_rev;
    if (value == NULL) {
        eepd_current_bad(eepd, "is absent");
        return;
    }
    v = eep__v1__view__unpack(NULL, len, value);
    if (v == NULL) {
        eepd->corrupt_views++;
        eep_error(EEP_SUBSYS_EEPD, "view/current does not decode (%zu bytes); ignored", len);
        eepd_current_bad(eepd, "is corrupt");
        return;
    }
    if (!eepd_epoch_plausible(eepd->max_epoch, v->epoch, eepd_max_jump(eepd))) {
        eepd->corrupt_views++;
        eep_error(EEP_SUBSYS_EEPD,
                  "view/current holds epoch %llu, implausible after %llu (at most +%llu, never "
                  "above 2^53); ignored as corrupt",
                  (unsigned long long)v->epoch, (unsigned long long)eepd->max_epoch,
                  (unsigned long long)eepd_max_jump(eepd));
        eep__v1__view__free_unpacked(v, NULL);
        eepd_current_bad(eepd, "holds an implausible epoch");
        return;
    }
    if (v->epoch > eepd->max_epoch) {
        eepd->max_epoch = v->epoch;
    }
    if (eepd->publishing && v->epoch == eepd->publishing_epoch && eepd->is_leader &&
        !eepd->adopting_own) {
        /* Our publish in flight, seen through the watch before its Txn reply: ours. */
        eepd->own_publish_rev = mod_rev;
        eepd->adopting_own    = 1;
        eepd_adopt_view(eepd, value, len, mod_rev);
        eepd->adopting_own = 0;
        eep__v1__view__free_unpacked(v, NULL);
        return;
    }
    if (eepd->view != NULL && eepd_epoch_check(eepd->view->epoch, v->epoch) != EEP_OK) {
        /* Our own publish arriving again through the watch is fine; an older or equal epoch
         * written by anyone else is not the current view. */
        if (!(v->epoch == eepd->view->epoch && mod_rev == eepd->view_adopted_rev)) {
            eepd_current_bad(eepd, "holds an old epoch");
        }
        eep__v1__view__free_unpacked(v, NULL);
        return;
    }
    if (eepd->is_leader && mod_rev != eepd->own_publish_rev && mod_rev > eepd->leader_create_rev) {
        /* Only the leader writes view/current: a newer view it did not write after it won is
         * foreign.  Its epoch is taken (never reused); the leader's membership goes over it. */
        eep__v1__view__free_unpacked(v, NULL);
        eepd_current_bad(eepd, "was written by someone else while this replica leads");
        return;
    }
    eepd->current_bad = 0;
    if (eepd->view != NULL) {
        eep__v1__view__free_unpacked(eepd->view, NULL);
    }
    eepd->view             = v;
    eepd->view_adopted_rev = mod_rev;
    eep_info(EEP_SUBSYS_EEPD, "view %llu: %zu ranks (%s, by %s)", (unsigned long long)v->epoch,
             v->n_members, v->reason, v->leader);
    eepd_api_broadcast(eepd);
    /* Members that changed while this view was in flight still need a look (our own publish
     * carries them over itself: eepd_publish_done). */
    if (eepd->is_leader && !eepd->adopting_own) {
        eepd_note_change(eepd, "reconcile", 0);
    }
}

/*
 * Why the Member value of a members/ key is over its bounds, or NULL (then *m_p is the decoded
 * member or NULL if it does not decode).
 */
static const char *eepd_member_oversized(const eepd_t *eepd, const uint8_t *value, size_t len,
                                         Eep__V1__Member **m_p)
{
    size_t max = eepd->cfg.max_member_bytes > 0 ? (size_t)eepd->cfg.max_member_bytes : 4096;
    Eep__V1__Member *m;
    size_t           i;

    *m_p = NULL;
    if (len > max) {
        return "value over EEP_EEPD_MAX_MEMBER_BYTES";
    }
    m    = eep__v1__member__unpack(NULL, len, value);
    *m_p = m;
    if (m == NULL) {
        return NULL;
    }
    if (strlen(m->id) > 200) {
        return "id over 200 bytes";
    }
    if (strlen(m->host) > 255) {
        return "host over 255 bytes";
    }
    if (strlen(m->gpu_uuid) > 128) {
        return "gpu uuid over 128 bytes";
    }
    if (strlen(m->endpoint) > 256) {
        return "endpoint over 256 bytes";
    }
    if (m->n_rdma_nics > 64) {
        return "more than 64 rdma nics";
    }
    for (i = 0; i < m->n_rdma_nics; i++) {
        if (strlen(m->rdma_nics[i]) > 64) {
            return "an rdma nic name over 64 bytes";
        }
    }
    return NULL;
}

/* A views/<epoch> key: its epoch counts toward max_epoch (never reuse one still in history). */
static void eepd_note_history_key(eepd_t *eepd, const char *digits)
{
    char              *end;
    unsigned long long e = strtoull(digits, &end, 10);

    if (*end != '\0' || end == digits) {
        return;
    }
    if (!eepd_epoch_plausible(eepd->max_epoch, e, eepd_max_jump(eepd))) {
        eepd->corrupt_views++;
        eep_error(EEP_SUBSYS_EEPD, "views/%s: implausible epoch after %llu; ignored", digits,
                  (unsigned long long)eepd->max_epoch);
        return;
    }
    if (e > eepd->max_epoch) {
        eepd->max_epoch = e;
    }
}

/* A fault report written under an older epoch by a member the current view no longer holds, or
   one already evicted (the view that drops it may not be out yet): a zombie (stopped,
   partitioned or fenced, then woken) that saw its peers leave it, not fail.  Never evict on it.
   A live member of the current view racing a newer view is still heard. */
static int eepd_fault_stale(eepd_t *eepd, const uint8_t *value, size_t len)
{
    Eep__V1__Fault *f = eep__v1__fault__unpack(NULL, len, value);
    int             stale;

    if (f == NULL) {
        return 0; /* not ours to judge: handled as before */
    }
    stale = f->epoch > 0 && eepd->view != NULL && f->epoch < eepd->view->epoch &&
            f->reporter != NULL && f->reporter[0] != '\0' &&
            (!eepd_in_view(eepd, f->reporter) || eepd_member_find(eepd, f->reporter) == NULL);
    eep__v1__fault__free_unpacked(f, NULL);
    return stale;
}

/* One key under our prefix changed (or was read at startup). */
static void eepd_apply(eepd_t *eepd, int type, const char *key, const uint8_t *value, size_t len,
                       int64_t create_rev, int64_t mod_rev)
{
    const char *rel = key + strlen(eepd->prefix);
    const char *id;

    if (strncmp(key, eepd->prefix, strlen(eepd->prefix)) != 0) {
        return;
    }
    if (strncmp(rel, "members/", 8) == 0) {
        id = rel + 8;
        if (type == EEPD_EV_DELETE) {
            if (eepd_member_find(eepd, id) != NULL) {
                eep_info(EEP_SUBSYS_EEPD, "member %s gone", id);
                eepd_member_remove(eepd, id);
                if (eepd_in_view(eepd, id)) {
                    eepd_note_change(eepd, "lost", 0);
                }
            }
            return;
        } else {
            Eep__V1__Member *m;
            eepd_member_t   *old;
            const char      *why;

            why = eepd_member_oversized(eepd, value, len, &m);
            if (why != NULL) {
                /* Bounded here, where it enters: one huge field once blocked every publish
                 * (the view is written twice in one Txn, past etcd's request limit). */
                eepd->members_rejected++;
                eep_error(EEP_SUBSYS_EEPD, "member %s: %s (%zu bytes); ignored", id, why, len);
                if (m != NULL) {
                    eep__v1__member__free_unpacked(m, NULL);
                }
                if (eepd_member_find(eepd, id) != NULL) {
                    eepd_member_remove(eepd, id);
                    eepd_note_change(eepd, "lost", 0);
                }
                return;
            }
            if (m == NULL || strcmp(m->id, id) != 0) {
                eep_warn(EEP_SUBSYS_EEPD, "member key %s holds no valid Member; ignored", key);
                if (m != NULL) {
                    eep__v1__member__free_unpacked(m, NULL);
                }
                return;
            }
            m->join_revision = create_rev;
            old              = eepd_member_find(eepd, id);
            if (old != NULL) {
                eep__v1__member__free_unpacked(old->member, NULL);
                old->member = m;
            } else {
                if (eepd->n_members == eepd->cap_members) {
                    size_t         cap = eepd->cap_members ? 2 * eepd->cap_members : 16;
                    eepd_member_t *nm  = realloc(eepd->members, cap * sizeof(*nm));

                    if (nm == NULL) {
                        eep__v1__member__free_unpacked(m, NULL);
                        return;
                    }
                    eepd->members     = nm;
                    eepd->cap_members = cap;
                }
                old             = &eepd->members[eepd->n_members];
                old->id         = strdup(id);
                old->member     = m;
                old->create_rev = create_rev;
                if (old->id == NULL) {
                    eep__v1__member__free_unpacked(m, NULL);
                    return;
                }
                eepd->n_members++;
                eep_info(EEP_SUBSYS_EEPD, "member %s joined (host %s, pid %d)", id, m->host,
                         m->pid);
            }
            if (m->leaving) {
                eepd_note_change(eepd, "leave", 1);
            } else if (!eepd_in_view(eepd, id)) {
                eepd_note_change(eepd, "join", 0);
            }
        }
    } else if (strncmp(rel, "cordon/", 7) == 0) {
        if (type == EEPD_EV_PUT) {
            eepd_idset_add(&eepd->cordoned, rel + 7);
        } else if (eepd_idset_del(&eepd->cordoned, rel + 7)) {
            eepd_note_change(eepd, "uncordon", 0);
        }
    } else if (strncmp(rel, "drain/", 6) == 0) {
        if (type == EEPD_EV_PUT) {
            if (eepd_idset_add(&eepd->drained, rel + 6)) {
                eepd_note_change(eepd, "drain", 1);
            }
        } else if (eepd_idset_del(&eepd->drained, rel + 6)) {
            eepd_note_change(eepd, "uncordon", 0);
        }
    } else if (strncmp(rel, "faults/", 7) == 0) {
        if (type == EEPD_EV_PUT && eepd_fault_stale(eepd, value, len)) {
            eep_warn(EEP_SUBSYS_EEPD,
                     "fault report about %s ignored: its reporter is not in the current view "
                     "and wrote it under an older epoch (a zombie)",
                     rel + 7);
        } else if (type == EEPD_EV_PUT) {
            eepd_idset_add(&eepd->faults, rel + 7);
        } else {
            eepd_idset_del(&eepd->faults, rel + 7);
        }
    } else if (strcmp(rel, "view/current") == 0) {
        if (type == EEPD_EV_PUT) {
            eepd_adopt_view(eepd, value, len, mod_rev);
        } else {
            eepd_adopt_view(eepd, NULL, 0, 0);
        }
    } else if (strncmp(rel, "views/", 6) == 0) {
        if (type == EEPD_EV_PUT) {
            eepd_note_history_key(eepd, rel + 6);
        }
    } else if (strcmp(rel, "leader") == 0) {
        /* An event older than what we already know of the leader key is stale: the delete of
         * an OLD leader key (an expired lease) can reach us after we won again under a new
         * one, and must not make us step down (issue 25 #1).  DELETE events carry the delete's
         * revision in mod_rev. */
        if (mod_rev != 0 && mod_rev < eepd->leader_seen_rev) {
            eep_info(EEP_SUBSYS_EEPD,
                     "stale %s of the leader key (revision %lld < %lld); "
                     "ignored",
                     type == EEPD_EV_DELETE ? "delete" : "put", (long long)mod_rev,
                     (long long)eepd->leader_seen_rev);
            return;
        }
        if (mod_rev > eepd->leader_seen_rev) {
            eepd->leader_seen_rev = mod_rev;
        }
        if (type == EEPD_EV_DELETE) {
            if (eepd->is_leader) {
                eep_warn(EEP_SUBSYS_EEPD, "leader key deleted: stepping down");
            }
            eepd->is_leader    = 0;
            eepd->leader_id[0] = '\0';
        } else {
            snprintf(eepd->leader_id, sizeof(eepd->leader_id), "%.*s", (int)len,
                     (const char *)value);
            if (eepd->is_leader && (create_rev != eepd->leader_create_rev ||
                                    strcmp(eepd->leader_id, eepd->replica_id) != 0)) {
                eep_warn(EEP_SUBSYS_EEPD, "leader key now %s: stepping down", eepd->leader_id);
                eepd->is_leader = 0;
            }
        }
    }
}

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

static void eepd_on_lease_lost(int64_t lease, eep_status_t status, void *arg)
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

static void eepd_drain_events(eepd_t *eepd)
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

static void eepd_sync(eepd_t *eepd)
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

static void eepd_campaign(eepd_t *eepd)
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
static void eepd_refresh_apply(eepd_t *eepd, eepd_job_t *job)
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
static eep_status_t eepd_publish(eepd_t *eepd, int force)
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
static void eepd_handle_faults(eepd_t *eepd)
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

static void eepd_cron(eepd_t *eepd, int64_t now)
{
    eep_status_t status;

    /* Every etcd call below is a job for the helper thread, one at a time: the loop itself
     * never waits for etcd. */
    if (eepd->etcd == NULL || eepd->cron_busy) {
        return;
    }
    if (eepd->watch == NULL || eepd->watch_lost) {
        if (now >= eepd->next_sync_ms) {
            eepd->next_sync_ms = now + 1000; /* a failed read is retried once a second */
            eepd_sync(eepd);
        }
        return;
    }
    /* Campaign at once when the leader key is gone, and now and then anyway (a missed event). */
    if (!eepd->is_leader && now >= eepd->no_campaign_until_ms &&
        (eepd->leader_id[0] == '\0' || now - eepd->last_campaign_ms >= 2000)) {
        eepd->last_campaign_ms = now;
        eepd_campaign(eepd);
        return;
    }
    if (eepd->inject_stale_publish && !eepd->is_leader) {
        /* Fault injection: publish as if we led, with whatever leader revision we last knew.
         * The Txn's compares on the leader key must refuse it. */
        char saved[sizeof(eepd->reason)];

        snprintf(saved, sizeof(saved), "%s", eepd->reason);
        eepd->inject_stale_publish     = 0;
        eepd->inject_stale_publish_now = 1;
        snprintf(eepd->reason, sizeof(eepd->reason), "injected");
        eepd_publish(eepd, 1);
        eepd->inject_stale_publish_now = 0;
        snprintf(eepd->reason, sizeof(eepd->reason), "%s", saved);
        return;
    }
    if (!eepd->is_leader) {
        return;
    }
    if (eepd->faults.count > 0) {
        eepd_handle_faults(eepd);
        return;
    }
    if (eepd->settle.pending_since_ms >= 0 &&
        (eepd->urgent || eepd_settle_ready(&eepd->settle, now, eepd->cfg.settle_ms))) {
        /* A corrupt, deleted or foreign view/current is overwritten even if membership is
         * unchanged. */
        if (eepd->current_bad && eepd->reason[0] == '\0') {
            snprintf(eepd->reason, sizeof(eepd->reason), "repair");
        }
        status = eepd_publish(eepd, eepd->current_bad);
        if (status == EEP_OK) { /* nothing to publish */
            eepd_settle_reset(&eepd->settle);
            eepd->urgent    = 0;
            eepd->reason[0] = '\0';
        }
    }
}

eep_status_t eepd_run(eepd_t *eepd)
{
    int64_t period = 1000 / eepd->cfg.hz, next_cron = 0, next_metrics = 0, now, wait;

    if (period < 1) {
        period = 1;
    }
    while (!eepd->stop) {
        now = eepd_now_ms();
        if (now >= next_cron) {
            eepd_jobs_drain(eepd);
            eepd_drain_events(eepd);
            eepd_cron(eepd, now);
            next_cron = now + period;
            if (now >= next_metrics) {
                eepd_metrics_update(eepd);
                next_metrics = now + 250;
            }
        }
        now = eepd_now_ms();
        /* A job in flight is picked up within 2 ms, not at the next cron. */
        wait = next_cron > now ? next_cron - now : 0;
        if (eepd->jobs_in_flight > 0 && wait > 2) {
            wait = 2;
        }
        eep_rpc_server_poll(eepd->rpc, (int)wait);
        eepd_jobs_drain(eepd);
        eepd_drain_events(eepd);
    }
    return EEP_OK;
}

eep_status_t eepd_create(const eepd_config_t *cfg, int with_etcd, eepd_t **eepd_p)
{
    eepd_t                 *eepd;
    eep_rpc_server_params_t rp;
    char                    host[128];
    eep_status_t            status;
    int                     port = 0;

    if (cfg == NULL || eepd_p == NULL || strchr(cfg->job, '/') != NULL) {
        eep_error(EEP_SUBSYS_EEPD, "eepd_create: cfg, eepd_p and a job name without '/' needed");
        return EEP_ERR_INVALID_ARG;
    }
    eepd = calloc(1, sizeof(*eepd));
    if (eepd == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    eepd->cfg = *cfg;
    if (eepd->cfg.job[0] == '\0') { /* EEP_JOB: the etcd client's knob, which agents read too */
        status = eep_etcd_job_name(eepd->cfg.job, sizeof(eepd->cfg.job));
        if (status != EEP_OK) {
            free(eepd);
            return status;
        }
    }
    pthread_mutex_init(&eepd->lock, NULL);
    pthread_mutex_init(&eepd->metrics_lock, NULL);
    eepd_settle_reset(&eepd->settle);
    snprintf(eepd->prefix, sizeof(eepd->prefix), "/eep/%.200s/", eepd->cfg.job);
    if (gethostname(host, sizeof(host)) != 0) {
        snprintf(host, sizeof(host), "unknown");
    }
    host[sizeof(host) - 1] = '\0';
    if (!with_etcd) {
        snprintf(eepd->replica_id, sizeof(eepd->replica_id), "%.200s",
                 cfg->id[0] ? cfg->id : "local");
        *eepd_p = eepd;
        return EEP_OK;
    }
    /* NULL params: every setting from the EEP_ETCD_* knobs (endpoints, timeouts, TLS files). */
    status = eep_etcd_create(NULL, &eepd->etcd);
    if (status != EEP_OK) {
        goto err_free;
    }
    memset(&rp, 0, sizeof(rp));
    rp.size        = sizeof(rp);
    rp.listen      = cfg->listen;
    rp.tls_cert    = cfg->tls_cert;
    rp.tls_key     = cfg->tls_key;
    rp.tls_ca      = cfg->tls_ca;
    rp.max_message = (size_t)cfg->max_message;
    status         = eep_rpc_server_create(&rp, &eepd->rpc);
    if (status != EEP_OK) {
        goto err_etcd;
    }
    status = eepd_api_register(eepd);
    if (status != EEP_OK) {
        goto err_rpc;
    }
    status = eep_rpc_server_start(eepd->rpc, &port);
    if (status != EEP_OK) {
        goto err_rpc;
    }
    if (cfg->id[0] != '\0') {
        snprintf(eepd->replica_id, sizeof(eepd->replica_id), "%.200s", cfg->id);
    } else {
        snprintf(eepd->replica_id, sizeof(eepd->replica_id), "%s:%d:%d", host, (int)getpid(), port);
    }
    status = eepd_jobs_start(eepd);
    if (status != EEP_OK) {
        goto err_rpc;
    }
    status = eepd_metrics_start(eepd);
    if (status != EEP_OK) {
        eepd_jobs_stop(eepd);
        goto err_rpc;
    }
    eep_info(EEP_SUBSYS_EEPD, "replica %s: job %s, grpc port %d%s", eepd->replica_id, eepd->cfg.job,
             port, cfg->fault_injection ? ", fault injection ON" : "");
    *eepd_p = eepd;
    return EEP_OK;

err_rpc:
    eep_rpc_server_destroy(eepd->rpc);
err_etcd:
    eep_etcd_destroy(eepd->etcd);
err_free:
    pthread_mutex_destroy(&eepd->metrics_lock);
    pthread_mutex_destroy(&eepd->lock);
    free(eepd);
    return status;
}

void eepd_destroy(eepd_t *eepd)
{
    if (eepd == NULL) {
        return;
    }
    eepd_metrics_stop(eepd);
    /* The helper first: its last job may answer a call or hand over a lease or a watch. */
    eepd_jobs_stop(eepd);
    eepd_api_drop_watchers(eepd);
    eep_rpc_server_destroy(eepd->rpc);
    if (eepd->watch != NULL) {
        eep_etcd_watch_cancel(eepd->watch);
    }
    if (eepd->etcd != NULL && eepd->lease != 0) {
        /* Resign at once rather than make the others wait for the TTL. */
        eep_etcd_lease_revoke(eepd->etcd, eepd->lease);
    }
    eep_etcd_destroy(eepd->etcd);
    eepd_drain_events(eepd);
    eepd_members_clear(eepd);
    free(eepd->members);
    eepd_idset_clear(&eepd->cordoned);
    eepd_idset_clear(&eepd->drained);
    eepd_idset_clear(&eepd->faults);
    if (eepd->view != NULL) {
        eep__v1__view__free_unpacked(eepd->view, NULL);
    }
    free(eepd->watchers);
    free(eepd->metrics_text);
    pthread_mutex_destroy(&eepd->metrics_lock);
    pthread_mutex_destroy(&eepd->lock);
    free(eepd);
}
