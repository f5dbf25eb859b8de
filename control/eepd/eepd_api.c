/*
 * eepd_api.c - the EepControl handlers: decode a request, act, encode the reply.
 *
 * Every handler runs on the loop thread.  Mutating calls only write keys under /eep/<job>/
 * (drain/, cordon/, faults/, members/): the leader reacts to them through its watch, so any
 * replica can take them and a failover loses none.  Under TLS they need a verified client
 * certificate.  Input is untrusted: a request that does not decode, or names a member with
 * characters outside [A-Za-z0-9._:-], gets INVALID_ARGUMENT; nothing here asserts on input.
 */
#include "control/eepd/eepd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

static const char *const eepd_api_paths[EEPD_M_COUNT] = {
    [EEPD_M_GET_STATUS]   = "/eep.v1.EepControl/GetStatus",
    [EEPD_M_WATCH_VIEWS]  = "/eep.v1.EepControl/WatchViews",
    [EEPD_M_DRAIN]        = "/eep.v1.EepControl/Drain",
    [EEPD_M_CORDON]       = "/eep.v1.EepControl/Cordon",
    [EEPD_M_UNCORDON]     = "/eep.v1.EepControl/Uncordon",
    [EEPD_M_REPORT_FAULT] = "/eep.v1.EepControl/ReportFault",
    [EEPD_M_INJECT_FAULT] = "/eep.v1.EepControl/InjectFault",
    [EEPD_M_HEALTH]       = "/eep.v1.EepControl/Health",
};

typedef struct eepd_api_slot eepd_api_slot_t;

/* End the call with @p code (when there is a call) and hand the code back for the fuzzer. */
static int eepd_api_fail(eepd_t *eepd, eep_rpc_call_t *call, int code, const char *msg)
{
    eepd->rpc_errors++;
    if (call != NULL) {
        eep_rpc_call_fail(call, code, msg);
    }
    return code;
}

static int eepd_api_reply(eepd_t *eepd, eep_rpc_call_t *call, const ProtobufCMessage *msg)
{
    size_t   len = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(len ? len : 1);

    if (buf == NULL) {
        return eepd_api_fail(eepd, call, EEP_RPC_RESOURCE_EXHAUSTED, "out of memory");
    }
    protobuf_c_message_pack(msg, buf);
    if (call != NULL) {
        eep_rpc_call_reply(call, buf, len);
    }
    free(buf);
    return EEP_RPC_OK;
}

static int eepd_api_ack(eepd_t *eepd, eep_rpc_call_t *call, const char *text)
{
    Eep__V1__Ack ack = EEP__V1__ACK__INIT;

    ack.message = (char *)text;
    return eepd_api_reply(eepd, call, &ack.base);
}

/* A data-plane fault spec: 1..255 printable ASCII bytes (the rank parses it strictly). */
static int eepd_api_spec_ok(const char *spec)
{
    size_t n;

    if (spec == NULL) {
        return 0;
    }
    for (n = 0; spec[n] != '\0'; n++) {
        if (spec[n] < 0x20 || spec[n] > 0x7e) {
            return 0;
        }
    }
    return n >= 1 && n <= 255;
}

static int eepd_api_id_ok(const char *id)
{
    size_t n = 0;

    if (id == NULL) {
        return 0;
    }
    for (; id[n] != '\0'; n++) {
        char c = id[n];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == ':' || c == '-')) {
            return 0;
        }
    }
    return n > 0 && n <= 200;
}

/* Mutating calls: an authenticated peer under TLS, and a reachable etcd. */
static int eepd_api_may_mutate(eepd_t *eepd, eep_rpc_call_t *call, int authenticated)
{
    if (eepd->cfg.tls_cert[0] != '\0' && !authenticated) {
        eep_warn(EEP_SUBSYS_EEPD,
                 "refused a mutating call from %s: no verified client "
                 "certificate",
                 eep_rpc_call_peer(call));
        return eepd_api_fail(eepd, call, EEP_RPC_UNAUTHENTICATED,
                             "a verified client certificate is required for this call");
    }
    if (eepd->etcd == NULL) {
        return eepd_api_fail(eepd, call, EEP_RPC_UNAVAILABLE, "no etcd");
    }
    return EEP_RPC_OK;
}

/* API writes go to the helper thread; the call is answered when etcd has answered. */
enum { EEPD_API_JOB_WRITE, EEPD_API_JOB_STEP_DOWN };

