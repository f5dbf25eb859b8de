/*
 * agent_view.c - the agent's view feed: view/current watched, checked, handed out by poll/wait.
 *
 * The watch callback keeps only the newest view's bytes (an epoch in [1, 2^53], at most
 * max_epoch_jump past the newest known, as eepd holds); poll decodes them for the runtime, and
 * only when the epoch is newer than the last handed out and the lease still backs the view.  A
 * lost lease is reported first (EEP_ERR_LEASE_LOST, once), which lets the agent thread rejoin.
 */
#include "control/agent/agent_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "control/etcd/etcd.h"
#include "util/clock.h"
#include "util/log.h"
#include "proto/eep.pb-c.h"

#define EEP_AGENT_EPOCH_MAX (1ull << 53) /* eepd's EEPD_EPOCH_MAX */

/* Keep the newest view's bytes; decoding for the runtime happens in poll. */
static int eep_agent_offer_view(eep_agent_t *agent, const uint8_t *value, size_t len)
{
    Eep__V1__View *v = eep__v1__view__unpack(NULL, len, value);
    uint8_t       *copy;
    uint64_t       known;
    int            newer = 0;

    if (v == NULL) {
        eep_warn(EEP_SUBSYS_AGENT, "view/current does not decode (%zu bytes); ignored", len);
        return 0;
    }
    pthread_mutex_lock(&agent->lock);
    known = agent->latest_epoch;
    pthread_mutex_unlock(&agent->lock);
    /* A forged 2^64-1 once wedged every rank (nothing could follow it): epochs live in
     * [1, 2^53] and move by at most max_epoch_jump (eepd holds the same rule). */
    if (v->epoch == 0 || v->epoch > EEP_AGENT_EPOCH_MAX ||
        (known > 0 && v->epoch > known && v->epoch - known > (uint64_t)agent->cfg.max_epoch_jump)) {
        eep_error(EEP_SUBSYS_AGENT,
                  "view/current holds epoch %llu, implausible after %llu; ignored as corrupt",
                  (unsigned long long)v->epoch, (unsigned long long)known);
        eep__v1__view__free_unpacked(v, NULL);
        return 0;
    }
    copy = malloc(len ? len : 1);
    if (copy != NULL) {
        memcpy(copy, value, len);
        pthread_mutex_lock(&agent->lock);
        if (v->epoch > agent->latest_epoch) {
            free(agent->latest);
            agent->latest       = copy;
            agent->latest_len   = len;
            agent->latest_epoch = v->epoch;
            copy                = NULL;
            newer               = 1;
            pthread_cond_broadcast(&agent->cond);
        }
        pthread_mutex_unlock(&agent->lock);
        free(copy);
    }
    eep__v1__view__free_unpacked(v, NULL);
    return newer;
}

static void eep_agent_on_view(const eep_etcd_event_t *events, size_t count, int64_t revision,
                              eep_status_t status, void *arg)
{
    eep_agent_t *agent = arg;
    size_t       i;
    int          newer = 0;

    (void)revision;
    if (events == NULL) {
        eep_warn(EEP_SUBSYS_AGENT, "view watch ended (%s); resyncing", eep_status_string(status));
        pthread_mutex_lock(&agent->lock);
        agent->view_watch_lost = 1;
        pthread_cond_broadcast(&agent->cond);
        pthread_mutex_unlock(&agent->lock);
        return;
    }
    for (i = 0; i < count; i++) {
        if (events[i].type == EEP_ETCD_EVENT_PUT) {
            newer |= eep_agent_offer_view(agent, events[i].kv.value, events[i].kv.value_len);
        }
    }
    if (newer) {
        eep_agent_notify(agent);
    }
}

/*
 * @return 1 when @p kv (view/current as read) is a view eepd published: eepd writes views/<N> and
 * view/current in one Txn, so both have the same mod revision.  A fresh agent has no epoch to
 * judge a jump by, and a forged view/current (epoch 10^9, say) would otherwise hide every real
 * view after it; such a value is skipped and the next publish (eepd repairs it) comes by watch.
 */
static int eep_agent_view_published(eep_agent_t *agent, const eep_etcd_kv_t *kv)
{
    Eep__V1__View   *v = eep__v1__view__unpack(NULL, kv->value_len, kv->value);
    char             key[EEP_AGENT_KEY_MAX];
    eep_etcd_range_t r;
    int              ok = 0;

    if (v == NULL) {
        return 1; /* eep_agent_offer_view reports it */
    }
    snprintf(key, sizeof(key), "%sviews/%020llu", agent->prefix, (unsigned long long)v->epoch);
    if (eep_etcd_range(agent->etcd, key, 0, &r) == EEP_OK) {
        ok = r.count == 1 && r.kvs[0].mod_revision == kv->mod_revision;
        eep_etcd_range_free(&r);
    }
    if (!ok) {
        eep_warn(EEP_SUBSYS_AGENT,
                 "view/current (epoch %llu) is not the view published as views/%llu; waiting "
                 "for the next view",
                 (unsigned long long)v->epoch, (unsigned long long)v->epoch);
    }
    eep__v1__view__free_unpacked(v, NULL);
    return ok;
}

