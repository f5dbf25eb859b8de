/*
 * agent_bootstrap.c - the etcd backend of eep_bootstrap_t: the ranks of one view all-gather
 * through keys under /eep/<job>/views/<epoch>/boot/<round>/<rank>.
 *
 * Round r: each rank writes its key with one Txn (create_revision == 0, so a slot is never
 * overwritten: two processes claiming one rank are caught) under the member's lease, deleting its
 * own key of round r-2 in the same Txn (entering round r proves every rank read round r-2, as in
 * the file backend), then polls the round's prefix with a short back-off until all n keys are
 * there or the bootstrap timeout passed.  Polling rather than a watch keeps every wait a plain
 * bounded loop on the caller's thread; at start-up this costs a few localhost round trips per
 * exchange, and there are a handful of exchanges.  Each value starts with the writer's member id,
 * checked against the view: a process outside the view cannot feed bytes into it.  The lease id
 * comes from the member id (<host>-<pid>-<lease in hex>, control/README.md), so this file needs
 * nothing but the agent's public API and its own etcd client.
 */
#include "control/agent/agent_bootstrap.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "control/agent/agent_knobs.h"
#include "control/etcd/etcd.h"
#include "util/clock.h"
#include "util/log.h"

#define EEP_AGENT_BOOT_MAGIC       0x42504545u /* "EEPB" little-endian */
#define EEP_AGENT_BOOT_HDR         8u          /* magic (4), id length (4) */
#define EEP_AGENT_BOOT_KEY_MAX     640
#define EEP_AGENT_BOOT_POLL_MAX_MS 25

typedef struct {
    eep_etcd_t *etcd;
    char        prefix[512]; /* /eep/<job>/views/<epoch>/boot/ */
    int64_t     lease;
    uint64_t    epoch;
    char        my_id[256];
    char      **ids;     /* the view's member ids, in rank order */
    int         missing; /* lowest rank missing at the last timeout, -1 */
} eep_agent_bootstrap_t;

static void eep_agent_bootstrap_key(const eep_agent_bootstrap_t *b, unsigned long round, int rank,
                                    char *buf, size_t len)
{
    if (rank < 0) {
        snprintf(buf, len, "%s%010lu/", b->prefix, round);
    } else {
        snprintf(buf, len, "%s%010lu/%06d", b->prefix, round, rank);
    }
}

static void eep_agent_bootstrap_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t eep_agent_bootstrap_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/*
 * Check one value read back: the writer is the view's member at @p rank and the payload is
 * @p len bytes.  @return the payload, or NULL (logged).
 */
static const uint8_t *eep_agent_bootstrap_check(const eep_agent_bootstrap_t *b, unsigned long round,
                                                int rank, const uint8_t *value, size_t value_len,
                                                size_t len)
{
    const char *want = b->ids[rank];
    uint32_t    id_len;

    if (value_len < EEP_AGENT_BOOT_HDR ||
        eep_agent_bootstrap_get32(value) != EEP_AGENT_BOOT_MAGIC) {
        eep_error(EEP_SUBSYS_BOOTSTRAP,
                  "view %llu round %lu: the key of rank %d is not bootstrap "
                  "data (%zu bytes)",
                  (unsigned long long)b->epoch, round, rank, value_len);
        return NULL;
    }
    id_len = eep_agent_bootstrap_get32(value + 4);
    if (id_len > value_len - EEP_AGENT_BOOT_HDR || id_len != strlen(want) ||
        memcmp(value + EEP_AGENT_BOOT_HDR, want, id_len) != 0) {
        eep_error(EEP_SUBSYS_BOOTSTRAP,
                  "view %llu round %lu: the key of rank %d was not written "
                  "by the view's member %s: refused",
                  (unsigned long long)b->epoch, round, rank, want);
        return NULL;
    }
    if (value_len - EEP_AGENT_BOOT_HDR - id_len != len) {
        eep_error(EEP_SUBSYS_BOOTSTRAP,
                  "view %llu round %lu: rank %d sent %zu bytes, this rank "
                  "expected %zu (ranks disagree on the exchange)",
                  (unsigned long long)b->epoch, round, rank,
                  value_len - EEP_AGENT_BOOT_HDR - id_len, len);
        return NULL;
    }
    return value + EEP_AGENT_BOOT_HDR + id_len;
}

