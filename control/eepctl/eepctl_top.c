/*
 * eepctl_top.c - `eepctl top`: the job at a glance, refreshed: the view's ranks and their state
 * (GetStatus), eepd's counters (its Prometheus /metrics, plain HTTP, when --metrics names it), and
 * each rank's own metrics (the URL its member key publishes as endpoint): step, epoch, dispatch
 * and combine p50, time waited, and the peer it waits for most.
 *
 * What is shown comes from sources behind one small ops table (eepctl_top_source_t), polled in
 * turn each refresh into one snapshot: the status RPC, eepd's metrics page, the ranks' pages
 * (after the status, which names them).  Who waits for whom: each rank's
 * eep_wait_seconds_total{phase,peer} counts, for the view it is in, how long it waited for each
 * peer; summed over the ranks in the current epoch, the largest peer is the rank the job waits
 * for.  On a terminal the screen is redrawn; with --json each refresh is one JSON object per line.
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
#include "control/tool/prom.h"
#include "control/tool/tool.h"
#include "eep/layout.h"

#define EEPCTL_TOP_MAX_METRICS 64
#define EEPCTL_TOP_PAGE_MAX    (1 << 20)
#define EEPCTL_TOP_MAX_PEERS   EEP_MAX_RANKS

/* A rank's scrape waits at most this long per socket call (a dead rank must not stall top). */
#define EEPCTL_TOP_RANK_TIMEOUT_MS 1000

/* What one rank's page said (ok 1), or why there is none. */
typedef struct {
    long        rank;
    const char *id, *url; /* into the status reply */
    int         ok;       /* -1 no URL published, 0 scrape failed, 1 read */
    double      step, epoch, world;
    double      dispatch_p50_us, combine_p50_us; /* negative: no calls yet */
    double      wait_s;                          /* over every phase and peer */
    long        most_peer;                       /* -1: waited for nobody */
    double      most_s;
} eepctl_top_rank_t;

