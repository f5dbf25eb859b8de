/*
 * etcd.c - an etcd v3 client in C on gRPC's C core: lifecycle, failover, unary calls (the KV calls: etcd_kv.c).
 *
 * Design: one gRPC channel per endpoint, created up front and connecting lazily.  Unary calls run
 * on the caller's thread (rpc_client.c, a pluck queue per call) and fail over: they start at the
 * endpoint that answered last and, on UNAVAILABLE or DEADLINE_EXCEEDED, move to the next one,
 * round after round with a short pause, until the call's one deadline is spent.  Streams (watches,
 * lease keepalives: etcd_watch.c, etcd_lease.c) belong to one client thread, which drains a
 * shared completion queue, runs the timers (every EEP_ETCD_POLL_MS) and the user callbacks; see
 * etcd_int.h for the locking.
 */
#include "control/etcd/etcd_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/log.h"

static void *eep_etcd_thread_main(void *arg);

/* ---- helpers ---------------------------------------------------------------------------- */

eep_status_t eep_etcd_prefix_end(const uint8_t *key, size_t len, uint8_t **end_p, size_t *end_len_p)
{
    uint8_t *end;
    size_t   n = len;

    while (n > 0 && key[n - 1] == 0xff) {
        n--;
    }
    if (n == 0) { /* every key >= key */
        end = malloc(1);
        if (end == NULL) {
            return EEP_ERR_NO_MEMORY;
        }
        end[0]     = 0;
        *end_p     = end;
        *end_len_p = 1;
        return EEP_OK;
    }
    end = malloc(n);
    if (end == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    memcpy(end, key, n);
    end[n - 1]++;
    *end_p     = end;
    *end_len_p = n;
    return EEP_OK;
}

int eep_etcd_wait_flag(eep_etcd_t *client, const int *flag, int64_t deadline_ms)
{
    while (!*flag) {
        int64_t         left = deadline_ms - eep_rpc_now_ms();
        struct timespec ts;

        if (left <= 0) {
            break;
        }
        if (left > EEP_ETCD_POLL_MS) {
            left = EEP_ETCD_POLL_MS;
        }
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)(left % 1000) * 1000000L;
        ts.tv_sec += (time_t)(left / 1000) + ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&client->cond, &client->lock, &ts);
    }
    return *flag;
}

/* ---- owners of streams ------------------------------------------------------------------ */

eep_status_t eep_etcd_owner_connect(eep_etcd_owner_t *owner, const char *method,
                                    const ProtobufCMessageDescriptor *response_desc)
{
    eep_etcd_t  *client = owner->client;
    eep_status_t status;

    status = eep_rpc_stream_create(client->channels[owner->endpoint], client->cq, method,
                                   response_desc, owner, &owner->stream);
    if (status != EEP_OK) {
        owner->stream = NULL;
        eep_etcd_owner_schedule(owner);
    }
    return status;
}

void eep_etcd_owner_schedule(eep_etcd_owner_t *owner)
{
    eep_etcd_t *client = owner->client;

    owner->endpoint    = (owner->endpoint + 1) % client->n_endpoints;
    owner->retry_at_ms = eep_rpc_now_ms() + owner->backoff_ms;
    owner->backoff_ms *= 2;
    if (owner->backoff_ms > EEP_ETCD_BACKOFF_MAX_MS) {
        owner->backoff_ms = EEP_ETCD_BACKOFF_MAX_MS;
    }
}

void eep_etcd_dispatch_begin(eep_etcd_t *client, eep_etcd_owner_t *owner)
{
    client->dispatching = owner;
    pthread_mutex_unlock(&client->lock);
}

void eep_etcd_dispatch_end(eep_etcd_t *client)
{
    pthread_mutex_lock(&client->lock);
    client->dispatching = NULL;
    pthread_cond_broadcast(&client->cond);
}

void eep_etcd_owner_cancel(eep_etcd_owner_t *owner)
{
    eep_etcd_t *client = owner->client;

    owner->cancelled = 1;
    if (!pthread_equal(pthread_self(), client->thread)) {
        while (client->dispatching == owner) {
            pthread_cond_wait(&client->cond, &client->lock);
        }
    }
    eep_rpc_stream_cancel(owner->stream);
}

/* ---- lifecycle -------------------------------------------------------------------------- */