eep_status_t eep_agent_follow_views(eep_agent_t *agent)
{
    char             key[EEP_AGENT_KEY_MAX];
    eep_etcd_range_t r;
    eep_status_t     status;

    snprintf(key, sizeof(key), "%sview/current", agent->prefix);
    status = eep_etcd_range(agent->etcd, key, 0, &r);
    if (status != EEP_OK) {
        return status;
    }
    if (r.count == 1 && eep_agent_view_published(agent, &r.kvs[0])) {
        eep_agent_offer_view(agent, r.kvs[0].value, r.kvs[0].value_len);
    }
    status = eep_etcd_watch_create(agent->etcd, key, 0, r.revision + 1, eep_agent_on_view, agent,
                                   &agent->view_watch);
    eep_etcd_range_free(&r);
    return status;
}

static char *eep_agent_dup(const char *s)
{
    return strdup(s != NULL ? s : "");
}

void eep_agent_view_free(eep_agent_view_t *view)
{
    uint32_t i;

    if (view == NULL) {
        return;
    }
    for (i = 0; view->members != NULL && i < view->n_ranks; i++) {
        free(view->members[i].id);
        free(view->members[i].host);
        free(view->members[i].gpu_uuid);
    }
    free(view->members);
    free(view->expert_ranks);
    free(view);
}

static eep_status_t eep_agent_view_make(const uint8_t *bytes, size_t len, const char *my_id,
                                        eep_agent_view_t **view_p)
{
    Eep__V1__View    *v = eep__v1__view__unpack(NULL, len, bytes);
    eep_agent_view_t *out;
    uint32_t          i, c;

    if (v == NULL) {
        return EEP_ERR_INTERNAL;
    }
    out = calloc(1, sizeof(*out));
    if (out == NULL) {
        goto err_nomem;
    }
    out->epoch   = v->epoch;
    out->my_rank = -1;
    out->n_ranks = (uint32_t)v->n_members;
    out->root    = v->root;
    snprintf(out->reason, sizeof(out->reason), "%s", v->reason);
    out->members = calloc(v->n_members + 1, sizeof(*out->members));
    if (out->members == NULL) {
        goto err_nomem;
    }
    for (i = 0; i < out->n_ranks; i++) {
        out->members[i].id       = eep_agent_dup(v->members[i]->id);
        out->members[i].host     = eep_agent_dup(v->members[i]->host);
        out->members[i].gpu_uuid = eep_agent_dup(v->members[i]->gpu_uuid);
        out->members[i].pid      = v->members[i]->pid;
        if (my_id[0] != '\0' && strcmp(v->members[i]->id, my_id) == 0) {
            out->my_rank = (int)i;
        }
    }
    out->num_experts = (uint32_t)v->n_placement;
    out->copies      = v->n_placement > 0 ? (uint32_t)v->placement[0]->n_ranks : 0;
    if (out->num_experts > 0 && out->copies > 0) {
        out->expert_ranks = calloc((size_t)out->num_experts * out->copies, sizeof(uint32_t));
        if (out->expert_ranks == NULL) {
            goto err_nomem;
        }
        for (i = 0; i < out->num_experts; i++) {
            for (c = 0; c < out->copies && c < v->placement[i]->n_ranks; c++) {
                out->expert_ranks[(size_t)i * out->copies + c] = v->placement[i]->ranks[c];
            }
        }
    }
    eep__v1__view__free_unpacked(v, NULL);
    *view_p = out;
    return EEP_OK;

err_nomem:
    eep_agent_view_free(out);
    eep__v1__view__free_unpacked(v, NULL);
    return EEP_ERR_NO_MEMORY;
}

/* Under agent->lock: EEP_ERR_LEASE_LOST once for a pending loss, EEP_INPROGRESS while no view
   newer than the last handed out waits, else EEP_OK. */
static eep_status_t eep_agent_news_locked(eep_agent_t *agent)
{
    if (agent->lost_pending) {
        agent->lost_pending = 0;
        pthread_cond_broadcast(&agent->cond); /* the agent thread may rejoin now */
        return EEP_ERR_LEASE_LOST;
    }
    if (agent->latest_epoch <= agent->handed_epoch || agent->latest == NULL) {
        return EEP_INPROGRESS;
    }
    return EEP_OK;
}

