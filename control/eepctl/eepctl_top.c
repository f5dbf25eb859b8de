/*
 * eepctl_top.c - `eepctl top`: the job at a glance, refreshed: the view's ranks and their state
 * (GetStatus), and eepd's counters (its Prometheus /metrics, plain HTTP, when --metrics names it).
 *
 * What is shown comes from sources behind one small ops table (eepctl_top_source_t), polled in
 * turn each refresh into one snapshot: today the status RPC and eepd's metrics page.  Per-rank
 * metrics (a rank's own endpoint, published in its member key) are meant to be one more source
 * with one more column; none exists yet.  On a terminal the screen is redrawn; with --json each
 * refresh is one JSON object per line.
 */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "control/eepctl/eepctl.h"
#include "control/tool/tool.h"

#define EEPCTL_TOP_MAX_METRICS 64
#define EEPCTL_TOP_PAGE_MAX    (1 << 20)

/* What one refresh saw; each source fills its part. */
typedef struct {
    Eep__V1__GetStatusReply *status; /* NULL when the call failed */
    size_t                   n_metrics;
    char                     metric_names[EEPCTL_TOP_MAX_METRICS][96];
    double                   metric_values[EEPCTL_TOP_MAX_METRICS];
    int                      metrics_ok; /* -1 no source, 0 failed, 1 read */
} eepctl_top_snap_t;

typedef struct {
    const char *name;
    /** Fill @p snap; @return 0, or 1 when the source failed (the refresh goes on). */
    int (*poll)(const eepctl_opts_t *o, eepctl_top_snap_t *snap);
} eepctl_top_source_t;

static int eepctl_top_poll_status(const eepctl_opts_t *o, eepctl_top_snap_t *snap)
{
    Eep__V1__GetStatusRequest req   = EEP__V1__GET_STATUS_REQUEST__INIT;
    eepctl_opts_t             quiet = *o;

    quiet.json = 0; /* a failure goes to stderr only: one JSON object per refresh on stdout */
    return eepctl_unary(&quiet, "/eep.v1.EepControl/GetStatus", &req.base,
                        &eep__v1__get_status_reply__descriptor, (ProtobufCMessage **)&snap->status);
}

/* Split http://HOST:PORT/PATH; @return 0 on success. */
static int eepctl_top_parse_url(const char *url, char *host, size_t hlen, char *port, size_t plen,
                                const char **path_p)
{
    const char *h = url, *colon, *slash;

    if (url == NULL || strncmp(url, "http://", 7) != 0) {
        return -1;
    }
    h     = url + 7;
    slash = strchr(h, '/');
    colon = strchr(h, ':');
    if (colon == NULL || slash == NULL || colon > slash || colon == h ||
        (size_t)(colon - h) >= hlen || (size_t)(slash - colon - 1) >= plen || slash == colon + 1) {
        return -1;
    }
    memcpy(host, h, (size_t)(colon - h));
    host[colon - h] = '\0';
    memcpy(port, colon + 1, (size_t)(slash - colon - 1));
    port[slash - colon - 1] = '\0';
    if (strspn(port, "0123456789") != strlen(port)) {
        return -1;
    }
    *path_p = slash;
    return 0;
}

int eepctl_top_check_url(const char *url)
{
    char        host[256], port[16];
    const char *path;

    if (eepctl_top_parse_url(url, host, sizeof(host), port, sizeof(port), &path) != 0) {
        fprintf(stderr,
                "eepctl: --metrics needs http://HOST:PORT/PATH (eepd's "
                "EEP_EEPD_METRICS_ADDR:PORT/metrics), not '%s'\n",
                url);
        return 2;
    }
    return 0;
}

