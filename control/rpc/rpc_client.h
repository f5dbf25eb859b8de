/*
 * rpc_client.h - client side of the gRPC C-core glue: channels, unary calls, bidi streams.
 *
 * Messages are protobuf-c messages, packed into and out of grpc_byte_buffers here.  A unary call
 * runs on the caller's thread with its own pluck completion queue, so any number of threads may
 * call at once.  A stream posts its completions to a "next" completion queue that its owner's one
 * loop thread drains and hands back to eep_rpc_stream_event().  gRPC status codes and call errors
 * are translated to eep_status_t here, once (eep_status_from_grpc*), with gRPC's own message.
 */
#ifndef EEP_RPC_CLIENT_H
#define EEP_RPC_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>

#include "eep/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EEP_RPC_DETAILS_MAX 256

/**
 * grpc_init(), and gRPC's own log lines routed through eep logging (subsystem rpc; its errors as
 * warnings).  gRPC refcounts init, so every eep_rpc_init() pairs with one eep_rpc_shutdown().
 */
void eep_rpc_init(void);
void eep_rpc_shutdown(void);

typedef struct {
    size_t      size;                 /* sizeof(eep_rpc_channel_params_t) */
    const char *target;               /* "host:port"; an http:// or https:// prefix is dropped */
    int         keepalive_ms;         /* client HTTP/2 ping interval; 0: no pings */
    int         keepalive_timeout_ms; /* a ping unanswered this long closes the connection */
    int         reconnect_max_ms;     /* bound on gRPC's reconnect backoff; 0: 1000 */
    const char *ca_file;              /* PEM; NULL or "": plaintext */
    const char *cert_file;            /* client certificate for mutual TLS, or NULL */
    const char *key_file;
} eep_rpc_channel_params_t;

/**
 * Create a channel (it connects lazily, on the first call).
 * @param [in]  params     target, keepalive, TLS files.
 * @param [out] channel_p  the channel; destroy with eep_rpc_channel_destroy().
 * @return EEP_OK, EEP_ERR_INVALID_ARG (no target), EEP_ERR_IO (a TLS file unreadable).
 */
eep_status_t eep_rpc_channel_create(const eep_rpc_channel_params_t *params,
                                    grpc_channel                  **channel_p);
void         eep_rpc_channel_destroy(grpc_channel *channel);

/** Map a gRPC status code, without logging (for retry decisions). */
eep_status_t eep_rpc_status_map(grpc_status_code code);

/**
 * Translate a gRPC status, logging @p what, the code's name and gRPC's @p details.
 * UNAVAILABLE and DEADLINE_EXCEEDED -> EEP_ERR_CONTROL_UNAVAILABLE, INVALID_ARGUMENT and
 * OUT_OF_RANGE -> EEP_ERR_INVALID_ARG, NOT_FOUND -> EEP_ERR_NOT_FOUND, PERMISSION_DENIED and
 * UNAUTHENTICATED -> EEP_ERR_PERMISSION, UNIMPLEMENTED -> EEP_ERR_UNSUPPORTED, others EEP_ERR_RPC.
 */
eep_status_t eep_status_from_grpc(grpc_status_code code, const char *details, const char *what);

/** Translate a grpc_call_error (a misuse of the API: EEP_ERR_INTERNAL), logging @p what. */
eep_status_t eep_status_from_grpc_call(grpc_call_error err, const char *what);

/** @return the name of a gRPC status code ("UNAVAILABLE"). */
const char *eep_rpc_code_name(grpc_status_code code);

/** Pack @p msg into a new byte buffer (free with grpc_byte_buffer_destroy()). */
eep_status_t eep_rpc_pack(const ProtobufCMessage *msg, grpc_byte_buffer **buffer_p);

/** Unpack @p buffer as @p desc; free with protobuf_c_message_free_unpacked(msg, NULL). */
eep_status_t eep_rpc_unpack(grpc_byte_buffer *buffer, const ProtobufCMessageDescriptor *desc,
                            ProtobufCMessage **msg_p);