static eep_status_t eep_etcd_split_endpoints(eep_etcd_t *client, const char *list)
{
    const char *p = list;
    size_t      n = 1, i = 0;

    for (p = list; *p != '\0'; p++) {
        n += (*p == ',');
    }
    client->endpoints = calloc(n, sizeof(char *));
    if (client->endpoints == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    p = list;
    while (*p != '\0') {
        const char *end = strchr(p, ',');
        size_t      len = end != NULL ? (size_t)(end - p) : strlen(p);

        while (len > 0 && (*p == ' ' || *p == '\t')) {
            p++;
            len--;
        }
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t')) {
            len--;
        }
        if (len > 0) {
            client->endpoints[i] = strndup(p, len);
            if (client->endpoints[i] == NULL) {
                return EEP_ERR_NO_MEMORY;
            }
            i++;
        }
        if (end == NULL) {
            break;
        }
        p = end + 1;
    }
    client->n_endpoints = i;
    if (i == 0) {
        eep_error(EEP_SUBSYS_ETCD, "no etcd endpoint in \"%s\"", list);
        return EEP_ERR_INVALID_ARG;
    }
    return EEP_OK;
}

static const char *eep_etcd_pick(const char *param, const char *knob)
{
    return (param != NULL && param[0] != '\0') ? param : (knob[0] != '\0' ? knob : NULL);
}

static void eep_etcd_free(eep_etcd_t *client)
{
    size_t i;

    if (client->channels != NULL) {
        for (i = 0; i < client->n_endpoints; i++) {
            eep_rpc_channel_destroy(client->channels[i]);
        }
        free(client->channels);
    }
    if (client->endpoints != NULL) {
        for (i = 0; i < client->n_endpoints; i++) {
            free(client->endpoints[i]);
        }
        free(client->endpoints);
    }
    pthread_cond_destroy(&client->cond);
    pthread_mutex_destroy(&client->lock);
    free(client);
}

eep_status_t eep_etcd_job_name(char *job, size_t len)
{
    eep_etcd_config_t cfg;
    eep_status_t      status;

    status = eep_config_load(&eep_etcd_knob_table, &cfg);
    if (status != EEP_OK) {
        return status;
    }
    if (cfg.job[0] == '\0' || strchr(cfg.job, '/') != NULL || strlen(cfg.job) > 200 ||
        strlen(cfg.job) >= len) {
        eep_error(EEP_SUBSYS_ETCD,
                  "EEP_JOB '%.64s' must be a non-empty name of at most 200 bytes "
                  "without '/'",
                  cfg.job);
        return EEP_ERR_INVALID_ARG;
    }
    snprintf(job, len, "%s", cfg.job);
    return EEP_OK;
}

eep_status_t eep_etcd_create(const eep_etcd_params_t *params, eep_etcd_t **client_p)
{
    const eep_etcd_params_t  none = { .size = sizeof(none) }; /* params NULL: every knob */
    const eep_etcd_params_t *in   = params != NULL ? params : &none;
    const char              *endpoints;
    eep_rpc_channel_params_t chp;
    eep_etcd_config_t        cfg;
    eep_etcd_t              *client;
    pthread_condattr_t       cattr;
    eep_status_t             status;
    size_t                   i;
    int                      ret;

    if (client_p == NULL) {
        eep_error(EEP_SUBSYS_ETCD, "eep_etcd_create: client_p is NULL");
        return EEP_ERR_INVALID_ARG;
    }
    if (params != NULL && params->size < sizeof(*params)) {
        eep_error(EEP_SUBSYS_ETCD,
                  "eep_etcd_create: params->size is %zu, expected %zu (set it "
                  "to sizeof(eep_etcd_params_t))",
                  params->size, sizeof(*params));
        return EEP_ERR_INVALID_ARG;
    }
    status = eep_config_load(&eep_etcd_knob_table, &cfg);
    if (status != EEP_OK) {
        return status;
    }
    client = calloc(1, sizeof(*client));
    if (client == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&client->lock, NULL);
    pthread_condattr_init(&cattr);
    pthread_cond_init(&client->cond, &cattr);
    pthread_condattr_destroy(&cattr);
    client->timeout_ms     = in->timeout_ms > 0 ? in->timeout_ms : (int)cfg.timeout_ms;
    client->keepalive_ms   = in->keepalive_ms > 0 ? in->keepalive_ms : (int)cfg.keepalive_ms;
    client->lease_grace_ms = cfg.lease_grace_ms;
    endpoints              = eep_etcd_pick(in->endpoints, cfg.endpoints);
    status                 = eep_etcd_split_endpoints(client, endpoints != NULL ? endpoints : "");
    if (status != EEP_OK) {
        goto err_free;
    }
    client->channels = calloc(client->n_endpoints, sizeof(grpc_channel *));
    if (client->channels == NULL) {
        status = EEP_ERR_NO_MEMORY;
        goto err_free;
    }

    eep_rpc_init();
    memset(&chp, 0, sizeof(chp));
    chp.size                 = sizeof(chp);
    chp.keepalive_ms         = client->keepalive_ms;
    chp.keepalive_timeout_ms = client->keepalive_ms;
    chp.reconnect_max_ms     = 1000;
    chp.ca_file              = eep_etcd_pick(in->ca_file, cfg.ca_file);
    chp.cert_file            = eep_etcd_pick(in->cert_file, cfg.cert_file);
    chp.key_file             = eep_etcd_pick(in->key_file, cfg.key_file);
    for (i = 0; i < client->n_endpoints; i++) {
        chp.target = client->endpoints[i];
        status     = eep_rpc_channel_create(&chp, &client->channels[i]);
        if (status != EEP_OK) {
            goto err_grpc;
        }
    }
    client->cq = grpc_completion_queue_create_for_next(NULL);
    ret        = pthread_create(&client->thread, NULL, eep_etcd_thread_main, client);
    if (ret != 0) {
        status = eep_status_from_errno(ret, "pthread_create(etcd client)");
        goto err_cq;
    }
    eep_info(EEP_SUBSYS_ETCD, "etcd client for %zu endpoint(s), first %s, timeout %d ms",
             client->n_endpoints, client->endpoints[0], client->timeout_ms);
    *client_p = client;
    return EEP_OK;

err_cq:
    grpc_completion_queue_shutdown(client->cq);
    grpc_completion_queue_destroy(client->cq);
err_grpc:
    for (i = 0; i < client->n_endpoints; i++) {
        eep_rpc_channel_destroy(client->channels[i]);
        client->channels[i] = NULL;
    }
    eep_rpc_shutdown();
err_free:
    eep_etcd_free(client);
    return status;
}

