/*
 * etcd.h - an etcd v3 client in C on gRPC's C core (the contract; see etcd.c for the design).
 *
 * Every call takes a deadline; several endpoints are tried in turn (failover); client keepalive
 * pings notice a hung etcd; TLS with client certificates is optional.  Watches and lease
 * keepalives are streams owned by the client, delivered through callbacks on the client's own
 * thread; a watch that loses its stream reconnects and resumes from the revision after the last
 * event it delivered, so no event is lost or repeated.
 */
#ifndef EEP_ETCD_H
#define EEP_ETCD_H

#include <stddef.h>
#include <stdint.h>

#include "eep/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eep_etcd       eep_etcd_t;
typedef struct eep_etcd_watch eep_etcd_watch_t;

typedef struct {
    size_t      size;         /* sizeof(eep_etcd_params_t) */
    const char *endpoints;    /* "127.0.0.1:2379,127.0.0.1:22379" */
    int         timeout_ms;   /* deadline of each call; 0: EEP_ETCD_TIMEOUT_MS */
    int         keepalive_ms; /* client keepalive ping interval; 0: EEP_ETCD_KEEPALIVE_MS */
    const char *ca_file;      /* TLS: NULL for plaintext */
    const char *cert_file;    /* client certificate (mutual TLS), or NULL */
    const char *key_file;
} eep_etcd_params_t;

typedef struct {
    const uint8_t *key;
    size_t         key_len;
    const uint8_t *value;
    size_t         value_len;
    int64_t        create_revision;
    int64_t        mod_revision;
    int64_t        version;
    int64_t        lease;
} eep_etcd_kv_t;

/* A range result; free with eep_etcd_range_free(). */
typedef struct {
    eep_etcd_kv_t *kvs;
    size_t         count;
    int64_t        revision; /* store revision at the time of the read */
    int            more;
} eep_etcd_range_t;

/* One compare of a transaction (etcd's Compare, the subset we use). */
typedef enum {
    EEP_ETCD_CMP_VERSION,
    EEP_ETCD_CMP_CREATE,
    EEP_ETCD_CMP_MOD,
    EEP_ETCD_CMP_VALUE
} eep_etcd_cmp_target_t;
typedef enum {
    EEP_ETCD_EQUAL,
    EEP_ETCD_GREATER,
    EEP_ETCD_LESS,
    EEP_ETCD_NOT_EQUAL
} eep_etcd_cmp_op_t;
typedef struct {
    const char           *key;
    eep_etcd_cmp_target_t target;
    eep_etcd_cmp_op_t     op;
    int64_t               number; /* VERSION, CREATE, MOD */
    const uint8_t        *value;  /* VALUE */
    size_t                value_len;
} eep_etcd_cmp_t;

typedef enum { EEP_ETCD_OP_PUT, EEP_ETCD_OP_DELETE, EEP_ETCD_OP_GET } eep_etcd_op_type_t;
typedef struct {
    eep_etcd_op_type_t type;
    const char        *key;
    const uint8_t     *value; /* PUT */
    size_t             value_len;
    int64_t            lease;  /* PUT: 0 for none */
    int                prefix; /* DELETE/GET: the key is a prefix */
} eep_etcd_op_t;

typedef enum { EEP_ETCD_EVENT_PUT, EEP_ETCD_EVENT_DELETE } eep_etcd_event_type_t;
typedef struct {
    eep_etcd_event_type_t type;
    eep_etcd_kv_t         kv;
} eep_etcd_event_t;

/*
 * Watch callback: a batch of events, in revision order; or, with @p events NULL and @p status not
 * EEP_OK, the watch ended for good (compacted past its revision, cancelled by the server, client
 * destroyed).  Runs on the client's thread: keep it short and do not call back into this client's
 * blocking calls from it (eep_etcd_watch_cancel() is allowed).  @p events and the bytes they point
 * to are valid during the call only; @p revision is etcd's store revision of the batch.
 */
typedef void (*eep_etcd_watch_func_t)(const eep_etcd_event_t *events, size_t count,
                                      int64_t revision, eep_status_t status, void *arg);

/* Lease callback: the lease was lost (etcd says it expired or was revoked, or no keepalive
 * answer came for its TTL and the grace after it). */
typedef void (*eep_etcd_lease_lost_func_t)(int64_t lease, eep_status_t status, void *arg);

/**
 * Create a client.  @p params may be NULL (every setting from the EEP_ETCD_* knobs); its unset
 * fields (NULL, 0) fall back to the knobs too.  No connection is made until the first call.
 */
eep_status_t eep_etcd_create(const eep_etcd_params_t *params, eep_etcd_t **client_p);

/**
 * The job name (EEP_JOB, a knob of this table: agents and eepd read the same one) into @p job.
 * @return EEP_OK, or EEP_ERR_INVALID_ARG (logged) when it is empty, holds '/', is longer than 200
 * bytes or does not fit @p len.
 */
eep_status_t eep_etcd_job_name(char *job, size_t len);
/**
 * Stop every keepalive (no lost callback), end every live watch with EEP_ERR_ABORTED through its
 * callback (on the client's thread; the watch handles are freed then, do not cancel them after),
 * and free the client.  Not from a callback.
 */
void eep_etcd_destroy(eep_etcd_t *client);

