/*
 * eepd_metrics.c - Prometheus text metrics over HTTP, served by libmicrohttpd's own thread.
 *
 * The HTTP thread never touches the loop's state: the loop renders the whole text a few times a
 * second (eepd_metrics_update) and the handler copies that snapshot under a lock.
 */
#include "control/eepd/eepd.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "elastic/log.h"

#if MHD_VERSION >= 0x00097002
typedef enum MHD_Result eepd_mhd_result_t;
#else
typedef int eepd_mhd_result_t;
#endif

static eepd_mhd_result_t eepd_metrics_handler(void *cls, struct MHD_Connection *conn,
                                              const char *url, const char *method,
                                              const char *version, const char *upload_data,
                                              size_t *upload_data_size, void **con_cls)
{
    eepd_t              *eepd = cls;
    struct MHD_Response *resp;
    eepd_mhd_result_t    ret;
    char                *copy;
    unsigned             code = MHD_HTTP_OK;

    (void)version;
    (void)upload_data;
    (void)upload_data_size;
    (void)con_cls;
    if (strcmp(method, "GET") != 0) {
        copy = strdup("only GET\n");
        code = MHD_HTTP_METHOD_NOT_ALLOWED;
    } else if (strcmp(url, "/metrics") != 0) {
        copy = strdup("see /metrics\n");
        code = MHD_HTTP_NOT_FOUND;
    } else {
        pthread_mutex_lock(&eepd->metrics_lock);
        copy = strdup(eepd->metrics_text != NULL ? eepd->metrics_text : "");
        pthread_mutex_unlock(&eepd->metrics_lock);
    }
    if (copy == NULL) {
        return MHD_NO;
    }
    resp = MHD_create_response_from_buffer(strlen(copy), copy, MHD_RESPMEM_MUST_FREE);
    if (resp == NULL) {
        free(copy);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "text/plain; version=0.0.4");
    ret = MHD_queue_response(conn, code, resp);
    MHD_destroy_response(resp);
    return ret;
}

eep_status_t eepd_metrics_start(eepd_t *eepd)
{
    struct sockaddr_in addr;

    if (eepd->cfg.metrics_port == 0) {
        return EEP_OK;
    }
    memset(&addr, 0, sizeof(addr));
    addr.sin_family      = AF_INET;
    addr.sin_port        = htons((uint16_t)eepd->cfg.metrics_port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    eepd->metrics_daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG,
                                            (uint16_t)eepd->cfg.metrics_port, NULL, NULL,
                                            eepd_metrics_handler, eepd, MHD_OPTION_SOCK_ADDR,
                                            (struct sockaddr *)&addr, MHD_OPTION_END);
    if (eepd->metrics_daemon == NULL) {
        eep_error(EEP_SUBSYS_EEPD, "cannot serve metrics on 127.0.0.1:%lld",
                  (long long)eepd->cfg.metrics_port);
        return EEP_ERR_IO;
    }
    eep_info(EEP_SUBSYS_EEPD, "metrics on http://127.0.0.1:%lld/metrics",
             (long long)eepd->cfg.metrics_port);
    return EEP_OK;
}

void eepd_metrics_update(eepd_t *eepd)
{
    char *text = NULL;
    size_t len = 0;
    FILE  *f;

    if (eepd->metrics_daemon == NULL) {
        return;
    }
    f = open_memstream(&text, &len);
    if (f == NULL) {
        return;
    }
    fprintf(f, "# HELP eepd_is_leader 1 when this replica leads.\n# TYPE eepd_is_leader gauge\n"
               "eepd_is_leader %d\n", eepd->is_leader);
    fprintf(f, "# HELP eepd_view_epoch Epoch of the current view.\n# TYPE eepd_view_epoch gauge\n"
               "eepd_view_epoch %llu\n",
            (unsigned long long)(eepd->view != NULL ? eepd->view->epoch : 0));
    fprintf(f, "# HELP eepd_view_ranks Ranks in the current view.\n# TYPE eepd_view_ranks gauge\n"
               "eepd_view_ranks %zu\n", eepd->view != NULL ? eepd->view->n_members : 0);
    fprintf(f, "# HELP eepd_members Registered members.\n# TYPE eepd_members gauge\n"
               "eepd_members %zu\n", eepd->n_members);
    fprintf(f, "# HELP eepd_views_published_total Views this replica published.\n"
               "# TYPE eepd_views_published_total counter\neepd_views_published_total %llu\n",
            (unsigned long long)eepd->views_published);
    fprintf(f, "# HELP eepd_publish_conflicts_total Publish transactions that lost a race.\n"
               "# TYPE eepd_publish_conflicts_total counter\neepd_publish_conflicts_total %llu\n",
            (unsigned long long)eepd->publish_conflicts);
    fprintf(f, "# HELP eepd_etcd_round_trips_total etcd calls made by the loop.\n"
               "# TYPE eepd_etcd_round_trips_total counter\neepd_etcd_round_trips_total %llu\n",
            (unsigned long long)eepd->etcd_round_trips);
    fprintf(f, "# HELP eepd_last_view_round_trips etcd round trips of the last view change.\n"
               "# TYPE eepd_last_view_round_trips gauge\neepd_last_view_round_trips %llu\n",
            (unsigned long long)eepd->last_view_round_trips);
    fprintf(f, "# HELP eepd_elections_won_total Times this replica became leader.\n"
               "# TYPE eepd_elections_won_total counter\neepd_elections_won_total %llu\n",
            (unsigned long long)eepd->elections_won);
    fprintf(f, "# HELP eepd_faults_reported_total Fault reports received.\n"
               "# TYPE eepd_faults_reported_total counter\neepd_faults_reported_total %llu\n",
            (unsigned long long)eepd->faults_reported);
    fprintf(f, "# HELP eepd_rpc_requests_total RPC requests handled.\n"
               "# TYPE eepd_rpc_requests_total counter\neepd_rpc_requests_total %llu\n",
            (unsigned long long)eepd->rpc_requests);
    fprintf(f, "# HELP eepd_rpc_errors_total RPC requests answered with an error.\n"
               "# TYPE eepd_rpc_errors_total counter\neepd_rpc_errors_total %llu\n",
            (unsigned long long)eepd->rpc_errors);
    fprintf(f, "# HELP eepd_last_publish_ms First change seen to view committed, last view.\n"
               "# TYPE eepd_last_publish_ms gauge\neepd_last_publish_ms %.0f\n",
            eepd->last_publish_ms);
    fprintf(f, "# HELP eepd_watchers Open WatchViews streams.\n# TYPE eepd_watchers gauge\n"
               "eepd_watchers %zu\n", eepd->n_watchers);
    if (fclose(f) != 0) {
        free(text);
        return;
    }
    pthread_mutex_lock(&eepd->metrics_lock);
    free(eepd->metrics_text);
    eepd->metrics_text = text;
    pthread_mutex_unlock(&eepd->metrics_lock);
}

void eepd_metrics_stop(eepd_t *eepd)
{
    if (eepd->metrics_daemon != NULL) {
        MHD_stop_daemon(eepd->metrics_daemon);
        eepd->metrics_daemon = NULL;
    }
}