void eep_etcd_destroy(eep_etcd_t *client)
{
    if (client == NULL) {
        return;
    }
    if (pthread_equal(pthread_self(), client->thread)) {
        eep_error(EEP_SUBSYS_ETCD, "eep_etcd_destroy called from an etcd callback; not destroyed");
        return;
    }
    pthread_mutex_lock(&client->lock);
    client->stopping = 1;
    pthread_mutex_unlock(&client->lock);
    pthread_join(client->thread, NULL);
    grpc_completion_queue_destroy(client->cq);
    eep_etcd_free(client);
    eep_rpc_shutdown();
}

void eep_etcd_stats(eep_etcd_t *client, eep_etcd_stats_t *stats_p)
{
    uint64_t       *dst = (uint64_t *)stats_p;
    const uint64_t *src;
    size_t          i;

    if (client == NULL || stats_p == NULL) {
        return;
    }
    src = (const uint64_t *)&client->stats;
    for (i = 0; i < sizeof(*stats_p) / sizeof(uint64_t); i++) {
        dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
    }
}

/* ---- the client thread ------------------------------------------------------------------ */

static void eep_etcd_on_completion(grpc_event *ev)
{
    eep_rpc_stream_event_t event;
    eep_rpc_stream_t      *stream;
    eep_etcd_owner_t      *owner;

    eep_rpc_stream_event(ev->tag, ev->success, &stream, &event);
    owner = eep_rpc_stream_owner(stream);
    if (owner->kind == EEP_ETCD_OWNER_WATCH) {
        struct eep_etcd_watch *watch = (struct eep_etcd_watch *)owner;

        if (event.message != NULL) {
            eep_etcd_watch_on_message(watch, (Etcdserverpb__WatchResponse *)event.message);
            protobuf_c_message_free_unpacked(event.message, NULL);
        }
        if (event.closed) {
            eep_rpc_stream_destroy(stream);
            owner->stream = NULL;
            eep_etcd_watch_on_closed(watch, &event.result);
        }
    } else {
        eep_etcd_keepalive_t *ka = (eep_etcd_keepalive_t *)owner;

        if (event.sent) {
            eep_etcd_keepalive_on_sent(ka);
        }
        if (event.message != NULL) {
            eep_etcd_keepalive_on_message(ka,
                                          (Etcdserverpb__LeaseKeepAliveResponse *)event.message);
            protobuf_c_message_free_unpacked(event.message, NULL);
        }
        if (event.closed) {
            eep_rpc_stream_destroy(stream);
            owner->stream = NULL;
            eep_etcd_keepalive_on_closed(ka, &event.result);
        }
    }
}

/* Timers, then free what is cancelled and has no stream.  @return the number of owners left. */
static size_t eep_etcd_tick(eep_etcd_t *client)
{
    eep_etcd_owner_t **pp, *owner;
    int64_t            now  = eep_rpc_now_ms();
    size_t             left = 0;

    for (owner = client->owners; owner != NULL; owner = owner->next) {
        if (client->stopping && !owner->cancelled) {
            if (owner->kind == EEP_ETCD_OWNER_WATCH) {
                eep_etcd_watch_abort((struct eep_etcd_watch *)owner);
            }
            owner->cancelled = 1;
            eep_rpc_stream_cancel(owner->stream);
        }
        if (owner->cancelled) {
            continue;
        }
        if (owner->kind == EEP_ETCD_OWNER_WATCH) {
            eep_etcd_watch_timer((struct eep_etcd_watch *)owner, now);
        } else {
            eep_etcd_keepalive_timer((eep_etcd_keepalive_t *)owner, now);
        }
    }
    pp = &client->owners;
    while ((owner = *pp) != NULL) {
        if (owner->cancelled && owner->stream == NULL) {
            *pp = owner->next;
            if (owner->kind == EEP_ETCD_OWNER_WATCH) {
                eep_etcd_watch_free((struct eep_etcd_watch *)owner);
            } else {
                free(owner);
            }
            continue;
        }
        left++;
        pp = &owner->next;
    }
    return left;
}