/*
 * Unary calls (range, put, delete, txn, lease grant/revoke) run on the caller's thread, bounded
 * by the client's timeout; on UNAVAILABLE or DEADLINE_EXCEEDED they move to the next endpoint
 * until the timeout is spent, then fail with EEP_ERR_CONTROL_UNAVAILABLE.  Writes are therefore
 * at-least-once: the attempt that timed out on a hung member may still be applied, even after the
 * retry and after later writes, when that member wakes up (a put then reappears at a newer
 * revision; a txn's stale copy fails its compare, and a retried txn may report its compare
 * failed although the first attempt applied it).  Where order matters, write with a txn that
 * compares mod_revision, and re-read after a failed compare.  Keys are NUL-terminated strings;
 * key and value bytes returned in
 * eep_etcd_kv_t are followed by a NUL byte that is not counted in their length.
 */

/** Get one key, or with @p prefix every key under it. */
eep_status_t eep_etcd_range(eep_etcd_t *client, const char *key, int prefix,
                            eep_etcd_range_t *result_p);
void         eep_etcd_range_free(eep_etcd_range_t *result);

eep_status_t eep_etcd_put(eep_etcd_t *client, const char *key, const uint8_t *value,
                          size_t value_len, int64_t lease, int64_t *revision_p);
eep_status_t eep_etcd_delete(eep_etcd_t *client, const char *key, int prefix, int64_t *deleted_p);

/**
 * If every compare holds run @p success, else @p failure.  @p succeeded_p says which ran; results
 * of GET ops are not returned (read with eep_etcd_range afterwards).
 */
eep_status_t eep_etcd_txn(eep_etcd_t *client, const eep_etcd_cmp_t *cmps, size_t n_cmps,
                          const eep_etcd_op_t *success, size_t n_success,
                          const eep_etcd_op_t *failure, size_t n_failure, int *succeeded_p,
                          int64_t *revision_p);

/**
 * Grant a lease of @p ttl_s seconds; @p granted_ttl_p is what etcd actually granted (callers must
 * check it: etcd may raise it to its minimum).
 */
eep_status_t eep_etcd_lease_grant(eep_etcd_t *client, int64_t ttl_s, int64_t *lease_p,
                                  int64_t *granted_ttl_p);
/**
 * Keep @p lease alive on the client's thread (a KeepAlive stream) until revoked or lost.  Returns
 * after etcd's first reply: EEP_ERR_LEASE_LOST if the lease does not exist (any more),
 * EEP_ERR_EXISTS if this client already keeps it alive.  Afterwards a request goes out every
 * TTL/3; one unanswered for TTL/12 is retried on the next endpoint at once.  @p lost runs once
 * with EEP_ERR_LEASE_LOST (and the keepalive stops) when etcd says the lease is gone, or when no
 * answer came for the TTL after the last answered request - plus EEP_ETCD_LEASE_GRACE_MS (one
 * more TTL by default) if a member held a request on a connected channel meanwhile: an etcd
 * raft election answers nothing for a while and then extends every lease (see
 * eep_etcd_lease_deadline for what one TTL without an answer does end).
 */
eep_status_t eep_etcd_lease_keepalive(eep_etcd_t *client, int64_t lease,
                                      eep_etcd_lease_lost_func_t lost, void *arg);
/**
 * Until when etcd is known to keep @p lease: one TTL (as etcd last granted it) after the send
 * time of the last keepalive etcd answered, on the monotonic clock of eep_clock_ms().  Past it the
 * lease is unconfirmed: it may have expired (or etcd may be electing a leader and keep it), and
 * callers that act on the lease's authority (a rank on a view) must wait for a fresh answer or
 * the lost callback.
 * @return EEP_OK, or EEP_ERR_NOT_FOUND if this client keeps no such lease alive.
 */
eep_status_t eep_etcd_lease_deadline(eep_etcd_t *client, int64_t lease, int64_t *deadline_ms_p);

/** Stop the lease's keepalive (no lost callback) and revoke it: its keys are deleted. */
eep_status_t eep_etcd_lease_revoke(eep_etcd_t *client, int64_t lease);

/**
 * Watch @p key (or the prefix) from @p start_revision (0: from now).  Returns once etcd confirmed
 * the watch (or the timeout passed: EEP_ERR_CONTROL_UNAVAILABLE).  A revision already compacted
 * gives EEP_ERR_ETCD, here or (etcd acknowledges the watch first) through the callback just
 * after.  After eep_etcd_watch_cancel() returns no callback runs for the watch.
 */
eep_status_t eep_etcd_watch_create(eep_etcd_t *client, const char *key, int prefix,
                                   int64_t start_revision, eep_etcd_watch_func_t func, void *arg,
                                   eep_etcd_watch_t **watch_p);
void         eep_etcd_watch_cancel(eep_etcd_watch_t *watch);

/* Counters of one client since its creation (to report etcd round trips per operation). */
typedef struct {
    uint64_t round_trips; /* unary request/response exchanges, failover retries included */
    uint64_t failovers;   /* unary attempts that moved on to another endpoint */
    uint64_t ranges;      /* successful calls, by kind */
    uint64_t puts;
    uint64_t deletes;
    uint64_t txns;
    uint64_t lease_grants;
    uint64_t lease_revokes;
    uint64_t watch_streams;   /* Watch streams opened (creations and reconnections) */
    uint64_t watch_events;    /* events delivered to callbacks */
    uint64_t keepalives_sent; /* LeaseKeepAlive requests sent */
    uint64_t keepalive_replies;
    uint64_t leases_lost;
} eep_etcd_stats_t;

/** Copy the client's counters into @p stats_p. */
void eep_etcd_stats(eep_etcd_t *client, eep_etcd_stats_t *stats_p);

#ifdef __cplusplus
}
#endif

#endif /* EEP_ETCD_H */
