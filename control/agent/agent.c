/*
 * agent.c - libeep_agent: a rank's membership (leased key), its view feed, and fault reports.
 *
 * etcd callbacks (the etcd client's thread) only copy what arrived and flip flags under the
 * agent's lock; blocking etcd work (registering again after a lost lease) runs on the agent's own
 * thread, serialized with eep_agent_leave() by reg_lock.  A lease counts as lost when etcd says so
 * (keepalive failed past the TTL), when our member key is deleted (expiry, eviction), or when the
 * agent thread finds it slept longer than the TTL (SIGSTOP, a stalled host) and the key is gone.
 * The member id embeds the lease id, which etcd never reuses, so a rejoin is always a new member.
 */
#include "control/agent/agent.h"

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "control/agent/agent_knobs.h"
#include "control/etcd/etcd.h"
#include "util/clock.h"
#include "util/log.h"
#include "proto/eep.pb-c.h"

#define EEP_AGENT_KEY_MAX   768
#define EEP_AGENT_EPOCH_MAX (1ull << 53) /* eepd's EEPD_EPOCH_MAX */

struct eep_agent {
    eep_agent_config_t      cfg;
    char                    prefix[256];
    char                    host[128];
    char                    gpu_uuid[128];
    char                    endpoint[256];
    int64_t                 ttl_s;
    char                  **nics;
    size_t                  n_nics;
    eep_etcd_t             *etcd;
    eep_agent_notify_func_t notify;
    void                   *notify_arg;

    pthread_t         thread;
    int               thread_started;
    pthread_mutex_t   reg_lock; /* register / leave / watch cancel: one at a time */
    pthread_mutex_t   lock;     /* everything below */
    pthread_cond_t    cond;
    int64_t           lease;
    char              member_id[256];
    char              member_key[EEP_AGENT_KEY_MAX];
    int               registered;
    int               need_rejoin;
    int               lost_pending;
    int               left;
    int               stop;
    int               view_watch_lost;
    eep_etcd_watch_t *member_watch;
    eep_etcd_watch_t *inject_watch; /* inject/<member id>: data-plane faults for the rank */
    eep_etcd_watch_t *view_watch;
    char              inject_spec[256]; /* the newest one not yet taken ("" none) */
    uint8_t          *latest;
    size_t            latest_len;
    uint64_t          latest_epoch;
    uint64_t          handed_epoch;
    uint64_t          losses;
    int64_t           retry_at_ms;     /* after a failed rejoin or resync: not before this */
    int               lease_dead;      /* etcd said the lease is gone (still revoked: see below) */
    int64_t           stale_leases[8]; /* old leases whose revoke did not get through (reg_lock) */
    size_t            n_stale;
};

static int64_t eep_agent_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

eep_status_t eep_agent_find_nics(char ***names_p, size_t *count_p)
{
    struct ibv_device **list;
    char              **names;
    int                 n = 0, i;

    if (names_p == NULL || count_p == NULL) {
        return EEP_ERR_INVALID_ARG;
    }
    list = ibv_get_device_list(&n);
    if (list == NULL || n <= 0) {
        /* No RDMA stack or no device: a member without NICs, not an error. */
        if (list != NULL) {
            ibv_free_device_list(list);
        }
        eep_debug(EEP_SUBSYS_AGENT, "no rdma devices found");
        *names_p = NULL;
        *count_p = 0;
        return EEP_OK;
    }
    names = calloc((size_t)n + 1, sizeof(*names));
    if (names == NULL) {
        ibv_free_device_list(list);
        return EEP_ERR_NO_MEMORY;
    }
    for (i = 0; i < n; i++) {
        const char *name = ibv_get_device_name(list[i]);

        names[i] = strdup(name != NULL ? name : "?");
    }
    ibv_free_device_list(list);
    *names_p = names;
    *count_p = (size_t)n;
    return EEP_OK;
}

static void eep_agent_notify(eep_agent_t *agent)
{
    if (agent->notify != NULL) {
        agent->notify(agent->notify_arg);
    }
}

