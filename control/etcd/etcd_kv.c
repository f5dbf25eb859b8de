/*
 * etcd_kv.c - the etcd client's KV calls: Range (paged), Put, DeleteRange and Txn, each one unary
 * call with failover (eep_etcd_unary, etcd.c) under one deadline.
 */
#include "control/etcd/etcd_int.h"

#include <stdlib.h>
#include <string.h>

#include "util/log.h"

/* ---- request helpers --------------------------------------------------------------------- */

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
