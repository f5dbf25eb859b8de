/*
 * etcd_watch.c - watches: one Watch stream per watch, resumed after any stream failure.
 *
 * A watch remembers the revision after the last event it delivered (next_revision).  When its
 * stream fails it reconnects, with a bounded doubling backoff, through the next endpoint and asks
 * etcd for events from next_revision on, so events are neither lost nor repeated (events below
 * next_revision are dropped as well, should etcd ever send one).  Progress notifications move
 * next_revision forward while nothing happens, so a resume does not replay old history.  A watch
 * whose revision was compacted, or that etcd cancels, ends for good with an error.  One stream per
 * watch keeps watch ids out of the picture; a rank has one or two watches.
 */
#include "control/etcd/etcd_int.h"

#include <stdlib.h>
#include <string.h>

#include "util/log.h"

#define EEP_ETCD_WATCH_METHOD "/etcdserverpb.Watch/Watch"

static void eep_etcd_watch_send_create(struct eep_etcd_watch *watch)
{
    Etcdserverpb__WatchRequest       req    = ETCDSERVERPB__WATCH_REQUEST__INIT;
    Etcdserverpb__WatchCreateRequest create = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
    eep_status_t                     status;

    create.key.data        = watch->key;
    create.key.len         = watch->key_len;
    create.range_end.data  = watch->range_end;
    create.range_end.len   = watch->range_end_len;
    create.start_revision  = watch->next_revision;
    create.progress_notify = 1;
    req.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    req.create_request     = &create;
    status                 = eep_rpc_stream_send(watch->owner.stream, &req.base);
    if (status != EEP_OK) {
        eep_warn(EEP_SUBSYS_ETCD, "watch %.*s: cannot send its create request (%s)",
                 (int)watch->key_len, (const char *)watch->key, eep_status_string(status));
        eep_rpc_stream_cancel(watch->owner.stream);
    }
}

/* (Re)open the stream on the watch's endpoint and ask for events from next_revision. */
static void eep_etcd_watch_connect(struct eep_etcd_watch *watch)
{
    eep_etcd_t *client = watch->owner.client;

    EEP_ETCD_STAT_INC(client, watch_streams);
    if (eep_etcd_owner_connect(&watch->owner, EEP_ETCD_WATCH_METHOD,
                               &etcdserverpb__watch_response__descriptor) == EEP_OK) {
        eep_etcd_watch_send_create(watch);
    }
}

/* The watch ends for good (lock held): tell the creator, or the callback. */
static void eep_etcd_watch_end(struct eep_etcd_watch *watch, eep_status_t status, int64_t rev)
{
    eep_etcd_t *client = watch->owner.client;

    watch->ended = 1;
    eep_rpc_stream_cancel(watch->owner.stream);
    if (!watch->create_done) {
        watch->create_done   = 1;
        watch->create_status = status;
        pthread_cond_broadcast(&client->cond);
        return;
    }
    if (watch->owner.cancelled) {
        return;
    }
    eep_etcd_dispatch_begin(client, &watch->owner);
    watch->func(NULL, 0, rev, status, watch->arg);
    eep_etcd_dispatch_end(client);
}

void eep_etcd_watch_abort(struct eep_etcd_watch *watch)
{
    if (!watch->ended) {
        eep_etcd_watch_end(watch, EEP_ERR_ABORTED, watch->next_revision - 1);
    }
}