/* Under agent->lock: the lease is gone; report once, then rejoin as a new member.  The rejoin
 * waits until the owner has taken the loss (a poll returned EEP_ERR_LEASE_LOST): a process whose
 * step loop hangs while this thread runs would otherwise be back in the next view at once, and
 * every survivor would build that view's communicator with a rank that cannot take part (make
 * run's hang faults: all ranks stopped 3.7-4.0 s, until the hung loop woke). */
static void eep_agent_mark_lost_locked(eep_agent_t *agent, const char *why)
{
    if (!agent->registered || agent->left) {
        return;
    }
    eep_warn(EEP_SUBSYS_AGENT, "member %s lost its lease (%s): rejoining as a new member",
             agent->member_id, why);
    agent->registered   = 0;
    agent->lost_pending = 1;
    agent->need_rejoin  = 1;
    agent->losses++;
    pthread_cond_broadcast(&agent->cond);
}

static void eep_agent_on_lease_lost(int64_t lease, eep_status_t status, void *arg)
{
    eep_agent_t *agent = arg;
    int          hit;

    pthread_mutex_lock(&agent->lock);
    hit = lease == agent->lease && agent->registered;
    if (hit) {
        agent->lease_dead = 1;
        eep_agent_mark_lost_locked(agent, eep_status_string(status));
    }
    pthread_mutex_unlock(&agent->lock);
    if (hit) {
        eep_agent_notify(agent);
    }
}

static void eep_agent_on_member(const eep_etcd_event_t *events, size_t count, int64_t revision,
                                eep_status_t status, void *arg)
{
    eep_agent_t *agent = arg;
    size_t       i;
    int          hit = 0;

    (void)revision;
    (void)status;
    pthread_mutex_lock(&agent->lock);
    for (i = 0; events != NULL && i < count; i++) {
        if (events[i].type == EEP_ETCD_EVENT_DELETE &&
            events[i].kv.key_len == strlen(agent->member_key) &&
            memcmp(events[i].kv.key, agent->member_key, events[i].kv.key_len) == 0 &&
            agent->registered) {
            eep_agent_mark_lost_locked(agent, "member key deleted");
            hit = 1;
        }
    }
    pthread_mutex_unlock(&agent->lock);
    if (hit) {
        eep_agent_notify(agent);
    }
}

/* eepd put a data-plane fault spec for this member (eepctl inject-fault data-plane): keep the
   newest for eep_agent_take_fault; no notify (that would stop the rank's running kernel). */
static void eep_agent_on_inject(const eep_etcd_event_t *events, size_t count, int64_t revision,
                                eep_status_t status, void *arg)
{
    eep_agent_t *agent = arg;
    size_t       i;

    (void)revision;
    (void)status;
    pthread_mutex_lock(&agent->lock);
    for (i = 0; events != NULL && i < count; i++) {
        size_t n = events[i].kv.value_len;

        if (events[i].type != EEP_ETCD_EVENT_PUT || n == 0) {
            continue;
        }
        if (n >= sizeof(agent->inject_spec)) {
            eep_warn(EEP_SUBSYS_AGENT, "fault spec of %zu bytes for this member: ignored", n);
            continue;
        }
        memcpy(agent->inject_spec, events[i].kv.value, n);
        agent->inject_spec[n] = '\0';
        eep_info(EEP_SUBSYS_AGENT, "data-plane fault for this rank: %s", agent->inject_spec);
    }
    pthread_mutex_unlock(&agent->lock);
}

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

static eep_status_t eep_agent_follow_views(eep_agent_t *agent)
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

