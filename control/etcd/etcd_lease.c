/*
 * etcd_lease.c - leases: grant, revoke, and keepalive over one LeaseKeepAlive stream per lease.
 *
 * The rule (issue 25 #3: a keepalive rides over an etcd raft election):
 * - CONFIRMED until one TTL (the TTL of etcd's last answer, the grant's before the first) after
 *   the SEND time of the last keepalive etcd answered: the leader refreshed the lease no
 *   earlier than that send, so etcd keeps it at least so long (the arrival time would be later
 *   than the refresh by the answer's way back, through a follower in etcd 3.4: not a bound).
 *   eep_etcd_lease_deadline() reports this; past it callers hold what the lease backs.
 * - LOST when etcd says so (an answer with TTL <= 0), or when no answer came for the TTL plus
 *   a grace (EEP_ETCD_LEASE_GRACE_MS, by default one more TTL) - the grace only if since the
 *   last answer some member held a request on a connected channel (etcd is up but answers
 *   nothing: it is electing a raft leader, or it hangs).  While etcd elects, the followers
 *   hold keepalives, and the new leader then extends every lease by TTL + its election timeout
 *   (etcd's lessor Promote), so a lease whose confirmed time ran out during an election is
 *   still etcd's; with etcd's default 1 s election timeout the followers elect after 1-2 s,
 *   more than TTL - TTL/3 for a 2 s TTL.  When no member even accepts a connection (etcd is
 *   down), the lease is lost one TTL after its last answer as before: a restarted etcd restores
 *   leases, and the agent must register anew then (issue 25 #2).
 * - a keepalive goes out every TTL/3 after the last answer, at most one awaiting its reply; one
 *   unanswered for TTL/12 (at least 150 ms: a hung member, a follower holding it while it has
 *   no leader) or a failed stream is retried AT ONCE on the next endpoint; only after every
 *   endpoint failed since the last answer is there a pause (the stream backoff, at most one
 *   attempt's time), so some keepalive is in flight for nearly all of the unanswered time.
 */
#include "control/etcd/etcd_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

#define EEP_ETCD_KEEPALIVE_METHOD "/etcdserverpb.Lease/LeaseKeepAlive"

static int64_t eep_etcd_ka_period_ms(const eep_etcd_keepalive_t *ka)
{
    int64_t period = ka->ttl_s * 1000 / 3;

    return period > 100 ? period : 100;
}

/* How long a keepalive may wait for its answer before it is retried on the next endpoint: a
 * twelfth of the TTL (a quarter interval), at least 150 ms, at most the call timeout.  Short on
 * purpose: during a raft election a follower holds a keepalive it forwarded to the lost leader,
 * while one sent after it saw the new leader is answered, so several tries must fit in what is
 * left of the TTL after the first unanswered one. */
static int64_t eep_etcd_ka_attempt_ms(const eep_etcd_keepalive_t *ka)
{
    int64_t attempt = ka->ttl_s * 1000 / 12;

    if (attempt > ka->owner.client->timeout_ms) {
        attempt = ka->owner.client->timeout_ms;
    }
    return attempt > 150 ? attempt : 150;
}

/* How long past the confirmed time a keepalive goes on trying with no answer: the grace while
 * a member holds its requests (up, not answering), none while etcd refuses connections. */
static int64_t eep_etcd_ka_grace_ms(const eep_etcd_keepalive_t *ka)
{
    int64_t grace = ka->owner.client->lease_grace_ms;

    if (!ka->held) {
        return 0;
    }
    return grace > 0 ? grace : ka->ttl_s * 1000;
}

/* The lease is gone (lock held): tell the creator, or the callback, once; then let go of it. */
static void eep_etcd_ka_lost(eep_etcd_keepalive_t *ka, const char *why)
{
    eep_etcd_t *client = ka->owner.client;

    if (ka->owner.cancelled || ka->ended) {
        return;
    }
    eep_rpc_stream_cancel(ka->owner.stream);
    if (!ka->first_done) {
        /* The creator is waiting and still uses it: it cancels it, the thread frees it. */
        ka->ended        = 1;
        ka->first_done   = 1;
        ka->first_status = EEP_ERR_LEASE_LOST;
        pthread_cond_broadcast(&client->cond);
        eep_warn(EEP_SUBSYS_ETCD, "lease %llx: %s", (unsigned long long)ka->lease, why);
        return;
    }
    ka->owner.cancelled = 1;
    EEP_ETCD_STAT_INC(client, leases_lost);
    eep_error(EEP_SUBSYS_ETCD, "lease %llx lost: %s", (unsigned long long)ka->lease, why);
    if (ka->lost != NULL) {
        eep_etcd_dispatch_begin(client, &ka->owner);
        ka->lost(ka->lease, EEP_ERR_LEASE_LOST, ka->arg);
        eep_etcd_dispatch_end(client);
    }
}