/* eep_agent_poll; @p held_p says a newer view waits for the lease to be confirmed. */
static eep_status_t eep_agent_poll_held(eep_agent_t *agent, eep_agent_view_t **view_p, int *held_p)
{
    uint8_t     *bytes = NULL;
    size_t       len   = 0;
    char         my_id[256];
    eep_status_t status;
    int64_t      lease, deadline = 0;

    if (agent == NULL || view_p == NULL) {
        return EEP_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&agent->lock);
    if ((status = eep_agent_news_locked(agent)) != EEP_OK) {
        pthread_mutex_unlock(&agent->lock);
        return status;
    }
    lease = agent->registered ? agent->lease : 0;
    pthread_mutex_unlock(&agent->lock);
    /* Never hand out a view the lease no longer backs (issue 25 #4): after a pause (SIGSTOP, a
     * stalled host) past the TTL, a view that still gives us a rank may be in the queue while
     * the lease is already gone.  Hold it until a keepalive answer renews the lease, or the
     * loss is reported (EEP_ERR_LEASE_LOST first, then views for the new member).  A lease
     * whose keepalive has ended (EEP_ERR_NOT_FOUND) backs nothing either: etcd's client ends it
     * when it finds the lease lost and only then calls our lost callback, so for a moment the
     * lease is gone while lost_pending is not yet set (CI, 2026-12-05: agent_pause_view got a
     * view with a rank after SIGCONT, before lease_lost).  It also covers the few ms of
     * eep_agent_register between the put and the keepalive's start. */
    if (lease != 0 && (eep_etcd_lease_deadline(agent->etcd, lease, &deadline) != EEP_OK ||
                       (int64_t)eep_clock_ms() >= deadline)) {
        eep_debug(EEP_SUBSYS_AGENT,
                  "lease %llx unconfirmed (past its ttl or its keepalive "
                  "ended): view held back",
                  (unsigned long long)lease);
        *held_p = 1;
        return EEP_INPROGRESS;
    }
    pthread_mutex_lock(&agent->lock);
    if ((status = eep_agent_news_locked(agent)) != EEP_OK) {
        pthread_mutex_unlock(&agent->lock);
        return status;
    }
    bytes = malloc(agent->latest_len ? agent->latest_len : 1);
    if (bytes == NULL) {
        pthread_mutex_unlock(&agent->lock);
        return EEP_ERR_NO_MEMORY;
    }
    memcpy(bytes, agent->latest, agent->latest_len);
    len = agent->latest_len;
    /* Never again an epoch at or below this one. */
    agent->handed_epoch = agent->latest_epoch;
    snprintf(my_id, sizeof(my_id), "%s", agent->registered ? agent->member_id : "");
    pthread_mutex_unlock(&agent->lock);
    status = eep_agent_view_make(bytes, len, my_id, view_p);
    free(bytes);
    return status;
}

eep_status_t eep_agent_poll(eep_agent_t *agent, eep_agent_view_t **view_p)
{
    int held = 0;

    return eep_agent_poll_held(agent, view_p, &held);
}

eep_status_t eep_agent_wait(eep_agent_t *agent, int timeout_ms, eep_agent_view_t **view_p)
{
    int64_t      deadline = eep_agent_now_ms() + timeout_ms;
    eep_status_t status;

    if (agent == NULL || view_p == NULL) {
        return EEP_ERR_INVALID_ARG;
    }
    for (;;) {
        struct timespec ts;
        int             held = 0;

        status = eep_agent_poll_held(agent, view_p, &held);
        if (status != EEP_INPROGRESS) {
            return status;
        }
        if (eep_agent_now_ms() >= deadline) {
            return EEP_ERR_TIMEOUT;
        }
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_mutex_lock(&agent->lock);
        if (!agent->lost_pending && (held || agent->latest_epoch <= agent->handed_epoch)) {
            pthread_cond_timedwait(&agent->cond, &agent->lock, &ts);
        }
        pthread_mutex_unlock(&agent->lock);
    }
}

uint64_t eep_agent_newest_epoch(eep_agent_t *agent)
{
    uint64_t epoch;

    pthread_mutex_lock(&agent->lock);
    epoch = agent->lost_pending ? UINT64_MAX : agent->latest_epoch;
    pthread_mutex_unlock(&agent->lock);
    return epoch;
}

uint64_t eep_agent_epoch(eep_agent_t *agent)
{
    uint64_t epoch;

    pthread_mutex_lock(&agent->lock);
    epoch = agent->handed_epoch;
    pthread_mutex_unlock(&agent->lock);
    return epoch;
}