/* Called with reg_lock held: a new lease, a new id, a new member key. */
static eep_status_t eep_agent_register(eep_agent_t *agent)
{
    Eep__V1__Member   m = EEP__V1__MEMBER__INIT;
    char              id[256], key[EEP_AGENT_KEY_MAX], host[128];
    int64_t           lease = 0, ttl = 0, rev = 0;
    eep_etcd_watch_t *watch = NULL;
    uint8_t          *buf;
    size_t            len, i;
    eep_status_t      status;

    status = eep_etcd_lease_grant(agent->etcd, agent->ttl_s, &lease, &ttl);
    if (status != EEP_OK) {
        return status;
    }
    if (ttl != agent->ttl_s) {
        eep_warn(EEP_SUBSYS_AGENT, "etcd granted a %lld s lease (asked %lld s)", (long long)ttl,
                 (long long)agent->ttl_s);
    }
    /* The id must be a safe key segment: [A-Za-z0-9._-]. */
    snprintf(host, sizeof(host), "%s", agent->host);
    for (i = 0; host[i] != '\0'; i++) {
        char c = host[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-')) {
            host[i] = '_';
        }
    }
    snprintf(id, sizeof(id), "%.100s-%d-%llx", host, (int)getpid(), (unsigned long long)lease);
    snprintf(key, sizeof(key), "%smembers/%s", agent->prefix, id);
    m.id           = id;
    m.host         = agent->host;
    m.gpu_uuid     = agent->gpu_uuid;
    m.pid          = (int32_t)getpid();
    m.n_rdma_nics  = agent->n_nics;
    m.rdma_nics    = agent->nics;
    m.capabilities = (agent->gpu_uuid[0] ? EEP__V1__CAPABILITY__CAP_GPU : 0) |
                     (agent->n_nics > 0 ? EEP__V1__CAPABILITY__CAP_RDMA : 0);
    m.lease    = lease;
    m.endpoint = agent->endpoint;
    len        = eep__v1__member__get_packed_size(&m);
    buf        = malloc(len ? len : 1);
    if (buf == NULL) {
        status = EEP_ERR_NO_MEMORY;
        goto err_revoke;
    }
    eep__v1__member__pack(&m, buf);
    status = eep_etcd_put(agent->etcd, key, buf, len, lease, &rev);
    free(buf);
    if (status != EEP_OK) {
        goto err_revoke;
    }
    pthread_mutex_lock(&agent->lock);
    agent->lease = lease;
    snprintf(agent->member_id, sizeof(agent->member_id), "%s", id);
    snprintf(agent->member_key, sizeof(agent->member_key), "%s", key);
    agent->registered = 1;
    pthread_mutex_unlock(&agent->lock);
    status = eep_etcd_lease_keepalive(agent->etcd, lease, eep_agent_on_lease_lost, agent);
    if (status != EEP_OK) {
        goto err_unregister;
    }
    status = eep_etcd_watch_create(agent->etcd, key, 0, rev + 1, eep_agent_on_member, agent,
                                   &watch);
    if (status != EEP_OK) {
        goto err_unregister;
    }
    pthread_mutex_lock(&agent->lock);
    agent->member_watch = watch;
    pthread_mutex_unlock(&agent->lock);
    /* Faults eepd sends this member come after its key exists: from the same revision on. */
    snprintf(key, sizeof(key), "%sinject/%s", agent->prefix, id);
    status = eep_etcd_watch_create(agent->etcd, key, 0, rev + 1, eep_agent_on_inject, agent,
                                   &watch);
    if (status != EEP_OK) {
        goto err_cancel_member;
    }
    pthread_mutex_lock(&agent->lock);
    agent->inject_watch = watch;
    pthread_mutex_unlock(&agent->lock);
    eep_info(EEP_SUBSYS_AGENT, "registered as member %s (lease %llx, ttl %lld s, %zu rdma nics)",
             id, (unsigned long long)lease, (long long)ttl, agent->n_nics);
    return EEP_OK;

err_cancel_member:
    pthread_mutex_lock(&agent->lock);
    watch               = agent->member_watch;
    agent->member_watch = NULL;
    pthread_mutex_unlock(&agent->lock);
    eep_etcd_watch_cancel(watch);
err_unregister:
    pthread_mutex_lock(&agent->lock);
    agent->registered = 0;
    pthread_mutex_unlock(&agent->lock);
err_revoke:
    eep_etcd_lease_revoke(agent->etcd, lease);
    return status;
}

static void eep_agent_revoke_or_keep(eep_agent_t *agent, int64_t lease);

