/*
 * agent_lease.c - the agent's membership: its member key under a lease, kept until lost, rejoined.
 *
 * A lease counts as lost when etcd says so (keepalive failed past the TTL), when our member key
 * is deleted (expiry, eviction), or when the agent thread finds it slept longer than the TTL
 * (SIGSTOP, a stalled host) and the key is gone.  The member id embeds the lease id, which etcd
 * never reuses, so a rejoin is always a new member.  The rejoin and every other blocking etcd
 * call run on the agent's own thread (eep_agent_main), under reg_lock.
 */
#include "control/agent/agent_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "control/etcd/etcd.h"
#include "util/log.h"
#include "proto/eep.pb-c.h"

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

/* Called with reg_lock held: a new lease, a new id, a new member key. */
eep_status_t eep_agent_register(eep_agent_t *agent)
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
void eep_agent_drop_registration(eep_agent_t *agent)
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

void *eep_agent_main(void *arg)
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