void eep_etcd_keepalive_on_sent(eep_etcd_keepalive_t *ka)
{
    (void)ka; /* one request at a time is enforced by sent_at_ms, not by the send */
}

void eep_etcd_keepalive_on_message(eep_etcd_keepalive_t                 *ka,
                                   Etcdserverpb__LeaseKeepAliveResponse *msg)
{
    eep_etcd_t *client = ka->owner.client;
    int64_t     now    = eep_rpc_now_ms();

    if (ka->owner.cancelled || ka->ended) {
        return;
    }
    EEP_ETCD_STAT_INC(client, keepalive_replies);
    if (msg->ttl <= 0) {
        eep_etcd_ka_lost(ka, "etcd says it expired or was revoked (TTL <= 0)");
        return;
    }
    /* Confirmed from the send of the answered request, for the TTL etcd gave in the answer
     * (the lease's granted TTL, what the leader refreshed it to), not the requested one. */
    if (ka->sent_at_ms != 0 && now - ka->last_ok_ms >= ka->ttl_s * 1000) {
        eep_info(EEP_SUBSYS_ETCD,
                 "lease %llx confirmed again after %lld ms without an answer (an etcd election?)",
                 (unsigned long long)ka->lease, (long long)(now - ka->last_ok_ms));
    }
    ka->ttl_s            = msg->ttl;
    ka->last_ok_ms       = ka->sent_at_ms != 0 ? ka->sent_at_ms : now;
    ka->sent_at_ms       = 0;
    ka->next_send_ms     = now + eep_etcd_ka_period_ms(ka);
    ka->owner.backoff_ms = EEP_ETCD_BACKOFF_MIN_MS;
    ka->failures         = 0;
    ka->held             = 0;
    __atomic_store_n(&client->preferred, ka->owner.endpoint, __ATOMIC_RELAXED);
    if (!ka->first_done) {
        ka->first_done   = 1;
        ka->first_status = EEP_OK;
        pthread_cond_broadcast(&client->cond);
    }
}

/* The stream failed or went unanswered (lock held): the next endpoint, at once while some
 * endpoint is still untried since the last answer, then after a pause of at most one
 * attempt (never the stream backoff's seconds: the lease's deadline is running). */
static void eep_etcd_keepalive_schedule(eep_etcd_keepalive_t *ka)
{
    eep_etcd_t *client = ka->owner.client;
    int64_t     now    = eep_rpc_now_ms();
    int64_t     pause  = eep_etcd_ka_attempt_ms(ka);

    eep_etcd_owner_schedule(&ka->owner);
    ka->failures++;
    if (ka->failures < client->n_endpoints) {
        ka->owner.retry_at_ms = now;
    } else if (ka->owner.retry_at_ms > now + pause) {
        ka->owner.retry_at_ms = now + pause;
    }
}

void eep_etcd_keepalive_on_closed(eep_etcd_keepalive_t *ka, const eep_rpc_result_t *result)
{
    if (ka->owner.cancelled || ka->ended) {
        return;
    }
    ka->sent_at_ms = 0;
    eep_etcd_keepalive_schedule(ka);
    eep_warn(EEP_SUBSYS_ETCD,
             "lease %llx: keepalive stream lost (%s: %s); reconnecting through "
             "%s",
             (unsigned long long)ka->lease, eep_rpc_code_name(result->code), result->details,
             ka->owner.client->endpoints[ka->owner.endpoint]);
}

