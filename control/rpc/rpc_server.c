/*
 * rpc_server.c - gRPC server glue on the C core: one completion queue, polled by the owner's loop.
 *
 * Each registered method keeps one grpc_server_request_registered_call outstanding, with the
 * payload read up front (GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER), so a request arrives whole
 * and the handler runs once, on the thread that polls.  Unknown methods get UNIMPLEMENTED.  A call
 * is freed when no batch of it is in flight, it has ended (status sent or client gone), and its
 * owner let go of it; that rule is in eep_rpc_call_maybe_free().
 */
#include "control/rpc/rpc_server.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/rpc/rpc_client.h"
#include "util/log.h"

#define EEP_RPC_MAX_METHODS 32
#define EEP_RPC_MAX_QUEUED  256 /* stream messages waiting for a slow client before we give up */

typedef enum {
    EEP_RPC_TAG_REQUEST, /* a registered method's call arrived */
    EEP_RPC_TAG_UNKNOWN, /* an unregistered method's call arrived */
    EEP_RPC_TAG_SEND,    /* a stream message went out */
    EEP_RPC_TAG_FINAL,   /* the status batch completed */
    EEP_RPC_TAG_CLOSE,   /* RECV_CLOSE_ON_SERVER completed */
    EEP_RPC_TAG_SHUTDOWN,
} eep_rpc_tag_type_t;

typedef struct eep_rpc_msg {
    struct eep_rpc_msg *next;
    grpc_byte_buffer   *bb;
} eep_rpc_msg_t;

typedef struct {
    eep_rpc_tag_type_t type;
    eep_rpc_call_t    *call;
    int                method; /* REQUEST */
} eep_rpc_tag_t;

typedef struct {
    char                   path[128];
    eep_rpc_kind_t         kind;
    eep_rpc_handler_func_t handler;
    void                  *arg;
    void                  *handle;
    eep_rpc_call_t        *pending; /* the call object waiting for the next request */
} eep_rpc_method_t;

struct eep_rpc_call {
    eep_rpc_server_t     *server;
    grpc_call            *call;
    int                   method; /* -1: unknown method */
    gpr_timespec          deadline;
    grpc_metadata_array   request_md;
    grpc_call_details     details; /* unknown methods */
    grpc_byte_buffer     *payload;
    int                   outstanding; /* batches in flight */
    int                   ended;       /* status batch started or client gone */
    int                   owner_holds; /* the owner may still use it */
    int                   md_sent;
    int                   sending;
    int                   finish_pending; /* status queued behind messages */
    int                   final_code;
    char                 *final_msg;
    int                   cancelled; /* RECV_CLOSE_ON_SERVER result */
    eep_rpc_msg_t        *head, *tail;
    size_t                n_queued;
    eep_rpc_closed_func_t closed;
    void                 *closed_arg;
    char                  peer[96];
    eep_rpc_tag_t         tag_request, tag_send, tag_final, tag_close;
    struct eep_rpc_call  *prev, *next; /* server's live list */
};

struct eep_rpc_server {
    grpc_server             *server;
    grpc_completion_queue   *cq;
    grpc_server_credentials *creds;
    eep_rpc_method_t         methods[EEP_RPC_MAX_METHODS];
    int                      n_methods;
    char                     listen[256];
    size_t                   max_message;
    int                      started;
    int                      shutting_down;
    eep_rpc_call_t          *unknown_pending;
    eep_rpc_call_t          *live;
    eep_rpc_tag_t            tag_shutdown;
};

/* grpc_call_error is translated by rpc_client's one wrapper (it logs gRPC's code). */
static eep_status_t eep_rpc_check(grpc_call_error err, const char *what)
{
    return err == GRPC_CALL_OK ? EEP_OK : eep_status_from_grpc_call(err, what);
}

static char *eep_rpc_read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long  n;

    if (f == NULL) {
        eep_error(EEP_SUBSYS_RPC, "cannot open %s: %m", path);
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return NULL;
    }
    buf = malloc((size_t)n + 1);
    if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf != NULL) {
        buf[n] = '\0';
    }
    fclose(f);
    return buf;
}

