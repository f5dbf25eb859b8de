/*
 * bootstrap.c - the standalone bootstrap: parameter checks, knob defaults, and bcast/barrier on
 * top of the backend's one collective (allgather).
 *
 * Everything is built on allgather so that a backend (file, TCP, etcd) has one thing to get right;
 * a broadcast costs a full all-gather, which is fine for the few small exchanges of start-up.
 */
#include "elastic/runtime/bootstrap.h"

#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "elastic/runtime/runtime_knobs.h"

int eep_bootstrap_timeout_ms(int requested)
{
    eep_runtime_config_t cfg;

    if (requested > 0) {
        return requested;
    }
    if (eep_config_load(&eep_runtime_knob_table, &cfg) != EEP_OK) {
        return 60000; /* the knob's default; the bad value was logged */
    }
    return (int)cfg.bootstrap_timeout_ms;
}

eep_status_t eep_bootstrap_create_ops(const eep_bootstrap_ops_t *ops, void *impl, int rank,
                                      int nranks, int timeout_ms, eep_bootstrap_t **bs_p)
{
    eep_bootstrap_t *bs;

    if (ops == NULL || ops->allgather == NULL || bs_p == NULL) {
        eep_error(EEP_SUBSYS_BOOTSTRAP, "eep_bootstrap_create_ops: ops, ops->allgather and bs_p "
                                        "must not be NULL");
        return EEP_ERR_INVALID_ARG;
    }
    if (nranks < 1 || rank < 0 || rank >= nranks) {
        eep_error(EEP_SUBSYS_BOOTSTRAP, "rank %d outside a world of %d ranks", rank, nranks);
        return EEP_ERR_INVALID_ARG;
    }
    bs = calloc(1, sizeof(*bs));
    if (bs == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    bs->ops        = ops;
    bs->impl       = impl;
    bs->rank       = rank;
    bs->nranks     = nranks;
    bs->timeout_ms = timeout_ms > 0 ? timeout_ms : 60000;
    *bs_p          = bs;
    return EEP_OK;
}

eep_status_t eep_bootstrap_create(const eep_bootstrap_params_t *params, eep_bootstrap_t **bs_p)
{
    eep_bootstrap_params_t p;
    eep_runtime_config_t   cfg;
    eep_bootstrap_t       *bs;
    eep_status_t           status;
    const char            *where = NULL;

    if (bs_p == NULL) {
        eep_error(EEP_SUBSYS_BOOTSTRAP, "eep_bootstrap_create: bs_p is NULL");
        return EEP_ERR_INVALID_ARG;
    }
    memset(&p, 0, sizeof(p));
    p.kind = EEP_BOOTSTRAP_ENV;
    p.rank = -1;
    if (params != NULL) {
        if (params->size == 0 || params->size > sizeof(p)) {
            eep_error(EEP_SUBSYS_BOOTSTRAP,
                      "eep_bootstrap_params_t.size %zu is not a size this "
                      "library knows (%zu): set it to sizeof(eep_bootstrap_params_t)",
                      params->size, sizeof(p));
            return EEP_ERR_INVALID_ARG;
        }
        memcpy(&p, params, params->size);
    }
    status = eep_config_load(&eep_runtime_knob_table, &cfg);
    if (status != EEP_OK) {
        return status;
    }
    if (p.rank < 0) {
        p.rank = (int)cfg.rank;
    }
    if (p.nranks <= 0) {
        p.nranks = (int)cfg.world_size;
    }
    if (p.timeout_ms <= 0) {
        p.timeout_ms = (int)cfg.bootstrap_timeout_ms;
    }
    if (p.nranks <= 0) {
        eep_error(EEP_SUBSYS_BOOTSTRAP, "bootstrap needs the world size: set nranks or "
                                        "EEP_WORLD_SIZE");
        return EEP_ERR_INVALID_ARG;
    }
    if (p.rank < 0 || p.rank >= p.nranks) {
        eep_error(EEP_SUBSYS_BOOTSTRAP,
                  "bootstrap rank %d is outside [0, %d): set rank or "
                  "EEP_RANK",
                  p.rank, p.nranks);
        return EEP_ERR_INVALID_ARG;
    }
    if (p.kind == EEP_BOOTSTRAP_ENV) {
        if (strncmp(cfg.bootstrap, "file:", 5) == 0) {
            p.kind = EEP_BOOTSTRAP_FILE;
            where  = cfg.bootstrap + 5;
        } else if (strncmp(cfg.bootstrap, "tcp:", 4) == 0) {
            p.kind = EEP_BOOTSTRAP_TCP;
            where  = cfg.bootstrap + 4;
        } else {
            eep_error(EEP_SUBSYS_BOOTSTRAP,
                      "EEP_BOOTSTRAP '%s' is neither file:DIR nor "
                      "tcp:HOST:PORT",
                      cfg.bootstrap);
            return EEP_ERR_INVALID_ARG;
        }
    } else if (p.kind == EEP_BOOTSTRAP_FILE) {
        where = p.path;
    } else if (p.kind == EEP_BOOTSTRAP_TCP) {
        where = p.address;
    } else {
        eep_error(EEP_SUBSYS_BOOTSTRAP, "bootstrap kind %d is not one of ENV, FILE, TCP",
                  (int)p.kind);
        return EEP_ERR_INVALID_ARG;
    }
    if (where == NULL || where[0] == '\0') {
        eep_error(EEP_SUBSYS_BOOTSTRAP, "bootstrap %s needs %s",
                  p.kind == EEP_BOOTSTRAP_FILE ? "file" : "tcp",
                  p.kind == EEP_BOOTSTRAP_FILE ? "a directory (path)" : "an address HOST:PORT");
        return EEP_ERR_INVALID_ARG;
    }

    bs = calloc(1, sizeof(*bs));
    if (bs == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    bs->rank       = p.rank;
    bs->nranks     = p.nranks;
    bs->timeout_ms = p.timeout_ms;
    if (p.kind == EEP_BOOTSTRAP_FILE) {
        status = eep_bootstrap_file_init(bs, where);
    } else {
        status = eep_bootstrap_tcp_init(bs, where);
    }
    if (status != EEP_OK) {
        free(bs);
        return status;
    }
    eep_debug(EEP_SUBSYS_BOOTSTRAP, "bootstrap %s: rank %d of %d", bs->ops->name, bs->rank,
              bs->nranks);
    *bs_p = bs;
    return EEP_OK;
}

void eep_bootstrap_destroy(eep_bootstrap_t *bs)
{
    if (bs == NULL) {
        return;
    }
    if (bs->ops != NULL && bs->ops->destroy != NULL) {
        bs->ops->destroy(bs);
    }
    free(bs);
}

int eep_bootstrap_rank(const eep_bootstrap_t *bs)
{
    return bs != NULL ? bs->rank : -1;
}

int eep_bootstrap_nranks(const eep_bootstrap_t *bs)
{
    return bs != NULL ? bs->nranks : 0;
}

eep_status_t eep_bootstrap_allgather(eep_bootstrap_t *bs, const void *mine, void *all, size_t len)
{
    eep_status_t status;

    if (bs == NULL || mine == NULL || all == NULL || len == 0) {
        eep_error(EEP_SUBSYS_BOOTSTRAP, "eep_bootstrap_allgather: bs, mine and all must not be "
                                        "NULL and len must not be 0");
        return EEP_ERR_INVALID_ARG;
    }
    status = bs->ops->allgather(bs, mine, all, len);
    if (status == EEP_OK) {
        bs->round++;
    }
    return status;
}

eep_status_t eep_bootstrap_bcast(eep_bootstrap_t *bs, void *buf, size_t len, int root)
{
    eep_status_t status;
    char        *all;

    if (bs == NULL || buf == NULL || len == 0 || root < 0 || root >= bs->nranks) {
        eep_error(EEP_SUBSYS_BOOTSTRAP,
                  "eep_bootstrap_bcast: bad argument (buf %p, len %zu, "
                  "root %d)",
                  buf, len, root);
        return EEP_ERR_INVALID_ARG;
    }
    all = malloc(len * (size_t)bs->nranks);
    if (all == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    status = eep_bootstrap_allgather(bs, buf, all, len);
    if (status == EEP_OK) {
        memcpy(buf, all + (size_t)root * len, len);
    }
    free(all);
    return status;
}

eep_status_t eep_bootstrap_barrier(eep_bootstrap_t *bs)
{
    eep_status_t status;
    char         me = 1;
    char        *all;

    if (bs == NULL) {
        return EEP_ERR_INVALID_ARG;
    }
    all = malloc((size_t)bs->nranks);
    if (all == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    status = eep_bootstrap_allgather(bs, &me, all, 1);
    free(all);
    return status;
}
