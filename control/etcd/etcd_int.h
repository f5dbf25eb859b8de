/*
 * etcd_int.h - the etcd client's internals shared by etcd.c, etcd_watch.c and etcd_lease.c.
 *
 * Locking: one mutex per client guards the list of stream owners (watches and keepalives) and
 * all their fields.  The client thread holds it except while it waits on the completion queue and
 * while it runs a user callback (then client->dispatching names whose callback runs, so that a
 * cancel from another thread can wait for it to return).  Only the client thread frees stream
 * owners ("reaping"), once they are cancelled and their stream is gone.
 */
#ifndef EEP_ETCD_INT_H
#define EEP_ETCD_INT_H

#include <pthread.h>
#include <stdint.h>

#include "control/etcd/etcd.h"
#include "control/etcd/etcd_knobs.h"
#include "control/rpc/rpc_client.h"
#include "proto/etcd/rpc.pb-c.h"

#define EEP_ETCD_POLL_MS        50  /* the client thread's timer granularity */
#define EEP_ETCD_BACKOFF_MIN_MS 100 /* stream reconnect backoff, doubled up to the max */
#define EEP_ETCD_BACKOFF_MAX_MS 2000
#define EEP_ETCD_MAX_LEASES     64  /* granted TTLs remembered for keepalives */
#define EEP_ETCD_RANGE_PAGE     256 /* keys per page of a prefix read */

typedef enum { EEP_ETCD_OWNER_WATCH, EEP_ETCD_OWNER_KEEPALIVE } eep_etcd_owner_kind_t;

/* The common head of a watch and a keepalive: something that owns a stream. */
typedef struct eep_etcd_owner {
    eep_etcd_owner_kind_t  kind;
    eep_etcd_t            *client;
    eep_rpc_stream_t      *stream;   /* NULL while waiting to (re)connect */
    size_t                 endpoint; /* index of the endpoint the stream uses */
    int64_t                retry_at_ms;
    int                    backoff_ms;
    int                    cancelled; /* no more callbacks; reaped once stream is NULL */
    struct eep_etcd_owner *next;
} eep_etcd_owner_t;

struct eep_etcd_watch {
    eep_etcd_owner_t      owner; /* first: a stream's owner pointer is this */
    uint8_t              *key;
    size_t                key_len;
    uint8_t              *range_end;
    size_t                range_end_len;
    int64_t               next_revision; /* resume point: 0 until known ("from now") */
    int                   create_done;   /* the creator may return */
    eep_status_t          create_status;
    int                   ended; /* ended for good: no reconnection */
    eep_etcd_watch_func_t func;
    void                 *arg;
};

typedef struct {
    eep_etcd_owner_t           owner;
    int64_t                    lease;
    int64_t                    ttl_s;      /* 0 until known */
    int64_t                    last_ok_ms; /* send time of the last answered request (or grant) */
    int64_t                    sent_at_ms; /* send time of the request awaiting its reply, or 0 */
    int64_t                    next_send_ms;
    int                        first_done;
    eep_status_t               first_status;
    int                        ended;    /* lost before its first reply: the creator cancels */
    size_t                     failures; /* attempts that failed since the last answer */
    int                        held; /* since the last answer a member took a request, no answer */
    eep_etcd_lease_lost_func_t lost;
    void                      *arg;
} eep_etcd_keepalive_t;

struct eep_etcd {
    int                    timeout_ms;
    int                    keepalive_ms;
    int64_t                lease_grace_ms; /* 0: one TTL */
    char                 **endpoints;
    size_t                 n_endpoints;
    grpc_channel         **channels;
    size_t                 preferred; /* the endpoint that answered last (atomic) */
    pthread_mutex_t        lock;
    pthread_cond_t         cond; /* creations waiting for etcd, cancels for callbacks */
    pthread_t              thread;
    grpc_completion_queue *cq;
    eep_etcd_owner_t      *owners;
    eep_etcd_owner_t      *dispatching; /* whose callback runs now, lock released */
    int                    stopping;
    int64_t                lease_ids[EEP_ETCD_MAX_LEASES];
    int64_t                lease_ttls[EEP_ETCD_MAX_LEASES];
    size_t                 lease_next;
    eep_etcd_stats_t       stats; /* updated with atomic adds */
};

#define EEP_ETCD_STAT_INC(_client, _field)                                                         \
    __atomic_add_fetch(&(_client)->stats._field, 1, __ATOMIC_RELAXED)

/* etcd.c */
eep_status_t eep_etcd_unary(eep_etcd_t *client, const char *method, const char *what,
                            const ProtobufCMessage           *request,
                            const ProtobufCMessageDescriptor *response_desc,
                            ProtobufCMessage                **response_p);
/* The end of the range [key, end) holding every key that starts with key ("\0" for all). */
eep_status_t eep_etcd_prefix_end(const uint8_t *key, size_t len, uint8_t **end_p,
                                 size_t *end_len_p);
/* Start the owner's stream on its endpoint (lock held); on failure schedule a retry. */
eep_status_t eep_etcd_owner_connect(eep_etcd_owner_t *owner, const char *method,
                                    const ProtobufCMessageDescriptor *response_desc);
/* Its stream closed: move to the next endpoint and schedule a reconnection (lock held). */
void eep_etcd_owner_schedule(eep_etcd_owner_t *owner);
/* Run a callback with the lock released (lock held on entry and on return). */
void eep_etcd_dispatch_begin(eep_etcd_t *client, eep_etcd_owner_t *owner);
void eep_etcd_dispatch_end(eep_etcd_t *client);
/* Mark cancelled, wait for its running callback (unless on the client thread), cancel stream. */
void eep_etcd_owner_cancel(eep_etcd_owner_t *owner);
/* Wait (lock held) until *flag or the absolute deadline; @return non-zero if *flag. */
int eep_etcd_wait_flag(eep_etcd_t *client, const int *flag, int64_t deadline_ms);

/* etcd_watch.c */
void eep_etcd_watch_on_message(struct eep_etcd_watch *watch, Etcdserverpb__WatchResponse *msg);
void eep_etcd_watch_on_closed(struct eep_etcd_watch *watch, const eep_rpc_result_t *result);
void eep_etcd_watch_timer(struct eep_etcd_watch *watch, int64_t now_ms);
void eep_etcd_watch_abort(struct eep_etcd_watch *watch);
void eep_etcd_watch_free(struct eep_etcd_watch *watch);

/* etcd_lease.c */
void eep_etcd_keepalive_on_message(eep_etcd_keepalive_t                 *ka,
                                   Etcdserverpb__LeaseKeepAliveResponse *msg);
void eep_etcd_keepalive_on_closed(eep_etcd_keepalive_t *ka, const eep_rpc_result_t *result);
void eep_etcd_keepalive_on_sent(eep_etcd_keepalive_t *ka);
void eep_etcd_keepalive_timer(eep_etcd_keepalive_t *ka, int64_t now_ms);

#endif /* EEP_ETCD_INT_H */