/** @return an absolute monotonic deadline @p ms from now. */
gpr_timespec eep_rpc_deadline_ms(int64_t ms);

/** @return the monotonic clock in milliseconds. */
int64_t eep_rpc_now_ms(void);

/* What a finished call said: gRPC's code and message (details truncated). */
typedef struct {
    grpc_status_code code;
    char             details[EEP_RPC_DETAILS_MAX];
} eep_rpc_result_t;

/**
 * One unary call, on this thread, bounded by @p deadline.  Quiet: a gRPC error is returned mapped
 * by eep_rpc_status_map() with the code and message in @p result_p, for the caller to retry or to
 * log with eep_status_from_grpc() once it gives up.
 * @param [in]  channel        the channel.
 * @param [in]  method         "/etcdserverpb.KV/Range".
 * @param [in]  request        the request message.
 * @param [in]  response_desc  descriptor of the response type.
 * @param [in]  deadline       absolute (eep_rpc_deadline_ms()).
 * @param [out] response_p     the response, on EEP_OK only.
 * @param [out] result_p       gRPC's code and details (always written).
 */
eep_status_t eep_rpc_unary(grpc_channel *channel, const char *method,
                           const ProtobufCMessage           *request,
                           const ProtobufCMessageDescriptor *response_desc, gpr_timespec deadline,
                           ProtobufCMessage **response_p, eep_rpc_result_t *result_p);

/*
 * A bidi stream.  Its completions go to the owner's completion queue with tags that
 * eep_rpc_stream_event() understands; messages are received continuously (the next read is posted
 * as soon as one arrives) and at most one send is in flight.  Lifecycle: create; send, events;
 * cancel at any time; the event with @c closed set is the last one, after which (and only after
 * which) the owner destroys the stream.
 */
typedef struct eep_rpc_stream eep_rpc_stream_t;

typedef struct {
    ProtobufCMessage *message; /* a message arrived (owned by the receiver), or NULL */
    int               sent;    /* the send in flight completed (ok or not) */
    int               closed;  /* the stream ended: the last event; result holds gRPC's status */
    eep_rpc_result_t  result;
} eep_rpc_stream_event_t;

/**
 * Start a stream call on @p cq (a GRPC_CQ_NEXT queue) with no deadline (keepalive pings notice a
 * dead peer).  @p owner is returned by eep_rpc_stream_owner().
 */
eep_status_t eep_rpc_stream_create(grpc_channel *channel, grpc_completion_queue *cq,
                                   const char                       *method,
                                   const ProtobufCMessageDescriptor *response_desc, void *owner,
                                   eep_rpc_stream_t **stream_p);

/** Send one message; EEP_ERR_BUSY while the previous send is in flight, EEP_ERR_ABORTED once
 *  the stream is closing. */
eep_status_t eep_rpc_stream_send(eep_rpc_stream_t *stream, const ProtobufCMessage *msg);

/** @return non-zero while a send is in flight. */
int eep_rpc_stream_sending(const eep_rpc_stream_t *stream);

/** Cancel the call; pending operations complete soon, then the closed event comes. */
void eep_rpc_stream_cancel(eep_rpc_stream_t *stream);

/**
 * Turn one completion of the owner's queue into a stream event.
 * @param [in]  tag       ev.tag of a GRPC_OP_COMPLETE event posted by a stream.
 * @param [in]  ok        ev.success.
 * @param [out] stream_p  the stream it belongs to.
 * @param [out] event_p   what happened (possibly nothing the owner needs to act on).
 */
void eep_rpc_stream_event(void *tag, int ok, eep_rpc_stream_t **stream_p,
                          eep_rpc_stream_event_t *event_p);

/** @return the owner given at creation. */
void *eep_rpc_stream_owner(const eep_rpc_stream_t *stream);

/** Free a stream after its closed event (before it: cancels and logs an error, leaking it). */
void eep_rpc_stream_destroy(eep_rpc_stream_t *stream);

#ifdef __cplusplus
}
#endif

#endif /* EEP_RPC_CLIENT_H */