/* Write this rank's key of round bs->round (and drop its key of round - 2): one Txn. */
static eep_status_t eep_agent_bootstrap_write(eep_bootstrap_t *bs, const void *mine, size_t len)
{
    eep_agent_bootstrap_t *b = bs->impl;
    char                   key[EEP_AGENT_BOOT_KEY_MAX], old[EEP_AGENT_BOOT_KEY_MAX];
    size_t                 id_len = strlen(b->my_id), value_len;
    uint8_t               *value;
    eep_etcd_cmp_t         cmp;
    eep_etcd_op_t          ops[2];
    eep_etcd_range_t       r;
    int                    ok = 0, n_ops = 1;
    eep_status_t           status;

    value_len = EEP_AGENT_BOOT_HDR + id_len + len;
    value     = malloc(value_len);
    if (value == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    eep_agent_bootstrap_put32(value, EEP_AGENT_BOOT_MAGIC);
    eep_agent_bootstrap_put32(value + 4, (uint32_t)id_len);
    memcpy(value + EEP_AGENT_BOOT_HDR, b->my_id, id_len);
    memcpy(value + EEP_AGENT_BOOT_HDR + id_len, mine, len);

    eep_agent_bootstrap_key(b, bs->round, bs->rank, key, sizeof(key));
    memset(&cmp, 0, sizeof(cmp));
    cmp.key    = key;
    cmp.target = EEP_ETCD_CMP_CREATE;
    cmp.op     = EEP_ETCD_EQUAL;
    cmp.number = 0;
    memset(ops, 0, sizeof(ops));
    ops[0].type      = EEP_ETCD_OP_PUT;
    ops[0].key       = key;
    ops[0].value     = value;
    ops[0].value_len = value_len;
    ops[0].lease     = b->lease;
    if (bs->round >= 2) {
        eep_agent_bootstrap_key(b, bs->round - 2, bs->rank, old, sizeof(old));
        ops[n_ops].type = EEP_ETCD_OP_DELETE;
        ops[n_ops].key  = old;
        n_ops++;
    }
    status = eep_etcd_txn(b->etcd, &cmp, 1, ops, (size_t)n_ops, NULL, 0, &ok, NULL);
    if (status != EEP_OK) {
        eep_error(EEP_SUBSYS_BOOTSTRAP,
                  "view %llu round %lu: writing rank %d's key failed: %s "
                  "(lease %llx lost?)",
                  (unsigned long long)b->epoch, bs->round, bs->rank, eep_status_name(status),
                  (unsigned long long)b->lease);
        goto out;
    }
    if (!ok) {
        /* A retried Txn may find its own first attempt applied: then the key holds our bytes. */
        status = eep_etcd_range(b->etcd, key, 0, &r);
        if (status != EEP_OK) {
            goto out;
        }
        if (r.count != 1 || r.kvs[0].value_len != value_len ||
            memcmp(r.kvs[0].value, value, value_len) != 0) {
            eep_error(EEP_SUBSYS_BOOTSTRAP,
                      "view %llu round %lu: rank %d's key already holds "
                      "other data (two processes claim this rank?)",
                      (unsigned long long)b->epoch, bs->round, bs->rank);
            status = EEP_ERR_EXISTS;
        }
        eep_etcd_range_free(&r);
    }
out:
    free(value);
    return status;
}

static eep_status_t eep_agent_bootstrap_allgather(eep_bootstrap_t *bs, const void *mine, void *all,
                                                  size_t len)
{
    eep_agent_bootstrap_t *b = bs->impl;
    char                   prefix[EEP_AGENT_BOOT_KEY_MAX];
    size_t                 plen, i;
    double                 deadline = eep_clock_ms() + bs->timeout_ms;
    double                 pause_ms = 1;
    unsigned char         *got;
    int                    have = 0, rank;
    eep_status_t           status;

    got = calloc((size_t)bs->nranks, 1);
    if (got == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    status = eep_agent_bootstrap_write(bs, mine, len);
    if (status != EEP_OK) {
        goto out;
    }
    eep_agent_bootstrap_key(b, bs->round, -1, prefix, sizeof(prefix));
    plen = strlen(prefix);
    for (;;) {
        eep_etcd_range_t r;
        double           left;

        status = eep_etcd_range(b->etcd, prefix, 1, &r);
        if (status != EEP_OK) {
            goto out;
        }
        for (i = 0; i < r.count; i++) {
            const char    *k = (const char *)r.kvs[i].key;
            const uint8_t *payload;
            char          *end;
            long           v;

            if (r.kvs[i].key_len <= plen) {
                continue;
            }
            v = strtol(k + plen, &end, 10);
            if (*end != '\0' || v < 0 || v >= bs->nranks) {
                continue; /* not a rank of this view: never ours to read */
            }
            rank = (int)v;
            if (got[rank]) {
                continue;
            }
            payload = eep_agent_bootstrap_check(b, bs->round, rank, r.kvs[i].value,
                                                r.kvs[i].value_len, len);
            if (payload == NULL) {
                eep_etcd_range_free(&r);
                status = EEP_ERR_INVALID_ARG;
                goto out;
            }
            memcpy((char *)all + (size_t)rank * len, payload, len);
            got[rank] = 1;
            have++;
        }
        eep_etcd_range_free(&r);
        if (have == bs->nranks) {
            b->missing = -1;
            break;
        }
        left = deadline - eep_clock_ms();
        if (left <= 0) {
            for (rank = 0; rank < bs->nranks && got[rank]; rank++) {
            }
            b->missing = rank;
            eep_error(EEP_SUBSYS_BOOTSTRAP,
                      "view %llu round %lu: no data from rank %d (member %s)"
                      "%s within %d ms: timed out",
                      (unsigned long long)b->epoch, bs->round, rank, b->ids[rank],
                      bs->nranks - have > 1 ? " and others" : "", bs->timeout_ms);
            status = EEP_ERR_TIMEOUT;
            goto out;
        }
        eep_clock_sleep_ms(pause_ms < left ? pause_ms : left);
        pause_ms = pause_ms * 2 < EEP_AGENT_BOOT_POLL_MAX_MS ? pause_ms * 2
                                                             : EEP_AGENT_BOOT_POLL_MAX_MS;
    }
out:
    free(got);
    return status;
}

static void eep_agent_bootstrap_free(eep_agent_bootstrap_t *b)
{
    uint32_t i;

    if (b == NULL) {
        return;
    }
    if (b->ids != NULL) {
        for (i = 0; b->ids[i] != NULL; i++) {
            free(b->ids[i]);
        }
        free(b->ids);
    }
    eep_etcd_destroy(b->etcd);
    free(b);
}

/* The keys of the last two rounds stay (a slower rank may still read them); they go with the
   lease, or with the view's prefix. */
static void eep_agent_bootstrap_destroy_impl(eep_bootstrap_t *bs)
{
    eep_agent_bootstrap_free(bs->impl);
    bs->impl = NULL;
}

static const eep_bootstrap_ops_t eep_agent_bootstrap_ops = {
    .name      = "etcd",
    .allgather = eep_agent_bootstrap_allgather,
    .destroy   = eep_agent_bootstrap_destroy_impl,
};

/* The lease id is the member id's last '-' field, in hex. */
int eep_agent_lease_of(const char *id, int64_t *lease_p)
{
    const char        *dash = strrchr(id, '-');
    char              *end;
    unsigned long long v;

    if (dash == NULL || dash[1] == '\0') {
        return -1;
    }
    v = strtoull(dash + 1, &end, 16);
    if (*end != '\0' || v == 0 || v > INT64_MAX) {
        return -1;
    }
    *lease_p = (int64_t)v;
    return 0;
}

eep_status_t eep_agent_bootstrap_create(const eep_agent_bootstrap_params_t *params,
                                        eep_bootstrap_t                   **bs_p)
{
    eep_agent_bootstrap_t  *b;
    eep_agent_config_t      acfg;
    eep_etcd_params_t       ep;
    const eep_agent_view_t *view;
    const char             *job;
    int                     timeout_ms;
    uint32_t                i;
    eep_status_t            status;

    if (params == NULL || params->size < sizeof(*params) || bs_p == NULL || params->agent == NULL ||
        params->view == NULL) {
        eep_error(EEP_SUBSYS_BOOTSTRAP, "eep_agent_bootstrap_create: params (with size, agent "
                                        "and view set) and bs_p are required");
        return EEP_ERR_INVALID_ARG;
    }
    view   = params->view;
    status = eep_config_load(&eep_agent_knob_table, &acfg);
    if (status != EEP_OK) {
        return status;
    }
    if (params->job == NULL) {
        status = eep_etcd_job_name(acfg.job, sizeof(acfg.job));
        if (status != EEP_OK) {
            return status;
        }
    }
    job = params->job != NULL ? params->job : acfg.job;
    if (job[0] == '\0' || strchr(job, '/') != NULL || strlen(job) > 200) {
        eep_error(EEP_SUBSYS_BOOTSTRAP, "job must be a non-empty name without '/'");
        return EEP_ERR_INVALID_ARG;
    }
    timeout_ms = eep_bootstrap_timeout_ms(params->timeout_ms);
    if (view->n_ranks == 0 || view->members == NULL) {
        eep_error(EEP_SUBSYS_BOOTSTRAP, "view %llu has no ranks", (unsigned long long)view->epoch);
        return EEP_ERR_INVALID_ARG;
    }
    b = calloc(1, sizeof(*b));
    if (b == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    b->epoch   = view->epoch;
    b->missing = -1;
    status     = eep_agent_member_id(params->agent, b->my_id, sizeof(b->my_id));
    if (status != EEP_OK) {
        eep_error(EEP_SUBSYS_BOOTSTRAP,
                  "this member has no id now (%s): wait for a view "
                  "holding its new id",
                  eep_status_name(status));
        goto err_free;
    }
    if (view->my_rank < 0 || (uint32_t)view->my_rank >= view->n_ranks ||
        view->members[view->my_rank].id == NULL ||
        strcmp(view->members[view->my_rank].id, b->my_id) != 0) {
        eep_error(EEP_SUBSYS_BOOTSTRAP,
                  "member %s holds no rank in view %llu: refusing to "
                  "bootstrap it",
                  b->my_id, (unsigned long long)view->epoch);
        status = EEP_ERR_INVALID_ARG;
        goto err_free;
    }
    if (eep_agent_lease_of(b->my_id, &b->lease) != 0) {
        eep_error(EEP_SUBSYS_BOOTSTRAP, "member id %s does not end in a lease id", b->my_id);
        status = EEP_ERR_INTERNAL;
        goto err_free;
    }
    b->ids = calloc((size_t)view->n_ranks + 1, sizeof(*b->ids));
    if (b->ids == NULL) {
        status = EEP_ERR_NO_MEMORY;
        goto err_free;
    }
    for (i = 0; i < view->n_ranks; i++) {
        b->ids[i] = strdup(view->members[i].id != NULL ? view->members[i].id : "");
        if (b->ids[i] == NULL) {
            status = EEP_ERR_NO_MEMORY;
            goto err_free;
        }
    }
    snprintf(b->prefix, sizeof(b->prefix), "/eep/%s/views/%020llu/boot/", job,
             (unsigned long long)view->epoch);
    /* Every other setting from the EEP_ETCD_* knobs, as the agent's own client. */
    memset(&ep, 0, sizeof(ep));
    ep.size = sizeof(ep);
    status  = eep_etcd_create(&ep, &b->etcd);
    if (status != EEP_OK) {
        goto err_free;
    }
    status = eep_bootstrap_create_ops(&eep_agent_bootstrap_ops, b, view->my_rank,
                                      (int)view->n_ranks, timeout_ms, bs_p);
    if (status != EEP_OK) {
        goto err_free;
    }
    eep_debug(EEP_SUBSYS_BOOTSTRAP, "etcd bootstrap: view %llu, rank %d of %u, member %s",
              (unsigned long long)view->epoch, view->my_rank, view->n_ranks, b->my_id);
    return EEP_OK;

err_free:
    eep_agent_bootstrap_free(b);
    return status;
}

eep_status_t eep_agent_bootstrap_missing(const eep_bootstrap_t *bs, int *rank_p)
{
    const eep_agent_bootstrap_t *b;

    if (bs == NULL || rank_p == NULL || bs->ops != &eep_agent_bootstrap_ops) {
        return EEP_ERR_INVALID_ARG;
    }
    b = bs->impl;
    if (b->missing < 0) {
        return EEP_ERR_NOT_FOUND;
    }
    *rank_p = b->missing;
    return EEP_OK;
}
