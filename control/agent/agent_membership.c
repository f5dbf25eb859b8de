/*
 * agent_membership.c - eep_membership_ops_t over the agent (agent_membership.h has the keys).
 *
 * poll() turns the agent's newest view into an eep_view_t: member ids in rank order, the root,
 * and the placement as (rank, slot) pairs from the primary copy of eepd's expert_ranks (slot =
 * the expert's position among those of its rank, ascending: eep_placement_default's rule for
 * eepd's contiguous blocks).  The provider keeps a copy of the member ids of the last view it
 * handed out, so that report_fault can name a suspect and fetch_uid can check that the id was
 * written by that view's root.  The unique id is written under the root's lease: it goes with
 * the member, and a stale root can never overwrite a newer root's id (one key per epoch and
 * attempt, create-only).
 */
#include "control/agent/agent_membership.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/agent/agent_bootstrap.h"
#include "control/agent/agent_knobs.h"
#include "control/etcd/etcd.h"
#include "util/clock.h"
#include "util/config.h"
#include "util/log.h"

#define EEP_AGENT_UID_MAGIC      0x44495545u /* "EUID" little-endian */
#define EEP_AGENT_UID_HDR        8u          /* magic (4), id length (4) */
#define EEP_AGENT_UID_KEY_MAX    320
#define EEP_AGENT_UID_POLL_MS    5
#define EEP_AGENT_UID_ABANDON_MS 2000.0 /* a newer view is waiting: give up after this long */
#define EEP_AGENT_MEMBER_ID_MAX  256

typedef struct {
    eep_agent_t *agent;
    eep_etcd_t  *etcd;
    char         job[224];
    /* the view handed out and not yet released */
    eep_agent_view_t   *held;
    const char        **held_ids;
    eep_expert_place_t *held_placement;
    /* the last view handed out, kept past release */
    uint64_t last_epoch;
    int      last_world, last_root;
    char   **last_ids;
} eep_agent_ms_t;

static void eep_agent_ms_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t eep_agent_ms_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void eep_agent_ms_uid_key(const eep_agent_ms_t *m, uint64_t epoch, int attempt, char *buf,
                                 size_t len)
{
    snprintf(buf, len, "/eep/%s/views/%020llu/uid/%02d", m->job, (unsigned long long)epoch,
             attempt);
}

static void eep_agent_ms_free_last(eep_agent_ms_t *m)
{
    int i;

    if (m->last_ids != NULL) {
        for (i = 0; i < m->last_world; i++) {
            free(m->last_ids[i]);
        }
        free(m->last_ids);
    }
    m->last_ids   = NULL;
    m->last_world = 0;
}

static void eep_agent_ms_release_held(eep_agent_ms_t *m)
{
    eep_agent_view_free(m->held);
    free(m->held_ids);
    free(m->held_placement);
    m->held           = NULL;
    m->held_ids       = NULL;
    m->held_placement = NULL;
}

/* Convert @p v (taken over) into @p out; keep the ids of the view as the last one. */
static eep_status_t eep_agent_ms_convert(eep_agent_ms_t *m, eep_agent_view_t *v, eep_view_t *out)
{
    const char        **ids;
    eep_expert_place_t *pl = NULL;
    char              **last;
    int                *fill = NULL;
    uint32_t            i, e, copies = v->copies > 0 ? v->copies : 1;

    ids  = calloc((size_t)v->n_ranks + 1, sizeof(*ids));
    last = calloc((size_t)v->n_ranks + 1, sizeof(*last));
    if (v->num_experts > 0) {
        pl   = calloc(v->num_experts, sizeof(*pl));
        fill = calloc((size_t)v->n_ranks + 1, sizeof(*fill));
    }
    if (ids == NULL || last == NULL || (v->num_experts > 0 && (pl == NULL || fill == NULL))) {
        goto err_nomem;
    }
    for (i = 0; i < v->n_ranks; i++) {
        ids[i]  = v->members[i].id != NULL ? v->members[i].id : "";
        last[i] = strdup(ids[i]);
        if (last[i] == NULL) {
            goto err_nomem;
        }
    }
    for (e = 0; e < v->num_experts; e++) {
        uint32_t r = v->expert_ranks[(size_t)e * copies];

        /* an out-of-range rank is left for eep_view_check to refuse, naming the expert */
        pl[e].rank = (int32_t)r;
        pl[e].slot = r < v->n_ranks ? fill[r]++ : 0;
    }
    free(fill);
    eep_agent_ms_release_held(m);
    eep_agent_ms_free_last(m);
    m->held           = v;
    m->held_ids       = ids;
    m->held_placement = pl;
    m->last_ids       = last;
    m->last_world     = (int)v->n_ranks;
    m->last_epoch     = v->epoch;
    m->last_root      = (int)v->root;
    memset(out, 0, sizeof(*out));
    out->size        = sizeof(*out);
    out->epoch       = v->epoch;
    out->world       = (int)v->n_ranks;
    out->member_ids  = ids;
    out->my_rank     = v->my_rank;
    out->root        = (int)v->root;
    out->num_experts = (int)v->num_experts;
    out->placement   = pl;
    return EEP_OK;

err_nomem:
    if (last != NULL) {
        for (i = 0; i < v->n_ranks; i++) {
            free(last[i]);
        }
    }
    free(last);
    free(ids);
    free(pl);
    free(fill);
    eep_agent_view_free(v);
    return EEP_ERR_NO_MEMORY;
}

