/*
 * eepd_mirror.c - eepd's mirror of /eep/<job>/: each key change applied to the loop's state.
 *
 * A watch event or a key of the startup read lands in eepd_apply: members (bounded where they
 * enter), cordon/drain/fault sets, the leader key and view/current become the member table, the
 * id sets and the adopted view that the cron publishes from.  Nothing here calls etcd.
 * view/current's revision is remembered whatever it holds, for the next publish to compare, so
 * garbage or a deletion there never blocks publishing, and no epoch once seen is reused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/eepd/eepd.h"
#include "util/log.h"

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

int eepd_idset_del(eepd_idset_t *set, const char *id)
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

void eepd_idset_clear(eepd_idset_t *set)
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

void eepd_member_remove(eepd_t *eepd, const char *id)
{
    eepd_member_t *m = eepd_member_find(eepd, id);

    if (m == NULL) {
        return;
    }
    free(m->id);
    eep__v1__member__free_unpacked(m->member, NULL);
    *m = eepd->members[--eepd->n_members];
}

void eepd_members_clear(eepd_t *eepd)
{
    while (eepd->n_members > 0) {
        eepd_member_remove(eepd, eepd->members[0].id);
    }
}

int eepd_in_view(const eepd_t *eepd, const char *id)
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

void eepd_note_change(eepd_t *eepd, const char *reason, int urgent)
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
void eepd_adopt_view(eepd_t *eepd, const uint8_t *value, size_t len, int64_t mod_rev)
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
void eepd_apply(eepd_t *eepd, int type, const char *key, const uint8_t *value, size_t len,
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