/* reg_lock held: forget the old registration (its lease may still live after an eviction). */
static void eep_agent_drop_registration(eep_agent_t *agent)
{
    eep_etcd_watch_t *watch, *inject;
    int64_t           lease;

    pthread_mutex_lock(&agent->lock);
    watch                 = agent->member_watch;
    inject                = agent->inject_watch;
    lease                 = agent->lease;
    agent->member_watch   = NULL;
    agent->inject_watch   = NULL;
    agent->inject_spec[0] = '\0'; /* meant for the old member */
    agent->lease          = 0;
    agent->lease_dead     = 0;
    pthread_mutex_unlock(&agent->lock);
    if (watch != NULL) {
        eep_etcd_watch_cancel(watch);
    }
    if (inject != NULL) {
        eep_etcd_watch_cancel(inject);
    }
    if (lease != 0) {
        /* Revoke even a lease we counted lost: a restarted etcd restores leases (with a fresh
         * TTL), and the old member key would sit beside the new one, a dead rank in the next
         * views (issue 25 #2).  After an eviction the lease still lives: end it.  After a real
         * expiry etcd answers NOT_FOUND, which the client logs; harmless.  When etcd does not
         * answer, the revoke is retried before the next registration. */
        eep_agent_revoke_or_keep(agent, lease);
    }
}

/* reg_lock held: revoke @p lease, or remember it for eep_agent_revoke_stale(). */
static void eep_agent_revoke_or_keep(eep_agent_t *agent, int64_t lease)
{
    eep_status_t status = eep_etcd_lease_revoke(agent->etcd, lease);

    if (status != EEP_ERR_CONTROL_UNAVAILABLE && status != EEP_ERR_TIMEOUT) {
        return;
    }
    if (agent->n_stale == sizeof(agent->stale_leases) / sizeof(agent->stale_leases[0])) {
        eep_warn(EEP_SUBSYS_AGENT, "too many unrevoked leases: lease %llx left to expire",
                 (unsigned long long)agent->stale_leases[0]);
        memmove(agent->stale_leases, agent->stale_leases + 1,
                (agent->n_stale - 1) * sizeof(agent->stale_leases[0]));
        agent->n_stale--;
    }
    agent->stale_leases[agent->n_stale++] = lease;
}

/* reg_lock held: revoke the old leases first; EEP_OK once none is left. */
static eep_status_t eep_agent_revoke_stale(eep_agent_t *agent)
{
    while (agent->n_stale > 0) {
        int64_t      lease  = agent->stale_leases[agent->n_stale - 1];
        eep_status_t status = eep_etcd_lease_revoke(agent->etcd, lease);

        if (status == EEP_ERR_CONTROL_UNAVAILABLE || status == EEP_ERR_TIMEOUT) {
            return status;
        }
        eep_info(EEP_SUBSYS_AGENT, "old lease %llx revoked before registering again",
                 (unsigned long long)lease);
        agent->n_stale--;
    }
    return EEP_OK;
}

static int eep_agent_key_exists(eep_agent_t *agent, const char *key, int *exists_p)
{
    eep_etcd_range_t r;

    if (eep_etcd_range(agent->etcd, key, 0, &r) != EEP_OK) {
        return 0;
    }
    *exists_p = r.count > 0;
    eep_etcd_range_free(&r);
    return 1;
}