void eep_etcd_keepalive_timer(eep_etcd_keepalive_t *ka, int64_t now_ms)
{
    Etcdserverpb__LeaseKeepAliveRequest req    = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
    eep_etcd_t                         *client = ka->owner.client;

    if (ka->ended) {
        return;
    }
    if (ka->ttl_s > 0 && now_ms - ka->last_ok_ms >= ka->ttl_s * 1000 + eep_etcd_ka_grace_ms(ka)) {
        eep_etcd_ka_lost(ka, "no keepalive answer within its TTL and the grace after it");
        return;
    }
    if (ka->owner.stream == NULL) {
        if (now_ms >= ka->owner.retry_at_ms) {
            eep_etcd_owner_connect(&ka->owner, EEP_ETCD_KEEPALIVE_METHOD,
                                   &etcdserverpb__lease_keep_alive_response__descriptor);
            ka->next_send_ms = now_ms;
        }
        return;
    }
    if (ka->sent_at_ms != 0) {
        if (now_ms - ka->sent_at_ms > eep_etcd_ka_attempt_ms(ka)) {
            /* Taken on a connected channel and not answered: etcd is up (electing, hung). */
            if (grpc_channel_check_connectivity_state(client->channels[ka->owner.endpoint], 0) ==
                GRPC_CHANNEL_READY) {
                ka->held = 1;
            }
            eep_warn(EEP_SUBSYS_ETCD,
                     "lease %llx: no keepalive reply from %s in %lld ms; trying "
                     "the next endpoint",
                     (unsigned long long)ka->lease, client->endpoints[ka->owner.endpoint],
                     (long long)(now_ms - ka->sent_at_ms));
            eep_rpc_stream_cancel(ka->owner.stream);
            ka->sent_at_ms   = 0;
            ka->next_send_ms = INT64_MAX; /* until the stream is replaced */
        }
        return;
    }
    if (now_ms < ka->next_send_ms || eep_rpc_stream_sending(ka->owner.stream)) {
        return;
    }
    req.id = ka->lease;
    if (eep_rpc_stream_send(ka->owner.stream, &req.base) == EEP_OK) {
        ka->sent_at_ms = now_ms;
        EEP_ETCD_STAT_INC(client, keepalives_sent);
    }
}