/* GET @p url (HTTP/1.0, bounded by @p timeout_ms per socket call) into a malloc'd body. */
static char *eepctl_top_http_get(const char *url, int timeout_ms)
{
    struct addrinfo hints, *res = NULL;
    struct timeval  tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };
    char            host[256], port[16], req[512], *buf = NULL, *body;
    const char     *path;
    size_t          len = 0;
    ssize_t         n;
    int             fd = -1;

    if (eepctl_top_parse_url(url, host, sizeof(host), port, sizeof(port), &path) != 0) {
        return NULL;
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_family   = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &res) != 0) {
        return NULL;
    }
    fd = socket(res->ai_family, res->ai_socktype, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0 ||
        connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
        goto err;
    }
    snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, host);
    if (write(fd, req, strlen(req)) != (ssize_t)strlen(req)) {
        goto err;
    }
    buf = malloc(EEPCTL_TOP_PAGE_MAX + 1);
    while (buf != NULL && len < EEPCTL_TOP_PAGE_MAX &&
           (n = read(fd, buf + len, EEPCTL_TOP_PAGE_MAX - len)) > 0) {
        len += (size_t)n;
    }
    if (buf == NULL) {
        goto err;
    }
    buf[len] = '\0';
    body     = strstr(buf, "\r\n\r\n");
    if (strncmp(buf, "HTTP/1.", 7) != 0 || strncmp(buf + 8, " 200", 4) != 0 || body == NULL) {
        goto err;
    }
    memmove(buf, body + 4, strlen(body + 4) + 1);
    close(fd);
    freeaddrinfo(res);
    return buf;

err:
    free(buf);
    if (fd >= 0) {
        close(fd);
    }
    freeaddrinfo(res);
    return NULL;
}

/* eepd's /metrics: every "name value" sample line (the text format's comments skipped). */
static int eepctl_top_poll_metrics(const eepctl_opts_t *o, eepctl_top_snap_t *snap)
{
    char *page = eepctl_top_http_get(o->metrics, o->timeout_ms), *line, *save = NULL;

    snap->metrics_ok = 0;
    if (page == NULL) {
        return 1;
    }
    for (line = strtok_r(page, "\n", &save);
         line != NULL && snap->n_metrics < EEPCTL_TOP_MAX_METRICS;
         line = strtok_r(NULL, "\n", &save)) {
        char  *sp = strchr(line, ' '), *end;
        double v;

        if (line[0] == '#' || sp == NULL || (size_t)(sp - line) >= sizeof(snap->metric_names[0])) {
            continue;
        }
        v = strtod(sp + 1, &end);
        if (end == sp + 1) {
            continue;
        }
        memcpy(snap->metric_names[snap->n_metrics], line, (size_t)(sp - line));
        snap->metric_names[snap->n_metrics][sp - line] = '\0';
        snap->metric_values[snap->n_metrics++]         = v;
    }
    free(page);
    snap->metrics_ok = 1;
    return 0;
}

static const eepctl_top_source_t eepctl_top_sources[] = {
    { "status", eepctl_top_poll_status },
    { "metrics", eepctl_top_poll_metrics },
};

/* The state of member @p m: its rank in @p v (or -1) and a word. */
static const char *eepctl_top_state(const Eep__V1__View *v, const Eep__V1__Member *m, long *rank_p)
{
    size_t r;

    *rank_p = -1;
    for (r = 0; v != NULL && r < v->n_members; r++) {
        if (strcmp(v->members[r]->id, m->id) == 0) {
            *rank_p = (long)r;
        }
    }
    return m->leaving     ? "leaving"
           : m->cordoned  ? (*rank_p >= 0 ? "active,cordoned" : "cordoned")
           : *rank_p >= 0 ? "active"
                          : "standby";
}

static void eepctl_top_json(const eepctl_top_snap_t *s, long long t_ms)
{
    const Eep__V1__GetStatusReply *st = s->status;
    size_t                         i;
    long                           rank;

    printf("{\"t_ms\":%lld,\"status_ok\":%s", t_ms, st != NULL ? "true" : "false");
    if (st != NULL) {
        printf(",\"replica\":");
        eepctl_json_str(st->replica);
        printf(",\"leader\":");
        eepctl_json_str(st->leader);
        printf(",\"epoch\":%llu,\"members\":[",
               (unsigned long long)(st->view != NULL ? st->view->epoch : 0));
        for (i = 0; i < st->n_members; i++) {
            const char *state = eepctl_top_state(st->view, st->members[i], &rank);

            printf("%s{\"rank\":%ld,\"id\":", i ? "," : "", rank);
            eepctl_json_str(st->members[i]->id);
            printf(",\"host\":");
            eepctl_json_str(st->members[i]->host);
            printf(",\"state\":\"%s\"}", state);
        }
        printf("]");
    }
    if (s->metrics_ok >= 0) {
        printf(",\"metrics_ok\":%s,\"metrics\":{", s->metrics_ok ? "true" : "false");
        for (i = 0; i < s->n_metrics; i++) {
            printf("%s", i ? "," : "");
            eepctl_json_str(s->metric_names[i]);
            printf(":%.17g", s->metric_values[i]);
        }
        printf("}");
    }
    printf("}\n");
}