static void *eep_agent_main(void *arg)
{
    eep_agent_t *agent = arg;
    int64_t      last  = eep_agent_now_ms(), now;

    pthread_mutex_lock(&agent->lock);
    while (!agent->stop) {
        struct timespec ts;

        now = eep_agent_now_ms();
        if (agent->need_rejoin && !agent->lost_pending && !agent->left &&
            now >= agent->retry_at_ms) {
            agent->need_rejoin = 0;
            pthread_mutex_unlock(&agent->lock);
            pthread_mutex_lock(&agent->reg_lock);
            eep_agent_drop_registration(agent);
            if (!agent->left && !agent->stop &&
                (eep_agent_revoke_stale(agent) != EEP_OK || eep_agent_register(agent) != EEP_OK)) {
                pthread_mutex_lock(&agent->lock);
                agent->need_rejoin = 1; /* retried in 500 ms */
                agent->retry_at_ms = eep_agent_now_ms() + 500;
                pthread_mutex_unlock(&agent->lock);
            }
            pthread_mutex_unlock(&agent->reg_lock);
            eep_agent_notify(agent);
            pthread_mutex_lock(&agent->lock);
        }
        if (agent->view_watch_lost && now >= agent->retry_at_ms) {
            eep_etcd_watch_t *old = agent->view_watch;

            agent->view_watch      = NULL;
            agent->view_watch_lost = 0;
            pthread_mutex_unlock(&agent->lock);
            if (old != NULL) {
                eep_etcd_watch_cancel(old);
            }
            if (eep_agent_follow_views(agent) != EEP_OK) {
                pthread_mutex_lock(&agent->lock);
                agent->view_watch_lost = 1;
                agent->retry_at_ms     = eep_agent_now_ms() + 500;
                pthread_mutex_unlock(&agent->lock);
            }
            pthread_mutex_lock(&agent->lock);
        }
        /* Slept past the TTL (SIGSTOP, a stalled host)?  Then the key may be gone while no
         * event has told us yet: look. */
        now = eep_agent_now_ms();
        if (now - last > 1000 * agent->ttl_s && agent->registered) {
            char key[EEP_AGENT_KEY_MAX];
            int  exists = 1;

            snprintf(key, sizeof(key), "%s", agent->member_key);
            pthread_mutex_unlock(&agent->lock);
            eep_info(EEP_SUBSYS_AGENT, "agent thread paused %lld ms: checking the member key",
                     (long long)(now - last));
            if (eep_agent_key_exists(agent, key, &exists) && !exists) {
                pthread_mutex_lock(&agent->lock);
                if (strcmp(key, agent->member_key) == 0) {
                    eep_agent_mark_lost_locked(agent, "paused past the lease ttl");
                }
                pthread_mutex_unlock(&agent->lock);
                eep_agent_notify(agent);
            }
            pthread_mutex_lock(&agent->lock);
        }
        last = eep_agent_now_ms();
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        if (!(((agent->need_rejoin && !agent->lost_pending) || agent->view_watch_lost) &&
              eep_agent_now_ms() >= agent->retry_at_ms) &&
            !agent->stop) {
            pthread_cond_timedwait(&agent->cond, &agent->lock, &ts);
        }
    }
    pthread_mutex_unlock(&agent->lock);
    return NULL;
}