static eep_status_t eep_agent_ms_poll(void *ctx, eep_view_t *view_p, int *changed_p)
{
    eep_agent_ms_t   *m = ctx;
    eep_agent_view_t *v = NULL;
    eep_status_t      status;

    *changed_p = 0;
    status     = eep_agent_poll(m->agent, &v);
    if (status == EEP_INPROGRESS) {
        return EEP_OK;
    }
    if (status != EEP_OK) {
        return status; /* EEP_ERR_LEASE_LOST once per loss */
    }
    status = eep_agent_ms_convert(m, v, view_p);
    if (status == EEP_OK) {
        *changed_p = 1;
    }
    return status;
}

static void eep_agent_ms_release(void *ctx, eep_view_t *view)
{
    eep_agent_ms_t *m = ctx;

    if (view != NULL && m->held != NULL && view->member_ids == m->held_ids) {
        eep_agent_ms_release_held(m);
    }
}

static eep_status_t eep_agent_ms_report(void *ctx, int world_rank, uint64_t epoch,
                                        const char *reason)
{
    eep_agent_ms_t *m = ctx;
    char            self[EEP_AGENT_MEMBER_ID_MAX];
    const char     *suspect;

    if (epoch != m->last_epoch || world_rank < -1 || world_rank >= m->last_world) {
        eep_warn(EEP_SUBSYS_AGENT,
                 "membership: fault report for rank %d of epoch %llu, but the last view is "
                 "epoch %llu of %d ranks: not sent",
                 world_rank, (unsigned long long)epoch, (unsigned long long)m->last_epoch,
                 m->last_world);
        return EEP_ERR_STALE_EPOCH;
    }
    if (world_rank < 0) {
        return EEP_OK; /* no suspect: the leases decide */
    }
    suspect = m->last_ids[world_rank];
    if (eep_agent_member_id(m->agent, self, sizeof(self)) == EEP_OK && strcmp(self, suspect) == 0) {
        eep_warn(EEP_SUBSYS_AGENT, "membership: reporting this rank itself (%s): %s", self, reason);
    }
    return eep_agent_report_fault(m->agent, suspect, world_rank, epoch, reason, "libeep");
}

