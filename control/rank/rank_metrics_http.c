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
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control/rank/rank_knobs.h"
#include "control/tool/http_page.h"
#include "util/log.h"

struct eep_rank_metrics {
    eep_http_server_t *http;
    pthread_mutex_t    lock;
    char              *text; /* under lock */
    char               url[300];
};

/* The HTTP thread: a copy of the last text the rank published. */
static void eep_rank_metrics_page(void *arg, const char *url, eep_http_page_t *page)
{
    eep_rank_metrics_t *m = arg;

    if (strcmp(url, "/metrics") != 0) {
        page->body = strdup("see /metrics\n");
        page->code = 404;
        return;
    }
    pthread_mutex_lock(&m->lock);
    page->body = strdup(m->text != NULL ? m->text : "");
    pthread_mutex_unlock(&m->lock);
    page->content_type = "text/plain; version=0.0.4";
}

eep_status_t eep_rank_metrics_create(const eep_rank_metrics_params_t *params,
                                     eep_rank_metrics_t             **m_p)
{
    eep_rank_config_t   cfg;
    struct sockaddr_in  addr;
    eep_rank_metrics_t *m;
    const char         *text;
    char                host[256];
    unsigned            port = 0;
    eep_status_t        status;

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
    if (eep_http_parse_ipv4(text, &addr) != 0) {
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
    status = eep_http_start(&addr, eep_rank_metrics_page, m, "rank metrics", &m->http, &port);
    if (status != EEP_OK) {
        eep_rank_metrics_destroy(m);
        return status;
    }
    if (addr.sin_addr.s_addr == htonl(INADDR_ANY)) {
        if (gethostname(host, sizeof(host)) != 0) {
            snprintf(host, sizeof(host), "127.0.0.1");
        }
        host[sizeof(host) - 1] = '\0';
    } else {
        inet_ntop(AF_INET, &addr.sin_addr, host, sizeof(host));
    }
    snprintf(m->url, sizeof(m->url), "http://%s:%u/metrics", host, port);
    eep_info(EEP_SUBSYS_TOOL, "rank metrics on %s", m->url);
    *m_p = m;
    return EEP_OK;
}

void eep_rank_metrics_destroy(eep_rank_metrics_t *m)
{
    if (m == NULL) {
        return;
    }
    eep_http_stop(m->http);
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
