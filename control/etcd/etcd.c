/*
 * etcd.c - an etcd v3 client in C on gRPC's C core: lifecycle, failover, the KV calls.
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

/* A key for a request: empty only with a prefix (then "\0", the start of the key space). */
static eep_status_t eep_etcd_key(const char *key, int prefix, const char *what,
                                 ProtobufCBinaryData *out)
{
    static uint8_t zero = 0;

    if (key == NULL) {
        eep_error(EEP_SUBSYS_ETCD, "%s: key is NULL", what);
        return EEP_ERR_INVALID_ARG;
    }
    if (key[0] == '\0' && !prefix) {
        eep_error(EEP_SUBSYS_ETCD, "%s: key is empty", what);
        return EEP_ERR_INVALID_ARG;
    }
    if (key[0] == '\0') {
        out->data = &zero;
        out->len  = 1;
    } else {
        out->data = (uint8_t *)key;
        out->len  = strlen(key);
    }
    return EEP_OK;
}

static eep_status_t eep_etcd_range_end(const char *key, int prefix, ProtobufCBinaryData *out)
{
    if (!prefix) {
        out->data = NULL;
        out->len  = 0;
        return EEP_OK;
    }
    return eep_etcd_prefix_end((const uint8_t *)key, strlen(key), &out->data, &out->len);
}

