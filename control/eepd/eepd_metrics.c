/*
 * eepd_metrics.c - Prometheus text metrics and the health endpoints over HTTP, served by
 * libmicrohttpd's own thread on EEP_EEPD_METRICS_ADDR:EEP_EEPD_METRICS_PORT.
 *
 *   /metrics  Prometheus text
 *   /healthz  readiness: 200 while etcd answers (eepd_etcd_ok, what the Health RPC reports) and
 *             the loop runs, else 503; a JSON body says whether this replica leads and its epoch
 *   /livez    liveness: 200 while the loop ran within EEPD_LIVE_MS, whatever etcd does (restarting
 *             eepd cures no etcd outage)
 *
 * The HTTP thread never touches the loop's state: the loop renders the whole text and the health
 * snapshot a few times a second (eepd_metrics_update) and the handler copies them under a lock.
 */
#include "control/eepd/eepd.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/tool/http_page.h"
#include "util/log.h"

/* /livez fails when the loop's last snapshot (every 250 ms) is older than this. */
#define EEPD_LIVE_MS 10000

/* The HTTP thread: copies of the loop's last snapshot. */
static void eepd_metrics_page(void *arg, const char *url, eep_http_page_t *page)
{
    eepd_t *eepd = arg;

    if (strcmp(url, "/healthz") == 0 || strcmp(url, "/livez") == 0) {
        int64_t  age;
        int      etcd_ok, leader, live;
        uint64_t epoch;

        pthread_mutex_lock(&eepd->metrics_lock);
        age     = eepd->health_loop_ms > 0 ? eepd_now_ms() - eepd->health_loop_ms : -1;
        etcd_ok = eepd->health_etcd_ok;
        leader  = eepd->health_leader;
        epoch   = eepd->health_epoch;
        pthread_mutex_unlock(&eepd->metrics_lock);
        live       = age >= 0 && age < EEPD_LIVE_MS;
        page->code = (url[1] == 'l' ? live : live && etcd_ok) ? 200 : 503;
        if (asprintf(&page->body,
                     "{\"status\":\"%s\",\"loop_age_ms\":%lld,\"etcd_ok\":%s,"
                     "\"is_leader\":%s,\"epoch\":%llu}\n",
                     page->code == 200 ? "ok" : "unavailable", (long long)age,
                     etcd_ok ? "true" : "false", leader ? "true" : "false",
                     (unsigned long long)epoch) < 0) {
            page->body = NULL;
        }
        page->content_type = "application/json";
    } else if (strcmp(url, "/metrics") != 0) {
        page->body = strdup("see /metrics, /healthz, /livez\n");
        page->code = 404;
    } else {
        pthread_mutex_lock(&eepd->metrics_lock);
        page->body = strdup(eepd->metrics_text != NULL ? eepd->metrics_text : "");
        pthread_mutex_unlock(&eepd->metrics_lock);
        page->content_type = "text/plain; version=0.0.4";
    }
}

eep_status_t eepd_metrics_start(eepd_t *eepd)
{
    struct sockaddr_in addr;
    eep_http_server_t *srv = NULL;
    eep_status_t       status;

    if (eepd->cfg.metrics_port == 0) {
        return EEP_OK;
    }
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_port   = htons((uint16_t)eepd->cfg.metrics_port);
    if (inet_pton(AF_INET, eepd->cfg.metrics_addr, &addr.sin_addr) != 1) {
        eep_error(EEP_SUBSYS_EEPD,
                  "EEP_EEPD_METRICS_ADDR '%s' is not an IPv4 address (127.0.0.1, 0.0.0.0, ...)",
                  eepd->cfg.metrics_addr);
        return EEP_ERR_INVALID_ARG;
    }
    status = eep_http_start(&addr, eepd_metrics_page, eepd, "eepd metrics", &srv, NULL);
    if (status != EEP_OK) {
        return status;
    }
    eepd->metrics_daemon = srv;
    eep_info(EEP_SUBSYS_EEPD, "metrics on http://%s:%lld/metrics (health: /healthz, /livez)",
             eepd->cfg.metrics_addr, (long long)eepd->cfg.metrics_port);
    return EEP_OK;
}

