/*
 * agent_int.h - the agent's state, shared by agent.c, agent_lease.c and agent_view.c (internal).
 *
 * etcd callbacks (the etcd client's thread) only copy what arrived and flip flags under the
 * agent's lock; blocking etcd work (registering again after a lost lease) runs on the agent's own
 * thread, serialized with eep_agent_leave() by reg_lock.
 */
#ifndef EEP_AGENT_INT_H
#define EEP_AGENT_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "control/agent/agent.h"
#include "control/agent/agent_knobs.h"
#include "control/etcd/etcd.h"

#define EEP_AGENT_KEY_MAX 768

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

/* agent.c */
/* CLOCK_MONOTONIC in milliseconds. */
int64_t eep_agent_now_ms(void);
/* Call the owner's notify callback, if any (no lock held). */
void eep_agent_notify(eep_agent_t *agent);
/* The inject/<member id> watch's callback: keeps the newest fault spec for eep_agent_take_fault. */
void eep_agent_on_inject(const eep_etcd_event_t *events, size_t count, int64_t revision,
                         eep_status_t status, void *arg);

/* agent_lease.c */
/* Called with reg_lock held: a new lease, a new id, a new member key. */
eep_status_t eep_agent_register(eep_agent_t *agent);
/* reg_lock held: forget the old registration (its lease may still live after an eviction). */
void eep_agent_drop_registration(eep_agent_t *agent);
/* The agent's thread: rejoins after a lost lease, follows views again after a lost watch, and
 * looks for the member key after a pause past the TTL. */
void *eep_agent_main(void *arg);

/* agent_view.c */
/* Read view/current (taken if eepd published it), then watch it from the next revision. */
eep_status_t eep_agent_follow_views(eep_agent_t *agent);

#endif /* EEP_AGENT_INT_H */