static eep_status_t eep_etcd_check_client(const eep_etcd_t *client, const char *what)
{
    if (client == NULL) {
        eep_error(EEP_SUBSYS_ETCD, "%s: client is NULL", what);
        return EEP_ERR_INVALID_ARG;
    }
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

/* One Range call: @p limit keys at most (0: all) at store revision @p revision (0: newest). */
static eep_status_t eep_etcd_range_page(eep_etcd_t *client, ProtobufCBinaryData key,
                                        ProtobufCBinaryData end, int64_t limit, int64_t revision,
                                        Etcdserverpb__RangeResponse **resp_p)
{
    Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;

    req.key       = key;
    req.range_end = end;
    req.limit     = limit;
    req.revision  = revision;
    return eep_etcd_unary(client, "/etcdserverpb.KV/Range", "etcd range", &req.base,
                          &etcdserverpb__range_response__descriptor, (ProtobufCMessage **)resp_p);
}

/*
 * A prefix is read in pages of at most EEP_ETCD_RANGE_PAGE keys, all at the first page's store
 * revision (one consistent snapshot), so a large prefix never meets gRPC's 4 MiB message limit
 * (issue 25 #9: 1300 members and 100 kept views once made a restarted eepd blind); a page that
 * still exceeds it (values near etcd's 1.5 MiB request limit) is asked again at half the size.
 */
eep_status_t eep_etcd_range(eep_etcd_t *client, const char *key, int prefix,
                            eep_etcd_range_t *result_p)
{
    Etcdserverpb__RangeResponse **resps = NULL, **grown, *resp = NULL;
    ProtobufCBinaryData           first = { 0, NULL }, end = { 0, NULL }, next = { 0, NULL };
    eep_etcd_range_t              result;
    eep_status_t                  status;
    size_t                        i, j, bytes, n_resps = 0, n_kvs = 0, k;
    int64_t                       limit = prefix ? EEP_ETCD_RANGE_PAGE : 0, revision = 0;
    uint8_t                      *data;

    status = eep_etcd_check_client(client, "etcd range");
    if (status != EEP_OK) {
        return status;
    }
    if (result_p == NULL) {
        eep_error(EEP_SUBSYS_ETCD, "etcd range: result_p is NULL");
        return EEP_ERR_INVALID_ARG;
    }
    status = eep_etcd_key(key, prefix, "etcd range", &first);
    if (status != EEP_OK) {
        return status;
    }
    status = eep_etcd_range_end(key, prefix, &end);
    if (status != EEP_OK) {
        return status;
    }
    for (;;) {
        status = eep_etcd_range_page(client, next.data != NULL ? next : first, end, limit, revision,
                                     &resp);
        if (status == EEP_ERR_RPC && limit > 1) {
            limit /= 2; /* RESOURCE_EXHAUSTED: a page over the message limit */
            continue;
        }
        if (status != EEP_OK) {
            goto out;
        }
        grown = realloc(resps, (n_resps + 1) * sizeof(*resps));
        if (grown == NULL) {
            protobuf_c_message_free_unpacked(&resp->base, NULL);
            status = EEP_ERR_NO_MEMORY;
            goto out;
        }
        resps            = grown;
        resps[n_resps++] = resp;
        n_kvs += resp->n_kvs;
        if (revision == 0 && resp->header != NULL) {
            revision = resp->header->revision;
        }
        if (!prefix || !resp->more || resp->n_kvs == 0) {
            break;
        }
        /* The next page starts just after the last key: the key followed by a NUL byte. */
        free(next.data);
        next.len  = resp->kvs[resp->n_kvs - 1]->key.len + 1;
        next.data = malloc(next.len);
        if (next.data == NULL) {
            status = EEP_ERR_NO_MEMORY;
            goto out;
        }
        memcpy(next.data, resp->kvs[resp->n_kvs - 1]->key.data, next.len - 1);
        next.data[next.len - 1] = 0;
    }
    /* One block: the kv array, then every key and value, each followed by a NUL. */
    bytes = n_kvs * sizeof(eep_etcd_kv_t);
    for (j = 0; j < n_resps; j++) {
        for (i = 0; i < resps[j]->n_kvs; i++) {
            bytes += resps[j]->kvs[i]->key.len + resps[j]->kvs[i]->value.len + 2;
        }
    }
    memset(&result, 0, sizeof(result));
    if (n_kvs > 0) {
        result.kvs = malloc(bytes);
        if (result.kvs == NULL) {
            status = EEP_ERR_NO_MEMORY;
            goto out;
        }
        data = (uint8_t *)(result.kvs + n_kvs);
        k    = 0;
        for (j = 0; j < n_resps; j++) {
            for (i = 0; i < resps[j]->n_kvs; i++) {
                const Mvccpb__KeyValue *kv  = resps[j]->kvs[i];
                eep_etcd_kv_t          *out = &result.kvs[k++];

                memcpy(data, kv->key.data, kv->key.len);
                data[kv->key.len] = 0;
                out->key          = data;
                out->key_len      = kv->key.len;
                data += kv->key.len + 1;
                if (kv->value.len > 0) {
                    memcpy(data, kv->value.data, kv->value.len);
                }
                data[kv->value.len] = 0;
                out->value          = data;
                out->value_len      = kv->value.len;
                data += kv->value.len + 1;
                out->create_revision = kv->create_revision;
                out->mod_revision    = kv->mod_revision;
                out->version         = kv->version;
                out->lease           = kv->lease;
            }
        }
    }
    result.count    = n_kvs;
    result.revision = revision;
    result.more     = n_resps > 0 && !prefix && resps[n_resps - 1]->more;
    EEP_ETCD_STAT_INC(client, ranges);
    *result_p = result;
    status    = EEP_OK;
out:
    for (j = 0; j < n_resps; j++) {
        protobuf_c_message_free_unpacked(&resps[j]->base, NULL);
    }
    free(resps);
    free(next.data);
    free(end.data);
    return status;
}

void eep_etcd_range_free(eep_etcd_range_t *result)
{
    if (result != NULL) {
        free(result->kvs);
        result->kvs   = NULL;
        result->count = 0;
    }
}

eep_status_t eep_etcd_put(eep_etcd_t *client, const char *key, const uint8_t *value,
                          size_t value_len, int64_t lease, int64_t *revision_p)
{
    Etcdserverpb__PutRequest   req  = ETCDSERVERPB__PUT_REQUEST__INIT;
    Etcdserverpb__PutResponse *resp = NULL;
    eep_status_t               status;

    status = eep_etcd_check_client(client, "etcd put");
    if (status != EEP_OK) {
        return status;
    }
    status = eep_etcd_key(key, 0, "etcd put", &req.key);
    if (status != EEP_OK) {
        return status;
    }
    if (value == NULL && value_len > 0) {
        eep_error(EEP_SUBSYS_ETCD, "etcd put %s: value is NULL with value_len %zu", key, value_len);
        return EEP_ERR_INVALID_ARG;
    }
    if (lease < 0) {
        eep_error(EEP_SUBSYS_ETCD, "etcd put %s: lease %lld is negative", key, (long long)lease);
        return EEP_ERR_INVALID_ARG;
    }
    req.value.data = (uint8_t *)value;
    req.value.len  = value_len;
    req.lease      = lease;

    status = eep_etcd_unary(client, "/etcdserverpb.KV/Put", "etcd put", &req.base,
                            &etcdserverpb__put_response__descriptor, (ProtobufCMessage **)&resp);
    if (status != EEP_OK) {
        return status;
    }
    if (revision_p != NULL) {
        *revision_p = resp->header != NULL ? resp->header->revision : 0;
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    EEP_ETCD_STAT_INC(client, puts);
    return EEP_OK;
}

eep_status_t eep_etcd_delete(eep_etcd_t *client, const char *key, int prefix, int64_t *deleted_p)
{
    Etcdserverpb__DeleteRangeRequest   req  = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    Etcdserverpb__DeleteRangeResponse *resp = NULL;
    eep_status_t                       status;

    status = eep_etcd_check_client(client, "etcd delete");
    if (status != EEP_OK) {
        return status;
    }
    status = eep_etcd_key(key, prefix, "etcd delete", &req.key);
    if (status != EEP_OK) {
        return status;
    }
    status = eep_etcd_range_end(key, prefix, &req.range_end);
    if (status != EEP_OK) {
        return status;
    }
    status = eep_etcd_unary(client, "/etcdserverpb.KV/DeleteRange", "etcd delete", &req.base,
                            &etcdserverpb__delete_range_response__descriptor,
                            (ProtobufCMessage **)&resp);
    free(req.range_end.data);
    if (status != EEP_OK) {
        return status;
    }
    if (deleted_p != NULL) {
        *deleted_p = resp->deleted;
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    EEP_ETCD_STAT_INC(client, deletes);
    return EEP_OK;
}

/* ---- Txn -------------------------------------------------------------------------------- */

/* Storage for the request messages of one txn, freed in one go. */
typedef struct {
    Etcdserverpb__Compare            *cmps;
    Etcdserverpb__Compare           **cmp_ptrs;
    Etcdserverpb__RequestOp          *ops;
    Etcdserverpb__RequestOp         **op_ptrs;
    Etcdserverpb__PutRequest         *puts;
    Etcdserverpb__DeleteRangeRequest *dels;
    Etcdserverpb__RangeRequest       *gets;
    ProtobufCBinaryData              *ends; /* one per op, malloc'd range ends */
    size_t                            n_ops;
} eep_etcd_txn_msgs_t;

static void eep_etcd_txn_msgs_free(eep_etcd_txn_msgs_t *m)
{
    size_t i;

    if (m->ends != NULL) {
        for (i = 0; i < m->n_ops; i++) {
            free(m->ends[i].data);
        }
    }
    free(m->ends);
    free(m->gets);
    free(m->dels);
    free(m->puts);
    free(m->op_ptrs);
    free(m->ops);
    free(m->cmp_ptrs);
    free(m->cmps);
}

static eep_status_t eep_etcd_txn_op(eep_etcd_txn_msgs_t *m, size_t i, const eep_etcd_op_t *op)
{
    Etcdserverpb__RequestOp *rop = &m->ops[i];
    eep_status_t             status;

    etcdserverpb__request_op__init(rop);
    m->op_ptrs[i] = rop;
    switch (op->type) {
    case EEP_ETCD_OP_PUT:
        etcdserverpb__put_request__init(&m->puts[i]);
        status = eep_etcd_key(op->key, 0, "etcd txn put", &m->puts[i].key);
        if (status != EEP_OK) {
            return status;
        }
        if (op->value == NULL && op->value_len > 0) {
            eep_error(EEP_SUBSYS_ETCD, "etcd txn put %s: value is NULL", op->key);
            return EEP_ERR_INVALID_ARG;
        }
        m->puts[i].value.data = (uint8_t *)op->value;
        m->puts[i].value.len  = op->value_len;
        m->puts[i].lease      = op->lease;
        rop->request_case     = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
        rop->request_put      = &m->puts[i];
        return EEP_OK;
    case EEP_ETCD_OP_DELETE:
        etcdserverpb__delete_range_request__init(&m->dels[i]);
        status = eep_etcd_key(op->key, op->prefix, "etcd txn delete", &m->dels[i].key);
        if (status == EEP_OK) {
            status = eep_etcd_range_end(op->key, op->prefix, &m->ends[i]);
        }
        m->dels[i].range_end      = m->ends[i];
        rop->request_case         = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
        rop->request_delete_range = &m->dels[i];
        return status;
    case EEP_ETCD_OP_GET:
        etcdserverpb__range_request__init(&m->gets[i]);
        status = eep_etcd_key(op->key, op->prefix, "etcd txn get", &m->gets[i].key);
        if (status == EEP_OK) {
            status = eep_etcd_range_end(op->key, op->prefix, &m->ends[i]);
        }
        m->gets[i].range_end = m->ends[i];
        rop->request_case    = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
        rop->request_range   = &m->gets[i];
        return status;
    default:
        eep_error(EEP_SUBSYS_ETCD, "etcd txn: op %zu has unknown type %d", i, (int)op->type);
        return EEP_ERR_INVALID_ARG;
    }
}

static eep_status_t eep_etcd_txn_cmp(Etcdserverpb__Compare *c, const eep_etcd_cmp_t *cmp, size_t i)
{
    eep_status_t status;

    etcdserverpb__compare__init(c);
    status = eep_etcd_key(cmp->key, 0, "etcd txn compare", &c->key);
    if (status != EEP_OK) {
        return status;
    }
    switch (cmp->op) {
    case EEP_ETCD_EQUAL:
        c->result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
        break;
    case EEP_ETCD_GREATER:
        c->result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__GREATER;
        break;
    case EEP_ETCD_LESS:
        c->result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__LESS;
        break;
    case EEP_ETCD_NOT_EQUAL:
        c->result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__NOT_EQUAL;
        break;
    default:
        eep_error(EEP_SUBSYS_ETCD, "etcd txn: compare %zu has unknown op %d", i, (int)cmp->op);
        return EEP_ERR_INVALID_ARG;
    }
    switch (cmp->target) {
    case EEP_ETCD_CMP_VERSION:
        c->target            = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VERSION;
        c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VERSION;
        c->version           = cmp->number;
        break;
    case EEP_ETCD_CMP_CREATE:
        c->target            = ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE;
        c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION;
        c->create_revision   = cmp->number;
        break;
    case EEP_ETCD_CMP_MOD:
        c->target            = ETCDSERVERPB__COMPARE__COMPARE_TARGET__MOD;
        c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_MOD_REVISION;
        c->mod_revision      = cmp->number;
        break;
    case EEP_ETCD_CMP_VALUE:
        if (cmp->value == NULL && cmp->value_len > 0) {
            eep_error(EEP_SUBSYS_ETCD, "etcd txn: compare %zu: value is NULL", i);
            return EEP_ERR_INVALID_ARG;
        }
        c->target            = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VALUE;
        c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VALUE;
        c->value.data        = (uint8_t *)cmp->value;
        c->value.len         = cmp->value_len;
        break;
    default:
        eep_error(EEP_SUBSYS_ETCD, "etcd txn: compare %zu has unknown target %d", i,
                  (int)cmp->target);
        return EEP_ERR_INVALID_ARG;
    }
    return EEP_OK;
}

eep_status_t eep_etcd_txn(eep_etcd_t *client, const eep_etcd_cmp_t *cmps, size_t n_cmps,
                          const eep_etcd_op_t *success, size_t n_success,
                          const eep_etcd_op_t *failure, size_t n_failure, int *succeeded_p,
                          int64_t *revision_p)
{
    Etcdserverpb__TxnRequest   req  = ETCDSERVERPB__TXN_REQUEST__INIT;
    Etcdserverpb__TxnResponse *resp = NULL;
    eep_etcd_txn_msgs_t        m;
    eep_status_t               status;
    size_t                     i, n_ops = n_success + n_failure;

    memset(&m, 0, sizeof(m));
    status = eep_etcd_check_client(client, "etcd txn");
    if (status != EEP_OK) {
        return status;
    }
    if ((cmps == NULL && n_cmps > 0) || (success == NULL && n_success > 0) ||
        (failure == NULL && n_failure > 0)) {
        eep_error(EEP_SUBSYS_ETCD, "etcd txn: cmps, success or failure is NULL with a count");
        return EEP_ERR_INVALID_ARG;
    }
    m.n_ops    = n_ops;
    m.cmps     = calloc(n_cmps + 1, sizeof(*m.cmps));
    m.cmp_ptrs = calloc(n_cmps + 1, sizeof(*m.cmp_ptrs));
    m.ops      = calloc(n_ops + 1, sizeof(*m.ops));
    m.op_ptrs  = calloc(n_ops + 1, sizeof(*m.op_ptrs));
    m.puts     = calloc(n_ops + 1, sizeof(*m.puts));
    m.dels     = calloc(n_ops + 1, sizeof(*m.dels));
    m.gets     = calloc(n_ops + 1, sizeof(*m.gets));
    m.ends     = calloc(n_ops + 1, sizeof(*m.ends));
    if (m.cmps == NULL || m.cmp_ptrs == NULL || m.ops == NULL || m.op_ptrs == NULL ||
        m.puts == NULL || m.dels == NULL || m.gets == NULL || m.ends == NULL) {
        status = EEP_ERR_NO_MEMORY;
        goto out;
    }
    for (i = 0; i < n_cmps; i++) {
        status = eep_etcd_txn_cmp(&m.cmps[i], &cmps[i], i);
        if (status != EEP_OK) {
            goto out;
        }
        m.cmp_ptrs[i] = &m.cmps[i];
    }
    for (i = 0; i < n_ops; i++) {
        status = eep_etcd_txn_op(&m, i, i < n_success ? &success[i] : &failure[i - n_success]);
        if (status != EEP_OK) {
            goto out;
        }
    }
    req.n_compare = n_cmps;
    req.compare   = m.cmp_ptrs;
    req.n_success = n_success;
    req.success   = m.op_ptrs;
    req.n_failure = n_failure;
    req.failure   = m.op_ptrs + n_success;

    status = eep_etcd_unary(client, "/etcdserverpb.KV/Txn", "etcd txn", &req.base,
                            &etcdserverpb__txn_response__descriptor, (ProtobufCMessage **)&resp);
    if (status != EEP_OK) {
        goto out;
    }
    if (succeeded_p != NULL) {
        *succeeded_p = resp->succeeded ? 1 : 0;
    }
    if (revision_p != NULL) {
        *revision_p = resp->header != NULL ? resp->header->revision : 0;
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    EEP_ETCD_STAT_INC(client, txns);
out:
    eep_etcd_txn_msgs_free(&m);
    return status;
}