void eep_etcd_watch_on_message(struct eep_etcd_watch *watch, Etcdserverpb__WatchResponse *msg)
{
    eep_etcd_t       *client = watch->owner.client;
    int64_t           rev    = msg->header != NULL ? msg->header->revision : 0;
    eep_etcd_event_t *events;
    size_t            i, n = 0;

    if (watch->owner.cancelled || watch->ended) {
        return;
    }
    if (msg->canceled || msg->compact_revision > 0) {
        if (msg->compact_revision > 0) {
            eep_error(EEP_SUBSYS_ETCD,
                      "watch %.*s: revision %lld is compacted (oldest kept "
                      "%lld); the watch ends",
                      (int)watch->key_len, (const char *)watch->key,
                      (long long)watch->next_revision, (long long)msg->compact_revision);
        } else {
            eep_error(EEP_SUBSYS_ETCD, "watch %.*s: cancelled by etcd: %s", (int)watch->key_len,
                      (const char *)watch->key,
                      msg->cancel_reason != NULL && msg->cancel_reason[0] != '\0'
                          ? msg->cancel_reason
                          : "(no reason)");
        }
        eep_etcd_watch_end(watch, EEP_ERR_ETCD, rev);
        return;
    }
    if (msg->created) {
        watch->owner.backoff_ms = EEP_ETCD_BACKOFF_MIN_MS;
        if (watch->next_revision == 0) {
            watch->next_revision = rev + 1; /* "from now": everything after this revision */
        }
        if (!watch->create_done) {
            watch->create_done   = 1;
            watch->create_status = EEP_OK;
            pthread_cond_broadcast(&client->cond);
        }
    }
    if (msg->n_events == 0) {
        /* A progress notification: every event up to rev has been sent. */
        if (!msg->created && rev + 1 > watch->next_revision) {
            watch->next_revision = rev + 1;
        }
        return;
    }
    events = calloc(msg->n_events, sizeof(*events));
    if (events == NULL) {
        eep_error(EEP_SUBSYS_ETCD, "watch %.*s: no memory for %zu events; reconnecting",
                  (int)watch->key_len, (const char *)watch->key, msg->n_events);
        eep_rpc_stream_cancel(watch->owner.stream);
        return;
    }
    for (i = 0; i < msg->n_events; i++) {
        const Mvccpb__Event    *ev = msg->events[i];
        const Mvccpb__KeyValue *kv = ev->kv;

        if (kv == NULL || kv->mod_revision < watch->next_revision) {
            continue; /* already delivered before a reconnection */
        }
        events[n].type       = ev->type == MVCCPB__EVENT__EVENT_TYPE__DELETE ? EEP_ETCD_EVENT_DELETE
                                                                             : EEP_ETCD_EVENT_PUT;
        events[n].kv.key     = kv->key.data;
        events[n].kv.key_len = kv->key.len;
        events[n].kv.value   = kv->value.data;
        events[n].kv.value_len       = kv->value.len;
        events[n].kv.create_revision = kv->create_revision;
        events[n].kv.mod_revision    = kv->mod_revision;
        events[n].kv.version         = kv->version;
        events[n].kv.lease           = kv->lease;
        n++;
    }
    if (n > 0) {
        watch->next_revision = events[n - 1].kv.mod_revision + 1;
        __atomic_add_fetch(&client->stats.watch_events, n, __ATOMIC_RELAXED);
        eep_etcd_dispatch_begin(client, &watch->owner);
        watch->func(events, n, rev, EEP_OK, watch->arg);
        eep_etcd_dispatch_end(client);
    }
    free(events);
}

void eep_etcd_watch_on_closed(struct eep_etcd_watch *watch, const eep_rpc_result_t *result)
{
    if (watch->owner.cancelled || watch->ended) {
        return; /* reaped by the next tick */
    }
    eep_etcd_owner_schedule(&watch->owner);
    eep_warn(EEP_SUBSYS_ETCD,
             "watch %.*s lost its stream (%s: %s); resuming from revision %lld "
             "through %s in %d ms",
             (int)watch->key_len, (const char *)watch->key, eep_rpc_code_name(result->code),
             result->details, (long long)watch->next_revision,
             watch->owner.client->endpoints[watch->owner.endpoint],
             (int)(watch->owner.retry_at_ms - eep_rpc_now_ms()));
}

void eep_etcd_watch_timer(struct eep_etcd_watch *watch, int64_t now_ms)
{
    if (!watch->ended && watch->owner.stream == NULL && now_ms >= watch->owner.retry_at_ms) {
        eep_etcd_watch_connect(watch);
    }
}

void eep_etcd_watch_free(struct eep_etcd_watch *watch)
{
    free(watch->range_end);
    free(watch->key);
    free(watch);
}