/* What one refresh saw; each source fills its part. */
typedef struct {
    Eep__V1__GetStatusReply *status; /* NULL when the call failed */
    size_t                   n_metrics;
    char                     metric_names[EEPCTL_TOP_MAX_METRICS][96];
    double                   metric_values[EEPCTL_TOP_MAX_METRICS];
    int                      metrics_ok; /* -1 no source, 0 failed, 1 read */
    eepctl_top_rank_t       *ranks;      /* the view's ranks, in rank order */
    size_t                   n_ranks;
    long                     job_most_peer; /* the rank the job waited for most, or -1 */
    double                   job_most_s;
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

/* The rank's wait counters: the total, and the peer it waited for most. */
static void eepctl_top_rank_waits(const eep_prom_page_t *page, eepctl_top_rank_t *r,
                                  double *by_peer, size_t n_peers)
{
    size_t i;
    double mine[EEPCTL_TOP_MAX_PEERS];

    memset(mine, 0, sizeof(mine));
    for (i = 0; i < page->n; i++) {
        const eep_prom_sample_t *x = &page->samples[i];
        char                     peer[16], *end;
        long                     p;

        if (strcmp(x->name, "eep_wait_seconds_total") != 0 || !(x->value > 0) ||
            eep_prom_label(x->labels, "peer", peer, sizeof(peer)) != 0) {
            continue;
        }
        p = strtol(peer, &end, 10);
        if (end == peer || *end != '\0' || p < 0 || p >= EEPCTL_TOP_MAX_PEERS) {
            continue;
        }
        r->wait_s += x->value;
        mine[p] += x->value;
    }
    for (i = 0; i < EEPCTL_TOP_MAX_PEERS; i++) {
        if (mine[i] > r->most_s) {
            r->most_s    = mine[i];
            r->most_peer = (long)i;
        }
        if (by_peer != NULL && i < n_peers) {
            by_peer[i] += mine[i];
        }
    }
}

/*
 * Each rank of the view: its page, at the URL its member key publishes.  Waits are summed over
 * the ranks in the view's epoch only (a peer label is a rank of the view the page's rank is in).
 * A rank without a page is shown as such and fails nothing: in an elastic job a rank may be
 * dying or not started, which is what top is there to show.
 */
static int eepctl_top_poll_ranks(const eepctl_opts_t *o, eepctl_top_snap_t *snap)
{
    const Eep__V1__GetStatusReply *st = snap->status;
    double                        *by_peer;
    size_t                         i, n;
    int timeout = o->timeout_ms < EEPCTL_TOP_RANK_TIMEOUT_MS ? o->timeout_ms
                                                             : EEPCTL_TOP_RANK_TIMEOUT_MS;

    snap->job_most_peer = -1;
    if (st == NULL || st->view == NULL || st->view->n_members == 0) {
        return 0;
    }
    n           = st->view->n_members;
    snap->ranks = calloc(n, sizeof(*snap->ranks));
    by_peer     = calloc(n, sizeof(*by_peer));
    if (snap->ranks == NULL || by_peer == NULL) {
        free(by_peer);
        return 1;
    }
    snap->n_ranks = n;
    for (i = 0; i < n; i++) {
        eepctl_top_rank_t       *r = &snap->ranks[i];
        const Eep__V1__Member   *m = st->view->members[i];
        size_t                   k;
        char                    *page_text;
        eep_prom_page_t          page;
        const eep_prom_sample_t *x;

        r->rank      = (long)i;
        r->id        = m->id;
        r->url       = m->endpoint;
        r->ok        = -1;
        r->most_peer = -1;
        for (k = 0; k < st->n_members; k++) { /* the live member key, newer than the view's copy */
            if (strcmp(st->members[k]->id, m->id) == 0 && st->members[k]->endpoint[0] != '\0') {
                r->url = st->members[k]->endpoint;
            }
        }
        if (r->url == NULL || strncmp(r->url, "http://", 7) != 0) {
            continue;
        }
        r->ok     = 0;
        page_text = eepctl_top_http_get(r->url, timeout);
        if (page_text == NULL || eep_prom_page_parse(page_text, &page) != EEP_OK) {
            free(page_text);
            continue;
        }
        free(page_text);
        r->ok    = 1;
        r->step  = (x = eep_prom_find(&page, "eep_step", NULL, NULL)) != NULL ? x->value : -1;
        r->epoch = (x = eep_prom_find(&page, "eep_epoch", NULL, NULL)) != NULL ? x->value : -1;
        r->world = (x = eep_prom_find(&page, "eep_world", NULL, NULL)) != NULL ? x->value : -1;
        r->dispatch_p50_us = eep_prom_quantile(&page, "eep_dispatch_duration_seconds", 0.5) * 1e6;
        r->combine_p50_us  = eep_prom_quantile(&page, "eep_combine_duration_seconds", 0.5) * 1e6;
        eepctl_top_rank_waits(&page, r, r->epoch == (double)st->view->epoch ? by_peer : NULL, n);
        eep_prom_page_cleanup(&page);
    }
    for (i = 0; i < n; i++) {
        if (by_peer[i] > snap->job_most_s) {
            snap->job_most_s    = by_peer[i];
            snap->job_most_peer = (long)i;
        }
    }
    free(by_peer);
    return 0;
}

/* Polled in this order: the ranks' source reads the status reply. */
static const eepctl_top_source_t eepctl_top_sources[] = {
    { "status", eepctl_top_poll_status },
    { "metrics", eepctl_top_poll_metrics },
    { "ranks", eepctl_top_poll_ranks },
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

/* A number, or null when negative (not measured). */
static void eepctl_top_json_num(const char *key, double v)
{
    if (v < 0) {
        printf(",\"%s\":null", key);
    } else {
        printf(",\"%s\":%.6g", key, v);
    }
}

static void eepctl_top_json_ranks(const eepctl_top_snap_t *s)
{
    size_t i;

    if (s->ranks == NULL) {
        return;
    }
    printf(",\"ranks\":[");
    for (i = 0; i < s->n_ranks; i++) {
        const eepctl_top_rank_t *r = &s->ranks[i];

        printf("%s{\"rank\":%ld,\"id\":", i ? "," : "", r->rank);
        eepctl_json_str(r->id);
        printf(",\"url\":");
        eepctl_json_str(r->url != NULL ? r->url : "");
        printf(",\"ok\":%s", r->ok > 0 ? "true" : "false");
        if (r->ok > 0) {
            eepctl_top_json_num("step", r->step);
            eepctl_top_json_num("epoch", r->epoch);
            eepctl_top_json_num("world", r->world);
            eepctl_top_json_num("dispatch_p50_us", r->dispatch_p50_us);
            eepctl_top_json_num("combine_p50_us", r->combine_p50_us);
            printf(",\"wait_s\":%.6g,\"waits_most_for\":", r->wait_s);
            if (r->most_peer >= 0) {
                printf("{\"rank\":%ld,\"s\":%.6g}", r->most_peer, r->most_s);
            } else {
                printf("null");
            }
        }
        printf("}");
    }
    printf("],\"waited_for_most\":");
    if (s->job_most_peer >= 0) {
        printf("{\"rank\":%ld,\"s\":%.6g}", s->job_most_peer, s->job_most_s);
    } else {
        printf("null");
    }
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
    eepctl_top_json_ranks(s);
    printf("}\n");
}

/* A microsecond column: "-" when not measured. */
static const char *eepctl_top_us(char *buf, size_t len, double us)
{
    if (us < 0) {
        snprintf(buf, len, "-");
    } else {
        snprintf(buf, len, "%.0f", us);
    }
    return buf;
}

static void eepctl_top_screen_ranks(const eepctl_top_snap_t *s)
{
    size_t i;

    if (s->ranks == NULL) {
        return;
    }
    printf("\n%-5s %-10s %-6s %-12s %-12s %-10s %s\n", "RANK", "STEP", "EPOCH", "DISP_P50_US",
           "COMB_P50_US", "WAIT_S", "WAITS MOST FOR");
    for (i = 0; i < s->n_ranks; i++) {
        const eepctl_top_rank_t *r = &s->ranks[i];
        char                     d[24], c[24], most[64] = "-";

        if (r->ok <= 0) {
            printf("%-5ld %s\n", r->rank,
                   r->ok < 0 ? "(no metrics URL in its member key)" : "(metrics unreachable)");
            continue;
        }
        if (r->most_peer >= 0) {
            snprintf(most, sizeof(most), "rank %ld (%.3f s)", r->most_peer, r->most_s);
        }
        printf("%-5ld %-10.0f %-6.0f %-12s %-12s %-10.3f %s\n", r->rank, r->step, r->epoch,
               eepctl_top_us(d, sizeof(d), r->dispatch_p50_us),
               eepctl_top_us(c, sizeof(c), r->combine_p50_us), r->wait_s, most);
    }
    if (s->job_most_peer >= 0) {
        printf("the ranks wait most for: rank %ld (%.3f s)\n", s->job_most_peer, s->job_most_s);
    }
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
    eepctl_top_screen_ranks(s);
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
        free(snap.ranks);
        if (snap.status != NULL) {
            protobuf_c_message_free_unpacked(&snap.status->base, NULL);
        }
        if (o->count == 0 || n + 1 < o->count) {
            nanosleep(&pause, NULL);
        }
    }
    return failed_all ? 1 : 0; /* 1 only when every refresh failed somewhere */
}