static void eepctl_top_screen(const eepctl_opts_t *o, const eepctl_top_snap_t *s, int tty)
{
    const Eep__V1__GetStatusReply *st = s->status;
    size_t                         i;
    long                           rank;

    if (tty) {
        printf("\033[H\033[2J");
    }
    printf("eepctl top  %s  every %d ms\n", o->addr, o->interval_ms);
    if (st == NULL) {
        printf("(GetStatus failed)\n");
    } else {
        printf("replica %s%s  leader %s  epoch %llu  ranks %zu  members %zu\n", st->replica,
               st->is_leader ? " (leader)" : "", st->leader[0] ? st->leader : "(none)",
               (unsigned long long)(st->view != NULL ? st->view->epoch : 0),
               st->view != NULL ? st->view->n_members : 0, st->n_members);
    }
    if (s->metrics_ok == 0) {
        printf("metrics: %s unreachable\n", o->metrics);
    } else if (s->metrics_ok > 0) {
        static const char *const shown[] = { "eepd_views_published_total", "eepd_last_publish_ms",
                                             "eepd_rpc_errors_total", "eepd_etcd_ok",
                                             "eepd_watchers" };
        size_t                   k;

        printf("eepd:");
        for (k = 0; k < sizeof(shown) / sizeof(shown[0]); k++) {
            for (i = 0; i < s->n_metrics; i++) {
                if (strcmp(s->metric_names[i], shown[k]) == 0) {
                    printf("  %s %g", shown[k] + 5, s->metric_values[i]);
                }
            }
        }
        printf("\n");
    }
    printf("\n%-5s %-40s %-20s %s\n", "RANK", "MEMBER", "HOST", "STATE");
    for (i = 0; st != NULL && i < st->n_members; i++) {
        const char *state = eepctl_top_state(st->view, st->members[i], &rank);
        char        r[24] = "-";

        if (rank >= 0) {
            snprintf(r, sizeof(r), "%ld", rank);
        }
        printf("%-5s %-40s %-20.20s %s\n", r, st->members[i]->id, st->members[i]->host, state);
    }
    fflush(stdout);
}

int eepctl_top(const eepctl_opts_t *o)
{
    int  tty = isatty(STDOUT_FILENO) && !o->json, failed_all = 1;
    long n;

    for (n = 0; o->count == 0 || n < o->count; n++) {
        eepctl_top_snap_t snap;
        struct timespec now, pause = { o->interval_ms / 1000, (o->interval_ms % 1000) * 1000000L };
        size_t          i;
        int             bad = 0;

        memset(&snap, 0, sizeof(snap));
        snap.metrics_ok = -1;
        for (i = 0; i < sizeof(eepctl_top_sources) / sizeof(eepctl_top_sources[0]); i++) {
            if (strcmp(eepctl_top_sources[i].name, "metrics") == 0 && o->metrics == NULL) {
                continue;
            }
            bad |= eepctl_top_sources[i].poll(o, &snap);
        }
        failed_all &= bad;
        clock_gettime(CLOCK_REALTIME, &now);
        if (o->json) {
            eepctl_top_json(&snap, (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000);
            fflush(stdout);
        } else {
            eepctl_top_screen(o, &snap, tty);
        }
        if (snap.status != NULL) {
            protobuf_c_message_free_unpacked(&snap.status->base, NULL);
        }
        if (o->count == 0 || n + 1 < o->count) {
            nanosleep(&pause, NULL);
        }
    }
    return failed_all ? 1 : 0; /* 1 only when every refresh failed somewhere */
}