eep_status_t eep_etcd_watch_create(eep_etcd_t *client, const char *key, int prefix,
                                   int64_t start_revision, eep_etcd_watch_func_t func, void *arg,
                                   eep_etcd_watch_t **watch_p)
{
    struct eep_etcd_watch *watch;
    eep_status_t           status;
    size_t                 len;

    if (client == NULL || key == NULL || func == NULL || watch_p == NULL) {
        eep_error(EEP_SUBSYS_ETCD, "etcd watch: %s is NULL",
                  client == NULL ? "client"
                  : key == NULL  ? "key"
                  : func == NULL ? "func"
                                 : "watch_p");
        return EEP_ERR_INVALID_ARG;
    }
    if (key[0] == '\0' && !prefix) {
        eep_error(EEP_SUBSYS_ETCD, "etcd watch: key is empty");
        return EEP_ERR_INVALID_ARG;
    }
    if (start_revision < 0) {
        eep_error(EEP_SUBSYS_ETCD, "etcd watch %s: start_revision %lld is negative", key,
                  (long long)start_revision);
        return EEP_ERR_INVALID_ARG;
    }
    watch = calloc(1, sizeof(*watch));
    if (watch == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    len        = strlen(key);
    watch->key = malloc(len + 1);
    if (watch->key == NULL) {
        free(watch);
        return EEP_ERR_NO_MEMORY;
    }
    memcpy(watch->key, key, len + 1);
    watch->key_len = len;
    if (len == 0) { /* everything: key "\0", range end "\0" */
        watch->key_len = 1;
    }
    if (prefix) {
        status = eep_etcd_prefix_end((const uint8_t *)key, len, &watch->range_end,
                                     &watch->range_end_len);
        if (status != EEP_OK) {
            eep_etcd_watch_free(watch);
            return status;
        }
    }
    watch->owner.kind       = EEP_ETCD_OWNER_WATCH;
    watch->owner.client     = client;
    watch->owner.backoff_ms = EEP_ETCD_BACKOFF_MIN_MS;
    watch->next_revision    = start_revision;
    watch->func             = func;
    watch->arg              = arg;

    pthread_mutex_lock(&client->lock);
    if (client->stopping) {
        pthread_mutex_unlock(&client->lock);
        eep_etcd_watch_free(watch);
        eep_error(EEP_SUBSYS_ETCD, "etcd watch %s: the client is being destroyed", key);
        return EEP_ERR_ABORTED;
    }
    watch->owner.endpoint = __atomic_load_n(&client->preferred, __ATOMIC_RELAXED);
    watch->owner.next     = client->owners;
    client->owners        = &watch->owner;
    eep_etcd_watch_connect(watch);
    if (!eep_etcd_wait_flag(client, &watch->create_done, eep_rpc_now_ms() + client->timeout_ms)) {
        eep_error(EEP_SUBSYS_ETCD, "etcd watch %s: no etcd endpoint confirmed it within %d ms", key,
                  client->timeout_ms);
        status = EEP_ERR_CONTROL_UNAVAILABLE;
    } else {
        status = watch->create_status;
    }
    if (status != EEP_OK) {
        eep_etcd_owner_cancel(&watch->owner); /* the client thread frees it */
        pthread_mutex_unlock(&client->lock);
        return status;
    }
    pthread_mutex_unlock(&client->lock);
    eep_debug(EEP_SUBSYS_ETCD, "watching %s%s from revision %lld", key, prefix ? "*" : "",
              (long long)watch->next_revision);
    *watch_p = (eep_etcd_watch_t *)watch;
    return EEP_OK;
}

void eep_etcd_watch_cancel(eep_etcd_watch_t *handle)
{
    struct eep_etcd_watch *watch = (struct eep_etcd_watch *)handle;
    eep_etcd_t            *client;

    if (watch == NULL) {
        return;
    }
    client = watch->owner.client;
    pthread_mutex_lock(&client->lock);
    eep_etcd_owner_cancel(&watch->owner);
    pthread_mutex_unlock(&client->lock);
}