static void eepd_api_write_done(eepd_t *eepd, eepd_job_t *job)
{
    if (job->call == NULL) {
        /* The client went away (deadline) meanwhile; the write itself counts. */
        if (job->status == EEP_OK && job->kind == EEPD_API_JOB_STEP_DOWN &&
            eepd->lease == job->lease) {
            eepd->lease     = 0;
            eepd->is_leader = 0;
        }
        return;
    }
    if (job->status != EEP_OK) {
        eepd_api_fail(eepd, job->call, EEP_RPC_UNAVAILABLE, eep_status_string(job->status));
        return;
    }
    if (job->kind == EEPD_API_JOB_STEP_DOWN && eepd->lease == job->lease) {
        eepd->lease     = 0; /* a new one is granted at the next campaign */
        eepd->is_leader = 0;
    }
    eepd_api_ack(eepd, job->call, job->text);
}

static eepd_job_t *eepd_api_job(eepd_t *eepd, eep_rpc_call_t *call, const char *ack)
{
    eepd_job_t *job = eepd_job_new(eepd_job_run_writes, eepd_api_write_done);

    if (job == NULL) {
        eepd_api_fail(eepd, call, EEP_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return NULL;
    }
    job->call = call;
    snprintf(job->text, sizeof(job->text), "%s", ack);
    return job;
}

/* Add a put (@p value non-NULL: copied; one per job) or a delete of @p key. */
static int eepd_api_job_op(eepd_job_t *job, const char *key, const uint8_t *value, size_t len)
{
    eep_etcd_op_t *op = &job->ops[job->n_ops];

    snprintf(job->keys[job->n_ops], sizeof(job->keys[0]), "%s", key);
    op->key  = job->keys[job->n_ops];
    op->type = value != NULL ? EEP_ETCD_OP_PUT : EEP_ETCD_OP_DELETE;
    if (value != NULL) {
        job->value = malloc(len ? len : 1);
        if (job->value == NULL) {
            return 0;
        }
        memcpy(job->value, value, len);
        job->value_len = len;
        op->value      = job->value;
        op->value_len  = len;
    }
    job->n_ops++;
    return 1;
}

/* The call of a queued write ended before its answer (client deadline): it is gone. */
static void eepd_api_job_call_closed(eep_rpc_call_t *call, void *arg)
{
    eepd_job_t *job = arg;

    (void)call;
    job->call = NULL;
}

static int eepd_api_submit(eepd_t *eepd, eepd_job_t *job)
{
    eepd->etcd_round_trips += job->n_ops > 0 ? job->n_ops : 1;
    if (job->call != NULL) {
        eep_rpc_call_set_closed(job->call, eepd_api_job_call_closed, job);
    }
    eepd_jobs_submit(eepd, job);
    return EEP_RPC_OK;
}

static int eepd_api_get_status(eepd_t *eepd, eep_rpc_call_t *call, const uint8_t *req, size_t len)
{
    Eep__V1__GetStatusRequest *in    = eep__v1__get_status_request__unpack(NULL, len, req);
    Eep__V1__GetStatusReply    out   = EEP__V1__GET_STATUS_REPLY__INIT;
    Eep__V1__View              empty = EEP__V1__VIEW__INIT;
    Eep__V1__Member          **list  = NULL;
    size_t                     i;
    int                        code;

    if (in == NULL) {
        return eepd_api_fail(eepd, call, EEP_RPC_INVALID_ARGUMENT, "bad GetStatusRequest");
    }
    eep__v1__get_status_request__free_unpacked(in, NULL);
    if (eepd->n_members > 0) {
        list = calloc(eepd->n_members, sizeof(*list));
        if (list == NULL) {
            return eepd_api_fail(eepd, call, EEP_RPC_RESOURCE_EXHAUSTED, "out of memory");
        }
    }
    for (i = 0; i < eepd->n_members; i++) {
        list[i]           = eepd->members[i].member;
        list[i]->cordoned = eepd_idset_has(&eepd->cordoned, eepd->members[i].id) ||
                            eepd_idset_has(&eepd->drained, eepd->members[i].id);
    }
    out.replica         = eepd->replica_id;
    out.is_leader       = eepd->is_leader;
    out.leader          = eepd->leader_id;
    out.view            = eepd->view != NULL ? eepd->view : &empty;
    out.n_members       = eepd->n_members;
    out.members         = list;
    out.views_published = eepd->views_published;
    out.fault_injection = eepd->cfg.fault_injection;
    code                = eepd_api_reply(eepd, call, &out.base);
    free(list);
    return code;
}

static void eepd_api_watch_closed(eep_rpc_call_t *call, void *arg)
{
    eepd_t *eepd = arg;
    size_t  i;

    for (i = 0; i < eepd->n_watchers; i++) {
        if (eepd->watchers[i].call == call) {
            eepd->watchers[i] = eepd->watchers[--eepd->n_watchers];
            eep_debug(EEP_SUBSYS_EEPD, "watcher %s left", eep_rpc_call_peer(call));
            return;
        }
    }
}

static eep_status_t eepd_api_send_view(eepd_t *eepd, eepd_watcher_t *w)
{
    size_t       len = eep__v1__view__get_packed_size(eepd->view);
    uint8_t     *buf = malloc(len ? len : 1);
    eep_status_t status;

    if (buf == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    eep__v1__view__pack(eepd->view, buf);
    status = eep_rpc_call_send(w->call, buf, len);
    free(buf);
    return status;
}

static int eepd_api_watch_views(eepd_t *eepd, eep_rpc_call_t *call, const uint8_t *req, size_t len)
{
    Eep__V1__WatchViewsRequest *in = eep__v1__watch_views_request__unpack(NULL, len, req);
    eepd_watcher_t             *w;

    if (in == NULL) {
        return eepd_api_fail(eepd, call, EEP_RPC_INVALID_ARGUMENT, "bad WatchViewsRequest");
    }
    if (call == NULL) {
        eep__v1__watch_views_request__free_unpacked(in, NULL);
        return EEP_RPC_OK;
    }
    if (eepd->n_watchers == eepd->cap_watchers) {
        size_t          cap = eepd->cap_watchers ? 2 * eepd->cap_watchers : 8;
        eepd_watcher_t *nw  = realloc(eepd->watchers, cap * sizeof(*nw));

        if (nw == NULL) {
            eep__v1__watch_views_request__free_unpacked(in, NULL);
            return eepd_api_fail(eepd, call, EEP_RPC_RESOURCE_EXHAUSTED, "out of memory");
        }
        eepd->watchers     = nw;
        eepd->cap_watchers = cap;
    }
    w             = &eepd->watchers[eepd->n_watchers++];
    w->call       = call;
    w->from_epoch = in->from_epoch;
    eep__v1__watch_views_request__free_unpacked(in, NULL);
    eep_rpc_call_set_closed(call, eepd_api_watch_closed, eepd);
    if (eepd->view != NULL && eepd->view->epoch >= w->from_epoch) {
        eepd_api_send_view(eepd, w);
    }
    return EEP_RPC_OK;
}

void eepd_api_broadcast(eepd_t *eepd)
{
    size_t i = 0;

    while (i < eepd->n_watchers) {
        eepd_watcher_t *w = &eepd->watchers[i];

        if (eepd->view != NULL && eepd->view->epoch >= w->from_epoch &&
            eepd_api_send_view(eepd, w) != EEP_OK) {
            /* A client that stopped reading (or is gone): end its stream, keep the others. */
            eep_rpc_call_t *call = w->call;

            *w = eepd->watchers[--eepd->n_watchers];
            eep_rpc_call_fail(call, EEP_RPC_RESOURCE_EXHAUSTED, "watcher too slow");
            continue;
        }
        i++;
    }
}

void eepd_api_drop_watchers(eepd_t *eepd)
{
    while (eepd->n_watchers > 0) {
        eep_rpc_call_t *call = eepd->watchers[--eepd->n_watchers].call;

        eep_rpc_call_fail(call, EEP_RPC_UNAVAILABLE, "eepd is shutting down");
    }
}

static int eepd_api_member_op(eepd_t *eepd, int method, eep_rpc_call_t *call, const uint8_t *req,
                              size_t len, int authenticated)
{
    Eep__V1__MemberRequest *in = eep__v1__member_request__unpack(NULL, len, req);
    char                    key[EEPD_KEY_MAX], key2[EEPD_KEY_MAX], text[320];
    eepd_job_t             *job;
    int                     code;

    if (in == NULL) {
        return eepd_api_fail(eepd, call, EEP_RPC_INVALID_ARGUMENT, "bad MemberRequest");
    }
    if (!eepd_api_id_ok(in->member)) {
        code = eepd_api_fail(eepd, call, EEP_RPC_INVALID_ARGUMENT,
                             "member: 1..200 characters of [A-Za-z0-9._:-] expected");
        goto out;
    }
    code = eepd_api_may_mutate(eepd, call, authenticated);
    if (code != EEP_RPC_OK) {
        goto out;
    }
    if (method == EEPD_M_DRAIN && eepd_member_find(eepd, in->member) == NULL) {
        code = eepd_api_fail(eepd, call, EEP_RPC_NOT_FOUND, "no such member");
        goto out;
    }
    eep_info(EEP_SUBSYS_EEPD, "%s member %s (from %s)",
             method == EEPD_M_DRAIN    ? "drain"
             : method == EEPD_M_CORDON ? "cordon"
                                       : "uncordon",
             in->member, eep_rpc_call_peer(call));
    snprintf(text, sizeof(text), "%s %s",
             method == EEPD_M_DRAIN    ? "draining"
             : method == EEPD_M_CORDON ? "cordoned"
                                       : "uncordoned",
             in->member);
    job = eepd_api_job(eepd, call, text);
    if (job == NULL) {
        code = EEP_RPC_RESOURCE_EXHAUSTED;
        goto out;
    }
    if (method == EEPD_M_UNCORDON) {
        eepd_key(eepd, key, sizeof(key), "cordon/%s", in->member);
        eepd_key(eepd, key2, sizeof(key2), "drain/%s", in->member);
        eepd_api_job_op(job, key, NULL, 0);
        eepd_api_job_op(job, key2, NULL, 0);
    } else {
        eepd_key(eepd, key, sizeof(key), "%s/%s", method == EEPD_M_DRAIN ? "drain" : "cordon",
                 in->member);
        if (!eepd_api_job_op(job, key, (const uint8_t *)"1", 1)) {
            eepd_job_free(job);
            code = eepd_api_fail(eepd, call, EEP_RPC_RESOURCE_EXHAUSTED, "out of memory");
            goto out;
        }
    }
    code = eepd_api_submit(eepd, job);
out:
    eep__v1__member_request__free_unpacked(in, NULL);
    return code;
}

static int eepd_api_report_fault(eepd_t *eepd, eep_rpc_call_t *call, const uint8_t *req, size_t len,
                                 int authenticated)
{
    Eep__V1__Fault *in = eep__v1__fault__unpack(NULL, len, req);
    char            key[EEPD_KEY_MAX];
    eepd_job_t     *job;
    int             code;

    if (in == NULL) {
        return eepd_api_fail(eepd, call, EEP_RPC_INVALID_ARGUMENT, "bad Fault");
    }
    if ((in->suspect[0] != '\0' && !eepd_api_id_ok(in->suspect)) || strlen(in->phase) > 64 ||
        strlen(in->detail) > 1024 || strlen(in->reporter) > 200) {
        code = eepd_api_fail(eepd, call, EEP_RPC_INVALID_ARGUMENT,
                             "suspect must be a member id; phase <= 64, detail <= 1024 bytes");
        goto out;
    }
    code = eepd_api_may_mutate(eepd, call, authenticated);
    if (code != EEP_RPC_OK) {
        goto out;
    }
    eepd->faults_reported++;
    eep_warn(EEP_SUBSYS_EEPD, "fault from %s: suspect %s (rank %d) in %s at epoch %llu: %s",
             in->reporter, in->suspect[0] ? in->suspect : "-", in->suspect_rank, in->phase,
             (unsigned long long)in->epoch, in->detail);
    if (in->suspect[0] != '\0') {
        size_t   n   = eep__v1__fault__get_packed_size(in);
        uint8_t *buf = malloc(n ? n : 1);

        if (buf == NULL) {
            code = eepd_api_fail(eepd, call, EEP_RPC_RESOURCE_EXHAUSTED, "out of memory");
            goto out;
        }
        eep__v1__fault__pack(in, buf);
        eepd_key(eepd, key, sizeof(key), "faults/%s", in->suspect);
        job = eepd_api_job(eepd, call, "fault recorded");
        if (job == NULL || !eepd_api_job_op(job, key, buf, n)) {
            free(buf);
            if (job != NULL) {
                eepd_job_free(job);
                eepd_api_fail(eepd, call, EEP_RPC_RESOURCE_EXHAUSTED, "out of memory");
            }
            code = EEP_RPC_RESOURCE_EXHAUSTED;
            goto out;
        }
        free(buf);
        code = eepd_api_submit(eepd, job);
        goto out;
    }
    code = eepd_api_ack(eepd, call, "fault recorded");
out:
    eep__v1__fault__free_unpacked(in, NULL);
    return code;
}

static int eepd_api_inject_fault(eepd_t *eepd, eep_rpc_call_t *call, const uint8_t *req, size_t len,
                                 int authenticated)
{
    Eep__V1__InjectFaultRequest *in;
    eepd_member_t               *m;
    eepd_job_t                  *job = NULL;
    char                         key[EEPD_KEY_MAX];
    int                          code;

    if (!eepd->cfg.fault_injection) {
        /* Before decoding: a disabled debug RPC looks at nothing it is sent. */
        return eepd_api_fail(eepd, call, EEP_RPC_PERMISSION_DENIED,
                             "fault injection is disabled (EEP_EEPD_FAULT_INJECTION=0)");
    }
    in = eep__v1__inject_fault_request__unpack(NULL, len, req);
    if (in == NULL) {
        return eepd_api_fail(eepd, call, EEP_RPC_INVALID_ARGUMENT, "bad InjectFaultRequest");
    }
    if (in->kind == EEP__V1__FAULT_KIND__FAULT_DATA_PLANE && !eepd_api_spec_ok(in->spec)) {
        /* the request itself is wrong, whoever leads */
        code = eepd_api_fail(eepd, call, EEP_RPC_INVALID_ARGUMENT,
                             "spec: 1..255 printable characters, e.g. \"stall ms=800\"");
        goto out;
    }
    code = eepd_api_may_mutate(eepd, call, authenticated);
    if (code != EEP_RPC_OK) {
        goto out;
    }
    switch (in->kind) {
    case EEP__V1__FAULT_KIND__FAULT_EVICT:
    case EEP__V1__FAULT_KIND__FAULT_REVOKE_LEASE:
        m = eepd_api_id_ok(in->member) ? eepd_member_find(eepd, in->member) : NULL;
        if (m == NULL) {
            code = eepd_api_fail(eepd, call, EEP_RPC_NOT_FOUND, "no such member");
            goto out;
        }
        job = eepd_api_job(eepd, call, "fault injected");
        if (job == NULL) {
            code = EEP_RPC_RESOURCE_EXHAUSTED;
            goto out;
        }
        if (in->kind == EEP__V1__FAULT_KIND__FAULT_EVICT) {
            eepd_key(eepd, key, sizeof(key), "members/%s", m->id);
            eepd_api_job_op(job, key, NULL, 0);
        } else {
            job->lease = m->member->lease;
        }
        break;
    case EEP__V1__FAULT_KIND__FAULT_DATA_PLANE:
        /* The member's agent watches inject/<id> and hands the spec to its rank (eep-rank arms
           it); the key lives on the member's lease, so it leaves with the member. */
        m = eepd_api_id_ok(in->member) ? eepd_member_find(eepd, in->member) : NULL;
        if (m == NULL) {
            code = eepd_api_fail(eepd, call, EEP_RPC_NOT_FOUND, "no such member");
            goto out;
        }
        job = eepd_api_job(eepd, call, "fault sent to the member's agent");
        if (job == NULL) {
            code = EEP_RPC_RESOURCE_EXHAUSTED;
            goto out;
        }
        eepd_key(eepd, key, sizeof(key), "inject/%s", m->id);
        if (!eepd_api_job_op(job, key, (const uint8_t *)in->spec, strlen(in->spec))) {
            eepd_job_free(job);
            code = eepd_api_fail(eepd, call, EEP_RPC_RESOURCE_EXHAUSTED, "out of memory");
            goto out;
        }
        job->ops[job->n_ops - 1].lease = m->member->lease;
        break;
    case EEP__V1__FAULT_KIND__FAULT_LEADER_STEP_DOWN:
        if (!eepd->is_leader) {
            code = eepd_api_fail(eepd, call, EEP_RPC_FAILED_PRECONDITION, "not the leader");
            goto out;
        }
        /* Revoking our lease deletes the leader key; the watch then steps us down. */
        eepd->no_campaign_until_ms = eepd_now_ms() + 1000 * eepd->cfg.lease_ttl_s;
        job                        = eepd_api_job(eepd, call, "fault injected");
        if (job == NULL) {
            code = EEP_RPC_RESOURCE_EXHAUSTED;
            goto out;
        }
        job->kind  = EEPD_API_JOB_STEP_DOWN;
        job->lease = eepd->lease;
        break;
    case EEP__V1__FAULT_KIND__FAULT_STALE_PUBLISH:
        /* Pretend to lead for one publish: the epoch Txn must refuse it. */
        if (eepd->is_leader) {
            code = eepd_api_fail(eepd, call, EEP_RPC_FAILED_PRECONDITION,
                                 "the leader would really publish; ask a follower");
            goto out;
        }
        eepd->inject_stale_publish = 1;
        break;
    default:
        code = eepd_api_fail(eepd, call, EEP_RPC_INVALID_ARGUMENT, "unknown fault kind");
        goto out;
    }
    eep_warn(EEP_SUBSYS_EEPD, "injected fault %d on %s (from %s)", (int)in->kind,
             in->member[0] ? in->member : "-", eep_rpc_call_peer(call));
    code = job != NULL ? eepd_api_submit(eepd, job) : eepd_api_ack(eepd, call, "fault injected");
out:
    eep__v1__inject_fault_request__free_unpacked(in, NULL);
    return code;
}

static int eepd_api_health(eepd_t *eepd, eep_rpc_call_t *call, const uint8_t *req, size_t len)
{
    Eep__V1__HealthRequest *in  = eep__v1__health_request__unpack(NULL, len, req);
    Eep__V1__HealthReply    out = EEP__V1__HEALTH_REPLY__INIT;

    if (in == NULL) {
        return eepd_api_fail(eepd, call, EEP_RPC_INVALID_ARGUMENT, "bad HealthRequest");
    }
    eep__v1__health_request__free_unpacked(in, NULL);
    out.serving   = 1;
    out.etcd_ok   = eepd_etcd_ok(eepd);
    out.is_leader = eepd->is_leader;
    return eepd_api_reply(eepd, call, &out.base);
}

int eepd_api_handle(eepd_t *eepd, int method, eep_rpc_call_t *call, const uint8_t *req, size_t len,
                    int authenticated)
{
    eepd->rpc_requests++;
    if (req == NULL && len > 0) {
        return eepd_api_fail(eepd, call, EEP_RPC_INVALID_ARGUMENT, "no request");
    }
    switch (method) {
    case EEPD_M_GET_STATUS:
        return eepd_api_get_status(eepd, call, req, len);
    case EEPD_M_WATCH_VIEWS:
        return eepd_api_watch_views(eepd, call, req, len);
    case EEPD_M_DRAIN:
    case EEPD_M_CORDON:
    case EEPD_M_UNCORDON:
        return eepd_api_member_op(eepd, method, call, req, len, authenticated);
    case EEPD_M_REPORT_FAULT:
        return eepd_api_report_fault(eepd, call, req, len, authenticated);
    case EEPD_M_INJECT_FAULT:
        return eepd_api_inject_fault(eepd, call, req, len, authenticated);
    case EEPD_M_HEALTH:
        return eepd_api_health(eepd, call, req, len);
    default:
        return eepd_api_fail(eepd, call, EEP_RPC_UNIMPLEMENTED, "unknown method");
    }
}

static void eepd_api_dispatch(eep_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    eepd_api_slot_t *slot = arg;

    eepd_api_handle(slot->eepd, slot->method, call, req, len, eep_rpc_call_authenticated(call));
}

eep_status_t eepd_api_register(eepd_t *eepd)
{
    eep_status_t status;
    int          i;

    for (i = 0; i < EEPD_M_COUNT; i++) {
        eepd->api_slots[i].eepd   = eepd;
        eepd->api_slots[i].method = i;

        const eep_rpc_kind_t kind = i == EEPD_M_WATCH_VIEWS ? EEP_RPC_SERVER_STREAM : EEP_RPC_UNARY;

        status = eep_rpc_server_add_method(eepd->rpc, eepd_api_paths[i], kind, eepd_api_dispatch,
                                           &eepd->api_slots[i]);
        if (status != EEP_OK) {
            return status;
        }
    }
    return EEP_OK;
}
