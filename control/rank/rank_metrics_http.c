/*
 * rank_metrics_http.c - a rank's /metrics over HTTP (libmicrohttpd's own thread), the endpoint of
 * control/rank/rank_metrics.h.
 *
 * As in eepd_metrics.c, the HTTP thread never reads the rank's state: the rank renders the whole
 * text between its calls (eep_rank_metrics_publish) and the handler copies the last text under a
 * lock.  Port 0 lets the kernel pick a free port; the URL names the port actually bound, so N
 * ranks on one host need no port plan.
 */
#include "control/rank/rank_metrics.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control/rank/rank_knobs.h"
#include "util/log.h"

#if MHD_VERSION >= 0x00097002
typedef enum MHD_Result eep_rank_mhd_result_t;
#else
typedef int eep_rank_mhd_result_t;
#endif

struct eep_rank_metrics {
    struct MHD_Daemon *daemon;
    pthread_mutex_t    lock;
    char              *text; /* under lock */
    char               url[300];
};

static eep_rank_mhd_result_t eep_rank_metrics_handler(void *cls, struct MHD_Connection *conn,
                                                      const char *url, const char *method,
                                                      const char *version, const char *upload,
                                                      size_t *upload_size, void **con_cls)
{
    eep_rank_metrics_t   *m = cls;
    struct MHD_Response  *resp;
    eep_rank_mhd_result_t ret;
    char                 *copy;
    unsigned              code = MHD_HTTP_OK;

    (void)version;
    (void)upload;
    (void)upload_size;
    (void)con_cls;
    if (strcmp(method, "GET") != 0) {
        copy = strdup("only GET\n");
        code = MHD_HTTP_METHOD_NOT_ALLOWED;
    } else if (strcmp(url, "/metrics") != 0) {
        copy = strdup("see /metrics\n");
        code = MHD_HTTP_NOT_FOUND;
    } else {
        pthread_mutex_lock(&m->lock);
        copy = strdup(m->text != NULL ? m->text : "");
        pthread_mutex_unlock(&m->lock);
    }
    if (copy == NULL) {
        return MHD_NO;
    }
    resp = MHD_create_response_from_buffer(strlen(copy), copy, MHD_RESPMEM_MUST_FREE);
    if (resp == NULL) {
        free(copy);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type",
                            code == MHD_HTTP_OK ? "text/plain; version=0.0.4" : "text/plain");
    ret = MHD_queue_response(conn, code, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* "A.B.C.D:PORT" into @p addr_p; @return 0, or -1 when it is not one. */
static int eep_rank_metrics_parse(const char *text, struct sockaddr_in *addr_p)
{
    const char *colon = strrchr(text, ':');
    char        host[64], *end;
    long        port;

    if (colon == NULL || colon == text || (size_t)(colon - text) >= sizeof(host)) {
        return -1;
    }
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = '\0';
    port               = strtol(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || port < 0 || port > 65535) {
        return -1;
    }
    memset(addr_p, 0, sizeof(*addr_p));
    addr_p->sin_family = AF_INET;
    addr_p->sin_port   = htons((uint16_t)port);
    return inet_pton(AF_INET, host, &addr_p->sin_addr) == 1 ? 0 : -1;
}

eep_status_t eep_rank_metrics_create(const eep_rank_metrics_params_t *params,
                                     eep_rank_metrics_t             **m_p)
{
    eep_rank_config_t           cfg;
    const union MHD_DaemonInfo *info;
    struct sockaddr_in          addr;
    eep_rank_metrics_t         *m;
    const char                 *text;
    char                        host[256];
    eep_status_t                status;

    if (params == NULL || params->size < sizeof(*params) || m_p == NULL) {
        eep_error(EEP_SUBSYS_TOOL, "eep_rank_metrics_create: %s",
                  params == NULL ? "params is NULL"
                  : m_p == NULL  ? "m_p is NULL"
                                 : "params.size is too small");
        return EEP_ERR_INVALID_ARG;
    }
    text = params->addr;
    if (text == NULL) {
        status = eep_config_load(&eep_rank_knob_table, &cfg);
        if (status != EEP_OK) {
            return status;
        }
        text = cfg.metrics_addr;
    }
    if (text[0] == '\0' || strcmp(text, "off") == 0) {
        *m_p = NULL;
        return EEP_OK;
    }
    if (eep_rank_metrics_parse(text, &addr) != 0) {
        eep_error(EEP_SUBSYS_TOOL,
                  "EEP_RANK_METRICS_ADDR '%s' is not IPv4:PORT (127.0.0.1:0, 0.0.0.0:9400, off)",
                  text);
        return EEP_ERR_INVALID_ARG;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&m->lock, NULL);
    m->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG,
                                 ntohs(addr.sin_port), NULL, NULL, eep_rank_metrics_handler, m,
                                 MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_END);
    info = m->daemon != NULL ? MHD_get_daemon_info(m->daemon, MHD_DAEMON_INFO_BIND_PORT) : NULL;
    if (info == NULL || info->port == 0) {
        eep_error(EEP_SUBSYS_TOOL, "cannot serve rank metrics on %s", text);
        eep_rank_metrics_destroy(m);
        return EEP_ERR_IO;
    }
    if (addr.sin_addr.s_addr == htonl(INADDR_ANY)) {
        if (gethostname(host, sizeof(host)) != 0) {
            snprintf(host, sizeof(host), "127.0.0.1");
        }
        host[sizeof(host) - 1] = '\0';
    } else {
        inet_ntop(AF_INET, &addr.sin_addr, host, sizeof(host));
    }
    snprintf(m->url, sizeof(m->url), "http://%s:%u/metrics", host, (unsigned)info->port);
    eep_info(EEP_SUBSYS_TOOL, "rank metrics on %s", m->url);
    *m_p = m;
    return EEP_OK;
}

void eep_rank_metrics_destroy(eep_rank_metrics_t *m)
{
    if (m == NULL) {
        return;
    }
    if (m->daemon != NULL) {
        MHD_stop_daemon(m->daemon);
    }
    pthread_mutex_destroy(&m->lock);
    free(m->text);
    free(m);
}

const char *eep_rank_metrics_url(const eep_rank_metrics_t *m)
{
    return m != NULL ? m->url : "";
}

eep_status_t eep_rank_metrics_publish(eep_rank_metrics_t *m, const eep_rank_stats_t *s)
{
    char        *text = NULL, *old;
    size_t       len  = 0;
    FILE        *f;
    eep_status_t status;

    if (m == NULL) {
        return EEP_OK;
    }
    f = open_memstream(&text, &len);
    if (f == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    status = eep_rank_metrics_render(f, s);
    if (fclose(f) != 0 && status == EEP_OK) {
        status = EEP_ERR_IO;
    }
    if (status != EEP_OK) {
        free(text);
        return status;
    }
    pthread_mutex_lock(&m->lock);
    old     = m->text;
    m->text = text;
    pthread_mutex_unlock(&m->lock);
    free(old);
    return EEP_OK;
}
