/*
 * eepd.c - the eepd controller: one loop thread, etcd as the source of truth, views by Txn.
 *
 * Redis's shape (STYLE.md habit 13): the loop waits in gRPC's completion queue for at most
 * 1/hz s, then drains the queue of etcd events (eepd_watch.c: filled by the etcd client's thread,
 * copied under a lock) and runs the cron (election, settle window, metrics).  Every replica
 * mirrors all of /eep/<job>/ through one prefix watch (eepd_mirror.c applies each key), so a
 * follower that wins the election (eepd_election.c) already knows the members and the current
 * view.  The leader publishes views by Txn (eepd_publish.c).  This file holds the loop, its cron
 * and the controller's life (create, destroy).
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