static gpr_timespec eep_rpc_server_deadline(int ms)
{
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

static eep_rpc_call_t *eep_rpc_call_new(eep_rpc_server_t *server, int method)
{
    eep_rpc_call_t *call = calloc(1, sizeof(*call));

    if (call == NULL) {
        return NULL;
    }
    call->server = server;
    call->method = method;
    grpc_metadata_array_init(&call->request_md);
    grpc_call_details_init(&call->details);
    call->tag_request = (eep_rpc_tag_t){ method < 0 ? EEP_RPC_TAG_UNKNOWN : EEP_RPC_TAG_REQUEST,
                                         call, method };
    call->tag_send  = (eep_rpc_tag_t){ EEP_RPC_TAG_SEND, call, method };
    call->tag_final = (eep_rpc_tag_t){ EEP_RPC_TAG_FINAL, call, method };
    call->tag_close = (eep_rpc_tag_t){ EEP_RPC_TAG_CLOSE, call, method };
    return call;
}

static void eep_rpc_call_free(eep_rpc_call_t *call)
{
    eep_rpc_msg_t *m;

    while ((m = call->head) != NULL) {
        call->head = m->next;
        grpc_byte_buffer_destroy(m->bb);
        free(m);
    }
    if (call->prev != NULL) {
        call->prev->next = call->next;
    } else if (call->server->live == call) {
        call->server->live = call->next;
    }
    if (call->next != NULL) {
        call->next->prev = call->prev;
    }
    if (call->payload != NULL) {
        grpc_byte_buffer_destroy(call->payload);
    }
    grpc_metadata_array_destroy(&call->request_md);
    grpc_call_details_destroy(&call->details);
    if (call->call != NULL) {
        grpc_call_unref(call->call);
    }
    free(call->final_msg);
    free(call);
}

static void eep_rpc_call_maybe_free(eep_rpc_call_t *call)
{
    if (call->outstanding == 0 && call->ended && !call->owner_holds) {
        eep_rpc_call_free(call);
    }
}

static eep_status_t eep_rpc_request_next(eep_rpc_server_t *server, int method)
{
    eep_rpc_call_t *call;
    grpc_call_error err;

    if (server->shutting_down) {
        return EEP_OK;
    }
    call = eep_rpc_call_new(server, method);
    if (call == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    if (method >= 0) {
        err = grpc_server_request_registered_call(
            server->server, server->methods[method].handle, &call->call, &call->deadline,
            &call->request_md, &call->payload, server->cq, server->cq, &call->tag_request);
        server->methods[method].pending = call;
    } else {
        err = grpc_server_request_call(server->server, &call->call, &call->details,
                                       &call->request_md, server->cq, server->cq,
                                       &call->tag_request);
        server->unknown_pending = call;
    }
    if (err != GRPC_CALL_OK) {
        eep_rpc_call_free(call);
        if (method >= 0) {
            server->methods[method].pending = NULL;
        } else {
            server->unknown_pending = NULL;
        }
        return eep_rpc_check(err, "grpc_server_request_call");
    }
    return EEP_OK;
}

eep_status_t eep_rpc_server_create(const eep_rpc_server_params_t *params,
                                   eep_rpc_server_t             **server_p)
{
    eep_rpc_server_t *server;
    char             *cert = NULL, *key = NULL, *ca = NULL;
    eep_status_t      status;

    if (params == NULL || params->size < sizeof(*params) || params->listen == NULL ||
        server_p == NULL) {
        eep_error(EEP_SUBSYS_RPC, "eep_rpc_server_create: params and listen are required");
        return EEP_ERR_INVALID_ARG;
    }
    server = calloc(1, sizeof(*server));
    if (server == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    snprintf(server->listen, sizeof(server->listen), "%s", params->listen);
    server->max_message = params->max_message ? params->max_message : (1u << 20);
    if (params->tls_cert != NULL && params->tls_cert[0] != '\0') {
        grpc_ssl_pem_key_cert_pair pair;

        cert = eep_rpc_read_file(params->tls_cert);
        key  = params->tls_key != NULL ? eep_rpc_read_file(params->tls_key) : NULL;
        ca = params->tls_ca != NULL && params->tls_ca[0] ? eep_rpc_read_file(params->tls_ca) : NULL;
        if (cert == NULL || key == NULL || ca == NULL) {
            eep_error(EEP_SUBSYS_RPC, "tls needs a readable certificate, key and client ca");
            status = EEP_ERR_INVALID_ARG;
            goto err_free_pem;
        }
        pair.private_key = key;
        pair.cert_chain  = cert;
        /* Request a certificate and verify it if presented: read-only calls stay open to
         * clients without one; mutating calls check eep_rpc_call_authenticated(). */
        server->creds = grpc_ssl_server_credentials_create_ex(
            ca, &pair, 1, GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY, NULL);
    } else {
        server->creds = grpc_insecure_server_credentials_create();
    }
    free(cert);
    free(key);
    free(ca);
    cert = key = ca = NULL;
    if (server->creds == NULL) {
        eep_error(EEP_SUBSYS_RPC, "cannot create server credentials");
        status = EEP_ERR_RPC;
        goto err_free_server;
    }
    eep_rpc_init(); /* refcounted; also routes gRPC's log lines through eep logging */
    {
        grpc_arg          args[2];
        grpc_channel_args cargs;

        args[0].type          = GRPC_ARG_INTEGER;
        args[0].key           = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
        args[0].value.integer = (int)server->max_message;
        args[1].type          = GRPC_ARG_INTEGER;
        args[1].key           = (char *)GRPC_ARG_ALLOW_REUSEPORT;
        args[1].value.integer = 0;
        cargs.num_args        = 2;
        cargs.args            = args;
        server->server        = grpc_server_create(&cargs, NULL);
    }
    server->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(server->server, server->cq, NULL);
    server->tag_shutdown.type = EEP_RPC_TAG_SHUTDOWN;
    *server_p                 = server;
    return EEP_OK;

err_free_pem:
    free(cert);
    free(key);
    free(ca);
err_free_server:
    free(server);
    return status;
}

eep_status_t eep_rpc_server_add_method(eep_rpc_server_t *server, const char *path,
                                       eep_rpc_kind_t kind, eep_rpc_handler_func_t handler,
                                       void *arg)
{
    eep_rpc_method_t *m;

    if (server == NULL || path == NULL || handler == NULL || server->started ||
        server->n_methods == EEP_RPC_MAX_METHODS || strlen(path) >= sizeof(m->path)) {
        eep_error(EEP_SUBSYS_RPC, "eep_rpc_server_add_method: bad argument or too late (%s)",
                  path ? path : "(null)");
        return EEP_ERR_INVALID_ARG;
    }
    m = &server->methods[server->n_methods];
    snprintf(m->path, sizeof(m->path), "%s", path);
    m->kind    = kind;
    m->handler = handler;
    m->arg     = arg;
    m->handle  = grpc_server_register_method(server->server, m->path, NULL,
                                             GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    if (m->handle == NULL) {
        eep_error(EEP_SUBSYS_RPC, "cannot register method %s", path);
        return EEP_ERR_RPC;
    }
    server->n_methods++;
    return EEP_OK;
}

eep_status_t eep_rpc_server_start(eep_rpc_server_t *server, int *port_p)
{
    eep_status_t status;
    int          port, i;

    if (server == NULL || server->started) {
        return EEP_ERR_INVALID_ARG;
    }
    port = grpc_server_add_http2_port(server->server, server->listen, server->creds);
    if (port == 0) {
        eep_error(EEP_SUBSYS_RPC, "cannot listen on %s", server->listen);
        return EEP_ERR_IO;
    }
    grpc_server_start(server->server);
    server->started = 1;
    for (i = 0; i < server->n_methods; i++) {
        status = eep_rpc_request_next(server, i);
        if (status != EEP_OK) {
            return status;
        }
    }
    status = eep_rpc_request_next(server, -1);
    if (status != EEP_OK) {
        return status;
    }
    eep_info(EEP_SUBSYS_RPC, "serving on %s (port %d)", server->listen, port);
    if (port_p != NULL) {
        *port_p = port;
    }
    return EEP_OK;
}

static void eep_rpc_track(eep_rpc_call_t *call)
{
    eep_rpc_server_t *server = call->server;

    call->prev = NULL;
    call->next = server->live;
    if (server->live != NULL) {
        server->live->prev = call;
    }
    server->live = call;
}

static void eep_rpc_peer_fill(eep_rpc_call_t *call)
{
    char *peer = grpc_call_get_peer(call->call);

    snprintf(call->peer, sizeof(call->peer), "%s", peer != NULL ? peer : "?");
    gpr_free(peer);
}

/* Start the status batch now (nothing queued) or after the queued messages drain. */
static eep_status_t eep_rpc_start_final(eep_rpc_call_t *call)
{
    grpc_op         ops[3];
    size_t          n = 0;
    grpc_slice      details;
    grpc_call_error err;

    memset(ops, 0, sizeof(ops));
    if (!call->md_sent) {
        ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
        n++;
        call->md_sent = 1;
    }
    details   = grpc_slice_from_copied_string(call->final_msg != NULL ? call->final_msg : "");
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status         = (grpc_status_code)call->final_code;
    ops[n].data.send_status_from_server.status_details = &details;
    ops[n].data.send_status_from_server.trailing_metadata_count = 0;
    n++;
    err = grpc_call_start_batch(call->call, ops, n, &call->tag_final, NULL);
    grpc_slice_unref(details);
    if (err != GRPC_CALL_OK) {
        return eep_rpc_check(err, "grpc_call_start_batch(status)");
    }
    call->outstanding++;
    return EEP_OK;
}

static eep_status_t eep_rpc_send_next(eep_rpc_call_t *call)
{
    grpc_op         ops[2];
    size_t          n = 0;
    eep_rpc_msg_t  *m = call->head;
    grpc_call_error err;

    if (call->sending || m == NULL) {
        return EEP_OK;
    }
    memset(ops, 0, sizeof(ops));
    if (!call->md_sent) {
        ops[n++].op   = GRPC_OP_SEND_INITIAL_METADATA;
        call->md_sent = 1;
    }
    ops[n].op                             = GRPC_OP_SEND_MESSAGE;
    ops[n].data.send_message.send_message = m->bb;
    n++;
    err = grpc_call_start_batch(call->call, ops, n, &call->tag_send, NULL);
    if (err != GRPC_CALL_OK) {
        return eep_rpc_check(err, "grpc_call_start_batch(send)");
    }
    call->sending = 1;
    call->outstanding++;
    return EEP_OK;
}

static grpc_byte_buffer *eep_rpc_bb_from(const uint8_t *msg, size_t len)
{
    grpc_slice        s  = grpc_slice_from_copied_buffer((const char *)msg, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);

    grpc_slice_unref(s);
    return bb;
}

eep_status_t eep_rpc_call_send(eep_rpc_call_t *call, const uint8_t *msg, size_t len)
{
    eep_rpc_msg_t *m;

    if (call == NULL || (msg == NULL && len > 0)) {
        return EEP_ERR_INVALID_ARG;
    }
    if (call->ended || call->finish_pending) {
        return EEP_ERR_PEER_LOST;
    }
    if (call->n_queued >= EEP_RPC_MAX_QUEUED) {
        eep_warn(EEP_SUBSYS_RPC, "stream to %s has %zu unsent messages: the client does not read",
                 call->peer, call->n_queued);
        return EEP_ERR_NO_RESOURCE;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    m->bb = eep_rpc_bb_from(msg, len);
    if (call->tail != NULL) {
        call->tail->next = m;
    } else {
        call->head = m;
    }
    call->tail = m;
    call->n_queued++;
    return eep_rpc_send_next(call);
}

static eep_status_t eep_rpc_call_end(eep_rpc_call_t *call, int code, const char *message)
{
    eep_status_t status = EEP_OK;

    call->owner_holds = 0;
    if (!call->ended && !call->finish_pending && code != EEP_RPC_OK &&
        (call->sending || call->head != NULL)) {
        /* An error on a stream with writes pending (a client that does not read): do not wait
         * behind them, cancel.  The in-flight write and RECV_CLOSE then complete, failed. */
        eep_rpc_msg_t *m = call->head != NULL ? call->head->next : NULL, *next;

        for (; m != NULL; m = next) {
            next = m->next;
            grpc_byte_buffer_destroy(m->bb);
            free(m);
            call->n_queued--;
        }
        if (call->head != NULL) {
            call->head->next = NULL;
            call->tail       = call->head;
        }
        grpc_call_cancel_with_status(call->call, (grpc_status_code)code,
                                     message != NULL ? message : "", NULL);
        call->ended = 1;
    }
    if (!call->ended && !call->finish_pending) {
        call->final_code = code;
        call->final_msg  = strdup(message != NULL ? message : "");
        if (call->sending || call->head != NULL) {
            call->finish_pending = 1;
        } else {
            call->ended = 1;
            status      = eep_rpc_start_final(call);
        }
    }
    eep_rpc_call_maybe_free(call);
    return status;
}

eep_status_t eep_rpc_call_reply(eep_rpc_call_t *call, const uint8_t *msg, size_t len)
{
    eep_status_t status;

    if (call == NULL) {
        return EEP_ERR_INVALID_ARG;
    }
    status = eep_rpc_call_send(call, msg, len);
    if (status != EEP_OK) {
        call->owner_holds = 0;
        eep_rpc_call_maybe_free(call);
        return status;
    }
    return eep_rpc_call_end(call, EEP_RPC_OK, "");
}

eep_status_t eep_rpc_call_fail(eep_rpc_call_t *call, int code, const char *message)
{
    if (call == NULL) {
        return EEP_ERR_INVALID_ARG;
    }
    eep_debug(EEP_SUBSYS_RPC, "call from %s ends with code %d: %s", call->peer, code,
              message ? message : "");
    return eep_rpc_call_end(call, code, message);
}

void eep_rpc_call_set_closed(eep_rpc_call_t *call, eep_rpc_closed_func_t closed, void *arg)
{
    call->closed     = closed;
    call->closed_arg = arg;
}

int eep_rpc_call_authenticated(const eep_rpc_call_t *call)
{
    grpc_auth_context *ctx;
    int                ok;

    if (call == NULL || call->call == NULL) {
        return 0;
    }
    ctx = grpc_call_auth_context(call->call);
    if (ctx == NULL) {
        return 0;
    }
    ok = grpc_auth_context_peer_is_authenticated(ctx);
    grpc_auth_context_release(ctx);
    return ok;
}

const char *eep_rpc_call_peer(const eep_rpc_call_t *call)
{
    return call != NULL ? call->peer : "?";
}

static void eep_rpc_on_request(eep_rpc_server_t *server, eep_rpc_call_t *call, int ok)
{
    eep_rpc_method_t       *m = call->method >= 0 ? &server->methods[call->method] : NULL;
    grpc_byte_buffer_reader reader;
    grpc_slice              slice        = grpc_empty_slice();
    int                     have_payload = 0;
    grpc_op                 op;
    grpc_call_error         err;

    if (m != NULL) {
        m->pending = NULL;
    } else {
        server->unknown_pending = NULL;
    }
    if (!ok) { /* shutting down: the request was never matched */
        eep_rpc_call_free(call);
        return;
    }
    eep_rpc_request_next(server, call->method);
    eep_rpc_track(call);
    eep_rpc_peer_fill(call);
    call->owner_holds = 1;
    /* Learn when the call is over (client cancel, deadline, or our status). */
    memset(&op, 0, sizeof(op));
    op.op                                  = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &call->cancelled;
    err = grpc_call_start_batch(call->call, &op, 1, &call->tag_close, NULL);
    if (eep_rpc_check(err, "grpc_call_start_batch(recv close)") != EEP_OK) {
        call->owner_holds = 0;
        call->ended       = 1;
        eep_rpc_call_maybe_free(call);
        return;
    }
    call->outstanding++;
    if (m == NULL) {
        eep_rpc_call_fail(call, EEP_RPC_UNIMPLEMENTED, "unknown method");
        return;
    }
    if (call->payload == NULL) {
        eep_rpc_call_fail(call, EEP_RPC_INVALID_ARGUMENT, "no request message");
        return;
    }
    if (!grpc_byte_buffer_reader_init(&reader, call->payload)) {
        eep_rpc_call_fail(call, EEP_RPC_INTERNAL, "cannot read request");
        return;
    }
    slice = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    have_payload = 1;
    m->handler(call, GRPC_SLICE_START_PTR(slice), GRPC_SLICE_LENGTH(slice), m->arg);
    if (have_payload) {
        grpc_slice_unref(slice);
    }
}

static void eep_rpc_on_event(eep_rpc_server_t *server, eep_rpc_tag_t *tag, int ok)
{
    eep_rpc_call_t *call = tag->call;
    eep_rpc_msg_t  *m;

    switch (tag->type) {
    case EEP_RPC_TAG_REQUEST:
    case EEP_RPC_TAG_UNKNOWN:
        eep_rpc_on_request(server, call, ok);
        return;
    case EEP_RPC_TAG_SEND:
        call->outstanding--;
        call->sending = 0;
        m             = call->head;
        if (m != NULL) {
            call->head = m->next;
            if (call->head == NULL) {
                call->tail = NULL;
            }
            call->n_queued--;
            grpc_byte_buffer_destroy(m->bb);
            free(m);
        }
        if (!ok) {
            call->ended = 1;
        } else if (call->head != NULL) {
            eep_rpc_send_next(call);
        } else if (call->finish_pending && !call->ended) {
            call->finish_pending = 0;
            call->ended          = 1;
            eep_rpc_start_final(call);
        }
        break;
    case EEP_RPC_TAG_FINAL:
        call->outstanding--;
        call->ended = 1;
        break;
    case EEP_RPC_TAG_CLOSE:
        call->outstanding--;
        call->ended = 1;
        if (call->owner_holds) {
            /* The client left (or the deadline passed) while the owner held the stream. */
            call->owner_holds = 0;
            if (call->closed != NULL) {
                call->closed(call, call->closed_arg);
            }
        }
        break;
    case EEP_RPC_TAG_SHUTDOWN:
        return;
    }
    eep_rpc_call_maybe_free(call);
}

eep_status_t eep_rpc_server_poll(eep_rpc_server_t *server, int timeout_ms)
{
    grpc_event ev;

    if (server == NULL || !server->started) {
        return EEP_ERR_INVALID_ARG;
    }
    ev = grpc_completion_queue_next(server->cq, eep_rpc_server_deadline(timeout_ms), NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
        return EEP_ERR_TIMEOUT;
    }
    if (ev.type == GRPC_OP_COMPLETE) {
        eep_rpc_on_event(server, (eep_rpc_tag_t *)ev.tag, ev.success);
        return EEP_OK;
    }
    return EEP_ERR_ABORTED;
}

void eep_rpc_server_destroy(eep_rpc_server_t *server)
{
    grpc_event ev;
    int        seen_shutdown = 0;

    if (server == NULL) {
        return;
    }
    server->shutting_down = 1;
    if (server->started) {
        grpc_server_shutdown_and_notify(server->server, server->cq, &server->tag_shutdown);
        grpc_server_cancel_all_calls(server->server);
        /* Every outstanding batch completes (failed) and streams the owner holds get their
         * closed callback, before the server may be destroyed. */
        while (!seen_shutdown) {
            ev = grpc_completion_queue_next(server->cq, eep_rpc_server_deadline(5000), NULL);
            if (ev.type != GRPC_OP_COMPLETE) {
                eep_warn(EEP_SUBSYS_RPC, "server shutdown did not complete in 5 s");
                break;
            }
            seen_shutdown = ((eep_rpc_tag_t *)ev.tag)->type == EEP_RPC_TAG_SHUTDOWN;
            eep_rpc_on_event(server, (eep_rpc_tag_t *)ev.tag, ev.success);
        }
    }
    grpc_server_destroy(server->server);
    grpc_completion_queue_shutdown(server->cq);
    for (;;) {
        ev = grpc_completion_queue_next(server->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) {
            break;
        }
        if (ev.type == GRPC_OP_COMPLETE) {
            eep_rpc_on_event(server, (eep_rpc_tag_t *)ev.tag, ev.success);
        }
    }
    grpc_completion_queue_destroy(server->cq);
    while (server->live != NULL) {
        server->live->owner_holds = 0;
        eep_rpc_call_free(server->live);
    }
    grpc_server_credentials_release(server->creds);
    eep_rpc_shutdown();
    free(server);
}