static eep_status_t eep_agent_ms_publish(void *ctx, uint64_t epoch, int attempt,
                                         const eep_comm_uid_t *uid)
{
    eep_agent_ms_t  *m = ctx;
    char             key[EEP_AGENT_UID_KEY_MAX], id[EEP_AGENT_MEMBER_ID_MAX];
    uint8_t          value[EEP_AGENT_UID_HDR + EEP_AGENT_MEMBER_ID_MAX + EEP_COMM_UID_BYTES];
    eep_etcd_cmp_t   cmp;
    eep_etcd_op_t    op;
    eep_etcd_range_t r;
    int64_t          lease = 0;
    size_t           id_len, len;
    int              ok = 0;
    eep_status_t     status;

    if (attempt < 0 || attempt > 99) {
        eep_error(EEP_SUBSYS_AGENT, "publish_uid: attempt %d outside [0, 99]", attempt);
        return EEP_ERR_INVALID_ARG;
    }
    status = eep_agent_member_id(m->agent, id, sizeof(id));
    if (status != EEP_OK) {
        return status;
    }
    if (eep_agent_lease_of(id, &lease) != 0) {
        eep_error(EEP_SUBSYS_AGENT, "publish_uid: member id %s does not end in a lease id", id);
        return EEP_ERR_INTERNAL;
    }
    id_len = strlen(id);
    len    = EEP_AGENT_UID_HDR + id_len + EEP_COMM_UID_BYTES;
    eep_agent_ms_put32(value, EEP_AGENT_UID_MAGIC);
    eep_agent_ms_put32(value + 4, (uint32_t)id_len);
    memcpy(value + EEP_AGENT_UID_HDR, id, id_len);
    memcpy(value + EEP_AGENT_UID_HDR + id_len, uid->bytes, EEP_COMM_UID_BYTES);
    eep_agent_ms_uid_key(m, epoch, attempt, key, sizeof(key));
    memset(&cmp, 0, sizeof(cmp));
    cmp.key    = key;
    cmp.target = EEP_ETCD_CMP_CREATE;
    cmp.op     = EEP_ETCD_EQUAL;
    memset(&op, 0, sizeof(op));
    op.type      = EEP_ETCD_OP_PUT;
    op.key       = key;
    op.value     = value;
    op.value_len = len;
    op.lease     = lease;
    status       = eep_etcd_txn(m->etcd, &cmp, 1, &op, 1, NULL, 0, &ok, NULL);
    if (status != EEP_OK || ok) {
        return status;
    }
    /* The key exists: our own retried write, or someone else's (refused). */
    status = eep_etcd_range(m->etcd, key, 0, &r);
    if (status != EEP_OK) {
        return status;
    }
    if (r.count != 1 || r.kvs[0].value_len != len || memcmp(r.kvs[0].value, value, len) != 0) {
        eep_error(EEP_SUBSYS_AGENT,
                  "publish_uid: epoch %llu attempt %d already has another unique id (two roots?)",
                  (unsigned long long)epoch, attempt);
        status = EEP_ERR_EXISTS;
    }
    eep_etcd_range_free(&r);
    return status;
}

/* @return the unique id in @p value when the view's root wrote it, else NULL (logged). */
static const uint8_t *eep_agent_ms_uid_check(const eep_agent_ms_t *m, uint64_t epoch,
                                             const uint8_t *value, size_t len)
{
    const char *root;
    uint32_t    id_len;

    if (epoch != m->last_epoch || m->last_root < 0 || m->last_root >= m->last_world) {
        eep_error(EEP_SUBSYS_AGENT, "fetch_uid: epoch %llu is not the last view handed out (%llu)",
                  (unsigned long long)epoch, (unsigned long long)m->last_epoch);
        return NULL;
    }
    root = m->last_ids[m->last_root];
    if (len < EEP_AGENT_UID_HDR || eep_agent_ms_get32(value) != EEP_AGENT_UID_MAGIC) {
        eep_error(EEP_SUBSYS_AGENT, "fetch_uid: the key of epoch %llu holds no unique id",
                  (unsigned long long)epoch);
        return NULL;
    }
    id_len = eep_agent_ms_get32(value + 4);
    if (id_len != strlen(root) || len != EEP_AGENT_UID_HDR + id_len + EEP_COMM_UID_BYTES ||
        memcmp(value + EEP_AGENT_UID_HDR, root, id_len) != 0) {
        eep_error(EEP_SUBSYS_AGENT,
                  "fetch_uid: the unique id of epoch %llu was not written by its root %s: refused",
                  (unsigned long long)epoch, root);
        return NULL;
    }
    return value + EEP_AGENT_UID_HDR + id_len;
}