/* One metric in Prometheus text format: its HELP and TYPE lines, then its value. */
static void eepd_metric(FILE *f, const char *name, const char *type, const char *help,
                        unsigned long long value)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name, value);
}

void eepd_metrics_update(eepd_t *eepd)
{
    char  *text = NULL;
    size_t len  = 0;
    FILE  *f;
    int    etcd_ok;

    if (eepd->metrics_daemon == NULL) {
        return;
    }
    etcd_ok = eepd_etcd_ok(eepd);
    f       = open_memstream(&text, &len);
    if (f == NULL) {
        return;
    }
    eepd_metric(f, "eepd_is_leader", "gauge", "1 when this replica leads.",
                (unsigned long long)eepd->is_leader);
    eepd_metric(f, "eepd_etcd_ok", "gauge", "1 while etcd answers (what /healthz reports).",
                (unsigned long long)etcd_ok);
    eepd_metric(f, "eepd_view_epoch", "gauge", "Epoch of the current view.",
                (unsigned long long)(eepd->view != NULL ? eepd->view->epoch : 0));
    eepd_metric(f, "eepd_view_ranks", "gauge", "Ranks in the current view.",
                (unsigned long long)(eepd->view != NULL ? eepd->view->n_members : 0));
    eepd_metric(f, "eepd_members", "gauge", "Registered members.",
                (unsigned long long)eepd->n_members);
    eepd_metric(f, "eepd_views_published_total", "counter", "Views this replica published.",
                (unsigned long long)eepd->views_published);
    eepd_metric(f, "eepd_publish_conflicts_total", "counter",
                "Publish transactions that lost a race.",
                (unsigned long long)eepd->publish_conflicts);
    eepd_metric(f, "eepd_etcd_round_trips_total", "counter", "etcd calls made by the loop.",
                (unsigned long long)eepd->etcd_round_trips);
    eepd_metric(f, "eepd_last_view_round_trips", "gauge",
                "etcd round trips of the last view change.",
                (unsigned long long)eepd->last_view_round_trips);
    eepd_metric(f, "eepd_elections_won_total", "counter", "Times this replica became leader.",
                (unsigned long long)eepd->elections_won);
    eepd_metric(f, "eepd_corrupt_views_total", "counter",
                "view/current or views/<N> values ignored (undecodable, implausible epoch).",
                (unsigned long long)eepd->corrupt_views);
    eepd_metric(f, "eepd_members_rejected_total", "counter",
                "Member values ignored for being over their bounds.",
                (unsigned long long)eepd->members_rejected);
    eepd_metric(f, "eepd_faults_reported_total", "counter", "Fault reports received.",
                (unsigned long long)eepd->faults_reported);
    eepd_metric(f, "eepd_rpc_requests_total", "counter", "RPC requests handled.",
                (unsigned long long)eepd->rpc_requests);
    eepd_metric(f, "eepd_rpc_errors_total", "counter", "RPC requests answered with an error.",
                (unsigned long long)eepd->rpc_errors);
    fprintf(f,
            "# HELP eepd_last_publish_ms First change seen to view committed, last view.\n"
            "# TYPE eepd_last_publish_ms gauge\neepd_last_publish_ms %.0f\n",
            eepd->last_publish_ms);
    eepd_metric(f, "eepd_watchers", "gauge", "Open WatchViews streams.",
                (unsigned long long)eepd->n_watchers);
    if (fclose(f) != 0) {
        free(text);
        return;
    }
    pthread_mutex_lock(&eepd->metrics_lock);
    free(eepd->metrics_text);
    eepd->metrics_text   = text;
    eepd->health_etcd_ok = etcd_ok;
    eepd->health_leader  = eepd->is_leader;
    eepd->health_epoch   = eepd->view != NULL ? eepd->view->epoch : 0;
    eepd->health_loop_ms = eepd_now_ms();
    pthread_mutex_unlock(&eepd->metrics_lock);
}

void eepd_metrics_stop(eepd_t *eepd)
{
    eep_http_stop((eep_http_server_t *)eepd->metrics_daemon);
    eepd->metrics_daemon = NULL;
}