eep_status_t eep_agent_create(const eep_agent_params_t *params, eep_agent_t **agent_p)
{
    eep_agent_t *agent;
    eep_status_t status;

    if (params == NULL || params->size < sizeof(*params) || agent_p == NULL) {
        eep_error(EEP_SUBSYS_AGENT, "eep_agent_create: params (with size set) and agent_p are "
                                    "required");
        return EEP_ERR_INVALID_ARG;
    }
    eep_config_check_env_once();
    agent = calloc(1, sizeof(*agent));
    if (agent == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    status = eep_config_load(&eep_agent_knob_table, &agent->cfg);
    if (status != EEP_OK) {
        goto err_free;
    }
    if (params->job != NULL) {
        snprintf(agent->cfg.job, sizeof(agent->cfg.job), "%s", params->job);
    } else {
        status = eep_etcd_job_name(agent->cfg.job, sizeof(agent->cfg.job));
        if (status != EEP_OK) {
            goto err_free;
        }
    }
    if (agent->cfg.job[0] == '\0' || strchr(agent->cfg.job, '/') != NULL) {
        eep_error(EEP_SUBSYS_AGENT, "job must be a non-empty name without '/'");
        status = EEP_ERR_INVALID_ARG;
        goto err_free;
    }
    snprintf(agent->prefix, sizeof(agent->prefix), "/eep/%.200s/", agent->cfg.job);
    snprintf(agent->gpu_uuid, sizeof(agent->gpu_uuid), "%.127s",
             params->gpu_uuid != NULL ? params->gpu_uuid : agent->cfg.gpu_uuid);
    snprintf(agent->endpoint, sizeof(agent->endpoint), "%s",
             params->endpoint != NULL ? params->endpoint : "");
    if (gethostname(agent->host, sizeof(agent->host)) != 0) {
        snprintf(agent->host, sizeof(agent->host), "unknown");
    }
    agent->host[sizeof(agent->host) - 1] = '\0';
    agent->ttl_s      = params->lease_ttl_s > 0 ? params->lease_ttl_s : agent->cfg.lease_ttl_s;
    agent->notify     = params->notify;
    agent->notify_arg = params->notify_arg;
    if (agent->cfg.rdma) {
        status = eep_agent_find_nics(&agent->nics, &agent->n_nics);
        if (status != EEP_OK) {
            goto err_free;
        }
    }
    pthread_mutex_init(&agent->lock, NULL);
    pthread_mutex_init(&agent->reg_lock, NULL);
    pthread_cond_init(&agent->cond, NULL);
    /* NULL params: every setting from the EEP_ETCD_* knobs (endpoints, timeouts, TLS files). */
    status = eep_etcd_create(NULL, &agent->etcd);
    if (status != EEP_OK) {
        goto err_sync;
    }
    status = eep_agent_follow_views(agent);
    if (status != EEP_OK) {
        goto err_etcd;
    }
    pthread_mutex_lock(&agent->reg_lock);
    status = eep_agent_register(agent);
    pthread_mutex_unlock(&agent->reg_lock);
    if (status != EEP_OK) {
        goto err_watch;
    }
    if (pthread_create(&agent->thread, NULL, eep_agent_main, agent) != 0) {
        status = EEP_ERR_NO_RESOURCE;
        goto err_unregister;
    }
    agent->thread_started = 1;
    *agent_p              = agent;
    return EEP_OK;

err_unregister:
    eep_agent_drop_registration(agent);
err_watch:
    eep_etcd_watch_cancel(agent->view_watch);
err_etcd:
    eep_etcd_destroy(agent->etcd);
err_sync:
    pthread_cond_destroy(&agent->cond);
    pthread_mutex_destroy(&agent->reg_lock);
    pthread_mutex_destroy(&agent->lock);
err_free:
    if (agent->nics != NULL) {
        size_t i;

        for (i = 0; i < agent->n_nics; i++) {
            free(agent->nics[i]);
        }
        free(agent->nics);
    }
    free(agent);
    return status;
}

eep_status_t eep_agent_leave(eep_agent_t *agent)
{
    Eep__V1__Member m      = EEP__V1__MEMBER__INIT;
    eep_status_t    status = EEP_OK;
    char            id[256], key[EEP_AGENT_KEY_MAX];
    int64_t         lease;
    int             registered;
    uint8_t        *buf;
    size_t          len;

    if (agent == NULL) {
        return EEP_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&agent->reg_lock);
    pthread_mutex_lock(&agent->lock);
    if (agent->left) {
        pthread_mutex_unlock(&agent->lock);
        pthread_mutex_unlock(&agent->reg_lock);
        return EEP_OK;
    }
    agent->left = 1;
    registered  = agent->registered;
    lease       = agent->lease;
    snprintf(id, sizeof(id), "%s", agent->member_id);
    snprintf(key, sizeof(key), "%s", agent->member_key);
    agent->registered = 0;
    pthread_mutex_unlock(&agent->lock);
    if (registered) {
        /* Announce the leave (eepd skips its settle window for it), then drop the lease,
         * which deletes the key. */
        m.id      = id;
        m.host    = agent->host;
        m.pid     = (int32_t)getpid();
        m.lease   = lease;
        m.leaving = 1;
        len       = eep__v1__member__get_packed_size(&m);
        buf       = malloc(len ? len : 1);
        if (buf != NULL) {
            eep__v1__member__pack(&m, buf);
            status = eep_etcd_put(agent->etcd, key, buf, len, lease, NULL);
            free(buf);
        }
        eep_info(EEP_SUBSYS_AGENT, "member %s leaves", id);
    }
    eep_agent_drop_registration(agent);
    pthread_mutex_unlock(&agent->reg_lock);
    return status;
}

void eep_agent_destroy(eep_agent_t *agent)
{
    size_t i;

    if (agent == NULL) {
        return;
    }
    eep_agent_leave(agent);
    pthread_mutex_lock(&agent->lock);
    agent->stop = 1;
    pthread_cond_broadcast(&agent->cond);
    pthread_mutex_unlock(&agent->lock);
    if (agent->thread_started) {
        pthread_join(agent->thread, NULL);
    }
    if (agent->view_watch != NULL) {
        eep_etcd_watch_cancel(agent->view_watch);
    }
    eep_etcd_destroy(agent->etcd);
    for (i = 0; i < agent->n_nics; i++) {
        free(agent->nics[i]);
    }
    free(agent->nics);
    free(agent->latest);
    pthread_cond_destroy(&agent->cond);
    pthread_mutex_destroy(&agent->reg_lock);
    pthread_mutex_destroy(&agent->lock);
    free(agent);
}

eep_status_t eep_agent_take_fault(eep_agent_t *agent, char *spec, size_t len)
{
    eep_status_t status = EEP_ERR_NOT_FOUND;

    if (agent == NULL || spec == NULL || len == 0) {
        return EEP_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&agent->lock);
    if (agent->inject_spec[0] != '\0') {
        snprintf(spec, len, "%s", agent->inject_spec);
        agent->inject_spec[0] = '\0';
        status                = EEP_OK;
    }
    pthread_mutex_unlock(&agent->lock);
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
     * loss is reported (EEP_ERR_LEASE_LOST first, then views for the new member). */
    if (lease != 0 && eep_etcd_lease_deadline(agent->etcd, lease, &deadline) == EEP_OK &&
        (int64_t)eep_clock_ms() >= deadline) {
        eep_debug(EEP_SUBSYS_AGENT, "lease %llx unconfirmed past its ttl: view held back",
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

eep_status_t eep_agent_member_id(eep_agent_t *agent, char *buf, size_t len)
{
    eep_status_t status = EEP_OK;

    if (agent == NULL || buf == NULL) {
        return EEP_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&agent->lock);
    if (!agent->registered) {
        status = EEP_ERR_BUSY;
    } else if (strlen(agent->member_id) >= len) {
        status = EEP_ERR_INVALID_ARG;
    } else {
        snprintf(buf, len, "%s", agent->member_id);
    }
    pthread_mutex_unlock(&agent->lock);
    return status;
}

eep_status_t eep_agent_report_fault(eep_agent_t *agent, const char *suspect, int suspect_rank,
                                    uint64_t epoch, const char *phase, const char *detail)
{
    Eep__V1__Fault f = EEP__V1__FAULT__INIT;
    char           key[EEP_AGENT_KEY_MAX], me[256];
    uint8_t       *buf;
    size_t         len, i;
    eep_status_t   status;

    if (agent == NULL || suspect == NULL || suspect[0] == '\0' || strlen(suspect) > 200) {
        eep_error(EEP_SUBSYS_AGENT, "eep_agent_report_fault: suspect must be a member id");
        return EEP_ERR_INVALID_ARG;
    }
    for (i = 0; suspect[i] != '\0'; i++) {
        if (suspect[i] == '/') {
            eep_error(EEP_SUBSYS_AGENT, "eep_agent_report_fault: bad suspect id '%s'", suspect);
            return EEP_ERR_INVALID_ARG;
        }
    }
    pthread_mutex_lock(&agent->lock);
    snprintf(me, sizeof(me), "%s", agent->member_id);
    pthread_mutex_unlock(&agent->lock);
    f.reporter     = me;
    f.suspect      = (char *)suspect;
    f.suspect_rank = suspect_rank;
    f.epoch        = epoch;
    f.phase        = (char *)(phase != NULL ? phase : "");
    f.detail       = (char *)(detail != NULL ? detail : "");
    len            = eep__v1__fault__get_packed_size(&f);
    buf            = malloc(len ? len : 1);
    if (buf == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    eep__v1__fault__pack(&f, buf);
    /* Straight into etcd: eepd's leader watches faults/, and a failover loses no report. */
    snprintf(key, sizeof(key), "%sfaults/%s", agent->prefix, suspect);
    status = eep_etcd_put(agent->etcd, key, buf, len, 0, NULL);
    free(buf);
    if (status == EEP_OK) {
        eep_warn(EEP_SUBSYS_AGENT, "reported fault: suspect %s (rank %d) in %s at epoch %llu",
                 suspect, suspect_rank, f.phase, (unsigned long long)epoch);
    }
    return status;
}