static eep_status_t eep_agent_ms_fetch(void *ctx, uint64_t epoch, int attempt, int timeout_ms,
                                       eep_comm_uid_t *uid_p)
{
    eep_agent_ms_t *m = ctx;
    char            key[EEP_AGENT_UID_KEY_MAX];
    double          start    = eep_clock_ms();
    double          deadline = start + (timeout_ms > 0 ? timeout_ms : 0);
    eep_status_t    status;

    if (attempt < 0 || attempt > 99) {
        eep_error(EEP_SUBSYS_AGENT, "fetch_uid: attempt %d outside [0, 99]", attempt);
        return EEP_ERR_INVALID_ARG;
    }
    eep_agent_ms_uid_key(m, epoch, attempt, key, sizeof(key));
    for (;;) {
        eep_etcd_range_t r;

        status = eep_etcd_range(m->etcd, key, 0, &r);
        if (status != EEP_OK && status != EEP_ERR_CONTROL_UNAVAILABLE) {
            return status;
        }
        if (status == EEP_OK && r.count == 1) {
            const uint8_t *u = eep_agent_ms_uid_check(m, epoch, r.kvs[0].value, r.kvs[0].value_len);

            if (u != NULL) {
                memcpy(uid_p->bytes, u, EEP_COMM_UID_BYTES);
            }
            eep_etcd_range_free(&r);
            return u != NULL ? EEP_OK : EEP_ERR_INVALID_ARG;
        }
        if (status == EEP_OK) {
            eep_etcd_range_free(&r);
        }
        if (eep_clock_ms() >= deadline) {
            eep_error(EEP_SUBSYS_AGENT,
                      "fetch_uid: no unique id for epoch %llu attempt %d within %d ms",
                      (unsigned long long)epoch, attempt, timeout_ms);
            return EEP_ERR_TIMEOUT;
        }
        if (eep_clock_ms() - start > EEP_AGENT_UID_ABANDON_MS &&
            eep_agent_newest_epoch(m->agent) > epoch) {
            /* the root skipped this view: the newer one is where everyone goes */
            eep_warn(EEP_SUBSYS_AGENT,
                     "fetch_uid: epoch %llu given up: no unique id after %d ms and a newer view "
                     "is waiting",
                     (unsigned long long)epoch, (int)EEP_AGENT_UID_ABANDON_MS);
            return EEP_ERR_STALE_EPOCH;
        }
        eep_clock_sleep_ms(EEP_AGENT_UID_POLL_MS);
    }
}

static int eep_agent_ms_has_newer(void *ctx, uint64_t epoch)
{
    eep_agent_ms_t *m = ctx;

    return eep_agent_newest_epoch(m->agent) > epoch;
}

static const eep_membership_ops_t eep_agent_membership_ops = {
    .name         = "agent",
    .poll         = eep_agent_ms_poll,
    .report_fault = eep_agent_ms_report,
    .release      = eep_agent_ms_release,
    .publish_uid  = eep_agent_ms_publish,
    .fetch_uid    = eep_agent_ms_fetch,
    .has_newer    = eep_agent_ms_has_newer,
};

eep_status_t eep_agent_membership_create(const eep_agent_membership_params_t *params,
                                         eep_membership_t                    *ms_p)
{
    eep_agent_ms_t *m;
    eep_status_t    status;

    if (params == NULL || params->size != sizeof(*params) || ms_p == NULL) {
        eep_error(EEP_SUBSYS_AGENT, "eep_agent_membership_create: params (with size) and ms_p "
                                    "are required");
        return EEP_ERR_INVALID_ARG;
    }
    if (params->agent == NULL) {
        eep_error(EEP_SUBSYS_AGENT, "eep_agent_membership_create: params.agent is NULL");
        return EEP_ERR_INVALID_ARG;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    m->agent     = params->agent;
    m->last_root = -1;
    if (params->job != NULL) {
        snprintf(m->job, sizeof(m->job), "%s", params->job);
        status = strlen(params->job) < sizeof(m->job) ? EEP_OK : EEP_ERR_INVALID_ARG;
    } else {
        status = eep_etcd_job_name(m->job, sizeof(m->job));
    }
    if (status == EEP_OK && (m->job[0] == '\0' || strchr(m->job, '/') != NULL)) {
        status = EEP_ERR_INVALID_ARG;
    }
    if (status != EEP_OK) {
        eep_error(EEP_SUBSYS_AGENT, "eep_agent_membership_create: params.job must be a "
                                    "non-empty name without '/' (at most 200 bytes)");
        free(m);
        return status;
    }
    status = eep_etcd_create(NULL, &m->etcd);
    if (status != EEP_OK) {
        free(m);
        return status;
    }
    ms_p->ops = &eep_agent_membership_ops;
    ms_p->ctx = m;
    return EEP_OK;
}

void eep_agent_membership_destroy(eep_membership_t *ms)
{
    eep_agent_ms_t *m;

    if (ms == NULL || ms->ctx == NULL) {
        return;
    }
    m = ms->ctx;
    eep_agent_ms_release_held(m);
    eep_agent_ms_free_last(m);
    eep_etcd_destroy(m->etcd);
    free(m);
    ms->ctx = NULL;
    ms->ops = NULL;
}
