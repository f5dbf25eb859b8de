/*
 * http_page.h - small text pages over HTTP (libmicrohttpd's own thread), the one server under
 * eepd's /metrics, /healthz and /livez and a rank's /metrics.
 *
 * The owner answers a GET with a page() callback that fills a malloc'd body, a status and a
 * content type; the server does the rest (another method is 405, an empty body a failed request)
 * and never calls page() for anything but GET.  The callback runs on the HTTP thread: it must
 * only copy what the owner prepared under its own lock (both owners render between their calls
 * and the callback copies the last text).
 */
#ifndef EEP_CONTROL_HTTP_PAGE_H
#define EEP_CONTROL_HTTP_PAGE_H

#include <netinet/in.h>

#include "eep/status.h"

typedef struct {
    char       *body;         /* malloc'd (taken by the server); NULL fails the request */
    unsigned    code;         /* HTTP status: 200 unless set */
    const char *content_type; /* "text/plain" unless set */
} eep_http_page_t;

typedef void (*eep_http_page_fn)(void *arg, const char *url, eep_http_page_t *page);

typedef struct eep_http_server eep_http_server_t;

/* "A.B.C.D:PORT" into @p addr_p; @return 0, or -1 when it is not one (port 0: any free one). */
int eep_http_parse_ipv4(const char *text, struct sockaddr_in *addr_p);

/**
 * Serve @p addr with @p fn (and @p arg) on a thread of libmicrohttpd's.  @p port_p (may be NULL)
 * gets the port actually bound (the kernel's choice for port 0).
 * @return EEP_OK; EEP_ERR_IO when the address cannot be served (said in the log, naming @p what);
 *         EEP_ERR_NO_MEMORY.
 */
eep_status_t eep_http_start(const struct sockaddr_in *addr, eep_http_page_fn fn, void *arg,
                            const char *what, eep_http_server_t **srv_p, unsigned *port_p);

/* Stop serving (joins the HTTP thread) and free; NULL is ignored. */
void eep_http_stop(eep_http_server_t *srv);

#endif /* EEP_CONTROL_HTTP_PAGE_H */