static void *eep_etcd_thread_main(void *arg)
{
    eep_etcd_t *client = arg;
    int         shut   = 0;

    for (;;) {
        grpc_event ev = grpc_completion_queue_next(client->cq,
                                                   eep_rpc_deadline_ms(EEP_ETCD_POLL_MS), NULL);

        if (ev.type == GRPC_QUEUE_SHUTDOWN) {
            break;
        }
        pthread_mutex_lock(&client->lock);
        if (ev.type == GRPC_OP_COMPLETE) {
            eep_etcd_on_completion(&ev);
        }
        if (eep_etcd_tick(client) == 0 && client->stopping && !shut) {
            /* No stream is left, so nothing more will be posted: drain and leave. */
            grpc_completion_queue_shutdown(client->cq);
            shut = 1;
        }
        pthread_mutex_unlock(&client->lock);
    }
    return NULL;
}

/* ---- unary calls with failover ---------------------------------------------------------- */

eep_status_t eep_etcd_unary(eep_etcd_t *client, const char *method, const char *what,
                            const ProtobufCMessage           *request,
                            const ProtobufCMessageDescriptor *response_desc,
                            ProtobufCMessage                **response_p)
{
    eep_rpc_result_t result   = { GRPC_STATUS_UNKNOWN, "" };
    eep_status_t     status   = EEP_ERR_CONTROL_UNAVAILABLE;
    int64_t          deadline = eep_rpc_now_ms() + client->timeout_ms;
    size_t           n        = client->n_endpoints;
    size_t           start    = __atomic_load_n(&client->preferred, __ATOMIC_RELAXED);
    size_t           attempt;
    int              pause_ms = 20;

    for (attempt = 0;; attempt++) {
        size_t  idx  = (start + attempt) % n;
        int64_t left = deadline - eep_rpc_now_ms();
        int64_t budget;

        if (left <= 0) {
            break;
        }
        /* Several endpoints share what is left, so one hung member cannot eat it all. */
        budget = left;
        if (n > 1) {
            int64_t share = left / (int64_t)(n - attempt % n);

            budget = share > 1000 ? share : (left < 1000 ? left : 1000);
        }
        status = eep_rpc_unary(client->channels[idx], method, request, response_desc,
                               eep_rpc_deadline_ms(budget), response_p, &result);
        EEP_ETCD_STAT_INC(client, round_trips);
        if (status == EEP_OK) {
            __atomic_store_n(&client->preferred, idx, __ATOMIC_RELAXED);
            return EEP_OK;
        }
        if (result.code != GRPC_STATUS_UNAVAILABLE &&
            result.code != GRPC_STATUS_DEADLINE_EXCEEDED) {
            return eep_status_from_grpc(result.code, result.details, what);
        }
        eep_debug(EEP_SUBSYS_ETCD, "%s: endpoint %s: %s: %s", what, client->endpoints[idx],
                  eep_rpc_code_name(result.code), result.details);
        EEP_ETCD_STAT_INC(client, failovers);
        if ((attempt + 1) % n == 0) {
            /* A whole round failed: pause a little (bounded by the deadline) before the next. */
            int64_t         wait = deadline - eep_rpc_now_ms();
            struct timespec ts;

            if (wait > pause_ms) {
                wait = pause_ms;
            }
            if (wait > 0) {
                ts.tv_sec  = wait / 1000;
                ts.tv_nsec = (wait % 1000) * 1000000L;
                nanosleep(&ts, NULL);
            }
            pause_ms = pause_ms * 2 > 500 ? 500 : pause_ms * 2;
        }
    }
    eep_error(EEP_SUBSYS_ETCD,
              "%s: no etcd endpoint answered within %d ms (%zu endpoint(s), "
              "first %s)",
              what, client->timeout_ms, n, client->endpoints[start % n]);
    return eep_status_from_grpc(result.code == GRPC_STATUS_UNKNOWN ? GRPC_STATUS_DEADLINE_EXCEEDED
                                                                   : result.code,
                                result.details, what);
}

/* ---- KV --------------------------------------------------------------------------------- */
