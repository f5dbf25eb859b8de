/*
 * http_page.c - small text pages over HTTP (control/tool/http_page.h).
 */
#include "control/tool/http_page.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

#if MHD_VERSION >= 0x00097002
typedef enum MHD_Result eep_http_result_t;
#else
typedef int eep_http_result_t;
#endif

struct eep_http_server {
    struct MHD_Daemon *daemon;
    eep_http_page_fn   fn;
    void              *arg;
};

static eep_http_result_t eep_http_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                          const char *method, const char *version,
                                          const char *upload, size_t *upload_size, void **con_cls)
{
    eep_http_server_t   *srv  = cls;
    eep_http_page_t      page = { NULL, MHD_HTTP_OK, "text/plain" };
    struct MHD_Response *resp;
    eep_http_result_t    ret;

    (void)version;
    (void)upload;
    (void)upload_size;
    (void)con_cls;
    if (strcmp(method, "GET") != 0) {
        page.body = strdup("only GET\n");
        page.code = MHD_HTTP_METHOD_NOT_ALLOWED;
    } else {
        srv->fn(srv->arg, url, &page);
    }
    if (page.body == NULL) {
        return MHD_NO;
    }
    resp = MHD_create_response_from_buffer(strlen(page.body), page.body, MHD_RESPMEM_MUST_FREE);
    if (resp == NULL) {
        free(page.body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type",
                            page.content_type != NULL ? page.content_type : "text/plain");
    ret = MHD_queue_response(conn, page.code, resp);
    MHD_destroy_response(resp);
    return ret;
}

int eep_http_parse_ipv4(const char *text, struct sockaddr_in *addr_p)
{
    const char *colon = text != NULL ? strrchr(text, ':') : NULL;
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

eep_status_t eep_http_start(const struct sockaddr_in *addr, eep_http_page_fn fn, void *arg,
                            const char *what, eep_http_server_t **srv_p, unsigned *port_p)
{
    const union MHD_DaemonInfo *info;
    eep_http_server_t          *srv;
    char                        host[INET_ADDRSTRLEN] = "?";

    if (addr == NULL || fn == NULL || srv_p == NULL) {
        eep_error(EEP_SUBSYS_TOOL, "eep_http_start: %s is NULL",
                  addr == NULL ? "addr"
                  : fn == NULL ? "fn"
                               : "srv_p");
        return EEP_ERR_INVALID_ARG;
    }
    srv = calloc(1, sizeof(*srv));
    if (srv == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    srv->fn     = fn;
    srv->arg    = arg;
    srv->daemon = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, ntohs(addr->sin_port), NULL, NULL,
        eep_http_handler, srv, MHD_OPTION_SOCK_ADDR, (const struct sockaddr *)addr, MHD_OPTION_END);
    info = srv->daemon != NULL ? MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT) : NULL;
    if (info == NULL || info->port == 0) {
        inet_ntop(AF_INET, &addr->sin_addr, host, sizeof(host));
        eep_error(EEP_SUBSYS_TOOL, "cannot serve %s on %s:%u", what != NULL ? what : "pages", host,
                  (unsigned)ntohs(addr->sin_port));
        eep_http_stop(srv);
        return EEP_ERR_IO;
    }
    if (port_p != NULL) {
        *port_p = (unsigned)info->port;
    }
    *srv_p = srv;
    return EEP_OK;
}

void eep_http_stop(eep_http_server_t *srv)
{
    if (srv == NULL) {
        return;
    }
    if (srv->daemon != NULL) {
        MHD_stop_daemon(srv->daemon);
    }
    free(srv);
}