eep_status_t eep_etcd_lease_grant(eep_etcd_t *client, int64_t ttl_s, int64_t *lease_p,
                                  int64_t *granted_ttl_p)
{
    Etcdserverpb__LeaseGrantRequest   req  = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
    Etcdserverpb__LeaseGrantResponse *resp = NULL;
    eep_status_t                      status;
    int64_t                           id, ttl;

    if (client == NULL || lease_p == NULL) {
        eep_error(EEP_SUBSYS_ETCD, "etcd lease grant: %s is NULL",
                  client == NULL ? "client" : "lease_p");
        return EEP_ERR_INVALID_ARG;
    }
    if (ttl_s <= 0) {
        eep_error(EEP_SUBSYS_ETCD, "etcd lease grant: ttl_s %lld must be positive",
                  (long long)ttl_s);
        return EEP_ERR_INVALID_ARG;
    }
    req.ttl = ttl_s;
    status = eep_etcd_unary(client, "/etcdserverpb.Lease/LeaseGrant", "etcd lease grant", &req.base,
                            &etcdserverpb__lease_grant_response__descriptor,
                            (ProtobufCMessage **)&resp);
    if (status != EEP_OK) {
        return status;
    }
    id  = resp->id;
    ttl = resp->ttl;
    if (resp->error != NULL && resp->error[0] != '\0') {
        eep_error(EEP_SUBSYS_ETCD, "etcd lease grant of %lld s: %s", (long long)ttl_s, resp->error);
        status = EEP_ERR_ETCD;
    } else if (id == 0 || ttl <= 0) {
        eep_error(EEP_SUBSYS_ETCD,
                  "etcd lease grant of %lld s: etcd granted lease %lld with TTL "
                  "%lld",
                  (long long)ttl_s, (long long)id, (long long)ttl);
        status = EEP_ERR_ETCD;
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    if (status != EEP_OK) {
        return status;
    }
    if (ttl != ttl_s) {
        eep_info(EEP_SUBSYS_ETCD, "etcd granted lease %llx a TTL of %lld s (asked %lld s)",
                 (unsigned long long)id, (long long)ttl, (long long)ttl_s);
    }
    pthread_mutex_lock(&client->lock);
    client->lease_ids[client->lease_next % EEP_ETCD_MAX_LEASES]  = id;
    client->lease_ttls[client->lease_next % EEP_ETCD_MAX_LEASES] = ttl;
    client->lease_next++;
    pthread_mutex_unlock(&client->lock);
    EEP_ETCD_STAT_INC(client, lease_grants);
    *lease_p = id;
    if (granted_ttl_p != NULL) {
        *granted_ttl_p = ttl;
    }
    return EEP_OK;
}

/* The keepalive of @p lease (lock held), or NULL. */
static eep_etcd_keepalive_t *eep_etcd_ka_find(eep_etcd_t *client, int64_t lease)
{
    eep_etcd_owner_t *owner;

    for (owner = client->owners; owner != NULL; owner = owner->next) {
        if (owner->kind == EEP_ETCD_OWNER_KEEPALIVE && !owner->cancelled &&
            ((eep_etcd_keepalive_t *)owner)->lease == lease) {
            return (eep_etcd_keepalive_t *)owner;
        }
    }
    return NULL;
}

eep_status_t eep_etcd_lease_keepalive(eep_etcd_t *client, int64_t lease,
                                      eep_etcd_lease_lost_func_t lost, void *arg)
{
    eep_etcd_keepalive_t *ka;
    eep_status_t          status;
    size_t                i;

    if (client == NULL || lease == 0) {
        eep_error(EEP_SUBSYS_ETCD, "etcd lease keepalive: %s",
                  client == NULL ? "client is NULL" : "lease is 0");
        return EEP_ERR_INVALID_ARG;
    }
    ka = calloc(1, sizeof(*ka));
    if (ka == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    ka->owner.kind       = EEP_ETCD_OWNER_KEEPALIVE;
    ka->owner.client     = client;
    ka->owner.backoff_ms = EEP_ETCD_BACKOFF_MIN_MS;
    ka->lease            = lease;
    ka->lost             = lost;
    ka->arg              = arg;

    pthread_mutex_lock(&client->lock);
    if (client->stopping || eep_etcd_ka_find(client, lease) != NULL) {
        pthread_mutex_unlock(&client->lock);
        free(ka);
        eep_error(EEP_SUBSYS_ETCD, "etcd lease keepalive %llx: %s", (unsigned long long)lease,
                  client->stopping ? "the client is being destroyed" : "already kept alive");
        return client->stopping ? EEP_ERR_ABORTED : EEP_ERR_EXISTS;
    }
    for (i = 0; i < EEP_ETCD_MAX_LEASES; i++) {
        if (client->lease_ids[i] == lease) {
            ka->ttl_s = client->lease_ttls[i];
        }
    }
    ka->last_ok_ms     = eep_rpc_now_ms();
    ka->owner.endpoint = __atomic_load_n(&client->preferred, __ATOMIC_RELAXED);
    ka->owner.next     = client->owners;
    client->owners     = &ka->owner;
    /* The client thread connects and sends at its next tick (within EEP_ETCD_POLL_MS). */
    if (!eep_etcd_wait_flag(client, &ka->first_done, eep_rpc_now_ms() + client->timeout_ms)) {
        eep_error(EEP_SUBSYS_ETCD, "etcd lease keepalive %llx: no reply within %d ms",
                  (unsigned long long)lease, client->timeout_ms);
        status = EEP_ERR_CONTROL_UNAVAILABLE;
    } else {
        status = ka->first_status;
    }
    if (status != EEP_OK) {
        eep_etcd_owner_cancel(&ka->owner);
    }
    pthread_mutex_unlock(&client->lock);
    return status;
}

eep_status_t eep_etcd_lease_deadline(eep_etcd_t *client, int64_t lease, int64_t *deadline_ms_p)
{
    eep_etcd_keepalive_t *ka;
    eep_status_t          status = EEP_ERR_NOT_FOUND;

    if (client == NULL || deadline_ms_p == NULL) {
        return EEP_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&client->lock);
    ka = eep_etcd_ka_find(client, lease);
    if (ka != NULL && !ka->ended && ka->ttl_s > 0) {
        *deadline_ms_p = ka->last_ok_ms + ka->ttl_s * 1000;
        status         = EEP_OK;
    }
    pthread_mutex_unlock(&client->lock);
    return status;
}

eep_status_t eep_etcd_lease_revoke(eep_etcd_t *client, int64_t lease)
{
    Etcdserverpb__LeaseRevokeRequest   req  = ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;
    Etcdserverpb__LeaseRevokeResponse *resp = NULL;
    eep_etcd_keepalive_t              *ka;
    eep_status_t                       status;

    if (client == NULL || lease == 0) {
        eep_error(EEP_SUBSYS_ETCD, "etcd lease revoke: %s",
                  client == NULL ? "client is NULL" : "lease is 0");
        return EEP_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&client->lock);
    ka = eep_etcd_ka_find(client, lease);
    if (ka != NULL) {
        eep_etcd_owner_cancel(&ka->owner);
    }
    pthread_mutex_unlock(&client->lock);
    req.id = lease;
    status = eep_etcd_unary(client, "/etcdserverpb.Lease/LeaseRevoke", "etcd lease revoke",
                            &req.base, &etcdserverpb__lease_revoke_response__descriptor,
                            (ProtobufCMessage **)&resp);
    if (status != EEP_OK) {
        return status;
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    EEP_ETCD_STAT_INC(client, lease_revokes);
    return EEP_OK;
}
