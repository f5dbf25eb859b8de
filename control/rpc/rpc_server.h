/*
 * rpc_server.h - a gRPC server on gRPC's C core, driven by its owner's event loop.
 *
 * The owner registers methods (unary or server-streaming) by path, starts the server, and calls
 * eep_rpc_server_poll() from its one loop thread: every handler and every stream notification
 * runs on that thread, so the owner's state needs no lock.  Requests arrive as bytes (the owner
 * decodes them); replies leave as bytes.  With TLS the server requests client certificates and
 * verifies those presented; eep_rpc_call_authenticated() says whether this caller presented one.
 */
#ifndef EEP_RPC_SERVER_H
#define EEP_RPC_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "eep/status.h"

typedef struct eep_rpc_server eep_rpc_server_t;
typedef struct eep_rpc_call   eep_rpc_call_t;

typedef enum { EEP_RPC_UNARY, EEP_RPC_SERVER_STREAM } eep_rpc_kind_t;

/* gRPC status codes we answer with (the numeric values of grpc_status_code). */
enum {
    EEP_RPC_OK                  = 0,
    EEP_RPC_CANCELLED           = 1,
    EEP_RPC_INVALID_ARGUMENT    = 3,
    EEP_RPC_NOT_FOUND           = 5,
    EEP_RPC_PERMISSION_DENIED   = 7,
    EEP_RPC_RESOURCE_EXHAUSTED  = 8,
    EEP_RPC_FAILED_PRECONDITION = 9,
    EEP_RPC_UNIMPLEMENTED       = 12,
    EEP_RPC_INTERNAL            = 13,
    EEP_RPC_UNAVAILABLE         = 14,
    EEP_RPC_UNAUTHENTICATED     = 16,
};

/**
 * A request arrived.  The handler must end a unary call with eep_rpc_call_reply() or
 * eep_rpc_call_fail() (now or later, on the loop thread); a stream call stays open until the
 * owner ends it or the client goes away (then @c closed runs once and the call is gone).
 */
typedef void (*eep_rpc_handler_func_t)(eep_rpc_call_t *call, const uint8_t *req, size_t len,
                                       void *arg);
/** A stream the owner still held was closed by the client or the server shutting down. */
typedef void (*eep_rpc_closed_func_t)(eep_rpc_call_t *call, void *arg);

typedef struct {
    size_t      size;     /* sizeof(eep_rpc_server_params_t) */
    const char *listen;   /* "127.0.0.1:7070"; port 0 picks a free one */
    const char *tls_cert; /* PEM files; all NULL or "" for plaintext */
    const char *tls_key;
    const char *tls_ca;      /* CA that signs client certificates */
    size_t      max_message; /* largest request accepted; 0: 1 MiB */
} eep_rpc_server_params_t;

eep_status_t eep_rpc_server_create(const eep_rpc_server_params_t *params,
                                   eep_rpc_server_t             **server_p);
void         eep_rpc_server_destroy(eep_rpc_server_t *server);

/** Register @p path ("/eep.v1.EepControl/GetStatus") before eep_rpc_server_start(). */
eep_status_t eep_rpc_server_add_method(eep_rpc_server_t *server, const char *path,
                                       eep_rpc_kind_t kind, eep_rpc_handler_func_t handler,
                                       void *arg);

/** Bind and start serving; @p port_p (may be NULL) gets the bound port. */
eep_status_t eep_rpc_server_start(eep_rpc_server_t *server, int *port_p);

/**
 * Run completion events for at most @p timeout_ms (returns after the first event, or on timeout).
 * @return EEP_OK, EEP_ERR_TIMEOUT when nothing happened.
 */
eep_status_t eep_rpc_server_poll(eep_rpc_server_t *server, int timeout_ms);

/** @return non-zero when the caller presented a client certificate that the CA verified. */
int eep_rpc_call_authenticated(const eep_rpc_call_t *call);
/** @return the peer address ("ipv4:127.0.0.1:5555"), never NULL. */
const char *eep_rpc_call_peer(const eep_rpc_call_t *call);

/** Unary: send @p msg and status OK; the call is gone afterwards. */
eep_status_t eep_rpc_call_reply(eep_rpc_call_t *call, const uint8_t *msg, size_t len);
/** Any call: end it with @p code and @p message; the call is gone afterwards. */
eep_status_t eep_rpc_call_fail(eep_rpc_call_t *call, int code, const char *message);
/** Stream: queue one message (sent in order, one write in flight at a time). */
eep_status_t eep_rpc_call_send(eep_rpc_call_t *call, const uint8_t *msg, size_t len);
/** Stream: the owner keeps the call; @p closed runs if the client goes first. */
void eep_rpc_call_set_closed(eep_rpc_call_t *call, eep_rpc_closed_func_t closed, void *arg);

#endif
