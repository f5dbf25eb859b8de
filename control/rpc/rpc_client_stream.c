/*
 * rpc_client_stream.c - a client bidi stream on gRPC's C core, driven by its owner's loop.
 *
 * Four kinds of batch are in flight at most once each: start (send initial metadata), send (one
 * message), receive (the first one also receives initial metadata; re-posted as soon as a
 * message arrives) and status (posted at creation, completes when the call ends).  Each batch's
 * tag is an op record inside the stream, so a completion finds its stream without a lookup.  The
 * closed event is reported only once the status is in and no batch is pending, which makes it
 * the stream's last event and the one moment at which the owner may free it.
 */
#include "control/rpc/rpc_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

typedef enum {
    EEP_RPC_OP_START,
    EEP_RPC_OP_SEND,
    EEP_RPC_OP_RECV,
    EEP_RPC_OP_STATUS,
    EEP_RPC_OP_COUNT
} eep_rpc_op_kind_t;

typedef struct {
    eep_rpc_stream_t *stream;
    eep_rpc_op_kind_t kind;
} eep_rpc_op_t;

struct eep_rpc_stream {
    grpc_call                        *call;
    const ProtobufCMessageDescriptor *response_desc;
    void                             *owner;
    char                              method[128];
    eep_rpc_op_t                      ops[EEP_RPC_OP_COUNT];
    int                               pending[EEP_RPC_OP_COUNT];
    int                               npending;
    int                               got_initial_md;
    int                               status_in;   /* the status batch completed */
    int                               closed_sent; /* the closed event was reported */
    int                               recv_ended;  /* no more messages will come */
    grpc_byte_buffer                 *send_buf;
    grpc_byte_buffer                 *recv_buf;
    grpc_metadata_array               initial_md;
    grpc_metadata_array               trailing_md;
    grpc_status_code                  code;
    grpc_slice                        details;
};

static eep_status_t eep_rpc_stream_post(eep_rpc_stream_t *stream, eep_rpc_op_kind_t kind)
{
    grpc_op         ops[2];
    size_t          n = 0;
    grpc_call_error err;

    memset(ops, 0, sizeof(ops));
    switch (kind) {
    case EEP_RPC_OP_START:
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        break;
    case EEP_RPC_OP_SEND:
        ops[n].op                               = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = stream->send_buf;
        break;
    case EEP_RPC_OP_RECV:
        if (!stream->got_initial_md) {
            stream->got_initial_md = 1;
            ops[n].op              = GRPC_OP_RECV_INITIAL_METADATA;
            ops[n++].data.recv_initial_metadata.recv_initial_metadata = &stream->initial_md;
        }
        ops[n].op                               = GRPC_OP_RECV_MESSAGE;
        ops[n++].data.recv_message.recv_message = &stream->recv_buf;
        break;
    case EEP_RPC_OP_STATUS:
        ops[n].op                                           = GRPC_OP_RECV_STATUS_ON_CLIENT;
        ops[n].data.recv_status_on_client.trailing_metadata = &stream->trailing_md;
        ops[n].data.recv_status_on_client.status            = &stream->code;
        ops[n++].data.recv_status_on_client.status_details  = &stream->details;
        break;
    default:
        return EEP_ERR_INTERNAL;
    }
    err = grpc_call_start_batch(stream->call, ops, n, &stream->ops[kind], NULL);
    if (err != GRPC_CALL_OK) {
        return eep_status_from_grpc_call(err, stream->method);
    }
    stream->pending[kind] = 1;
    stream->npending++;
    return EEP_OK;
}

eep_status_t eep_rpc_stream_create(grpc_channel *channel, grpc_completion_queue *cq,
                                   const char                       *method,
                                   const ProtobufCMessageDescriptor *response_desc, void *owner,
                                   eep_rpc_stream_t **stream_p)
{
    eep_rpc_stream_t *stream;
    eep_status_t      status;
    int               i;

    stream = calloc(1, sizeof(*stream));
    if (stream == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    for (i = 0; i < EEP_RPC_OP_COUNT; i++) {
        stream->ops[i].stream = stream;
        stream->ops[i].kind   = (eep_rpc_op_kind_t)i;
    }
    stream->response_desc = response_desc;
    stream->owner         = owner;
    stream->code          = GRPC_STATUS_UNKNOWN;
    stream->details       = grpc_empty_slice();
    snprintf(stream->method, sizeof(stream->method), "%s", method);
    grpc_metadata_array_init(&stream->initial_md);
    grpc_metadata_array_init(&stream->trailing_md);
    stream->call = grpc_channel_create_call(channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                            grpc_slice_from_static_string(method), NULL,
                                            gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (stream->call == NULL) {
        eep_error(EEP_SUBSYS_RPC, "grpc_channel_create_call(%s) failed", method);
        status = EEP_ERR_INTERNAL;
        goto err_free;
    }
    /* The status batch first: once any batch is posted, the call must run to its status. */
    status = eep_rpc_stream_post(stream, EEP_RPC_OP_STATUS);
    if (status != EEP_OK) {
        goto err_unref;
    }
    status = eep_rpc_stream_post(stream, EEP_RPC_OP_START);
    if (status == EEP_OK) {
        status = eep_rpc_stream_post(stream, EEP_RPC_OP_RECV);
    }
    if (status != EEP_OK) {
        /* The posted batches complete after the cancel; the owner sees the closed event. */
        grpc_call_cancel(stream->call, NULL);
    }
    *stream_p = stream;
    return EEP_OK;

err_unref:
    grpc_call_unref(stream->call);
err_free:
    grpc_metadata_array_destroy(&stream->trailing_md);
    grpc_metadata_array_destroy(&stream->initial_md);
    free(stream);
    return status;
}

eep_status_t eep_rpc_stream_send(eep_rpc_stream_t *stream, const ProtobufCMessage *msg)
{
    eep_status_t status;

    if (stream->pending[EEP_RPC_OP_SEND]) {
        return EEP_ERR_BUSY;
    }
    if (stream->status_in || stream->recv_ended) {
        return EEP_ERR_ABORTED;
    }
    status = eep_rpc_pack(msg, &stream->send_buf);
    if (status != EEP_OK) {
        return status;
    }
    status = eep_rpc_stream_post(stream, EEP_RPC_OP_SEND);
    if (status != EEP_OK) {
        grpc_byte_buffer_destroy(stream->send_buf);
        stream->send_buf = NULL;
    }
    return status;
}

int eep_rpc_stream_sending(const eep_rpc_stream_t *stream)
{
    return stream->pending[EEP_RPC_OP_SEND];
}

void eep_rpc_stream_cancel(eep_rpc_stream_t *stream)
{
    if (stream != NULL && !stream->status_in) {
        grpc_call_cancel(stream->call, NULL);
    }
}

void *eep_rpc_stream_owner(const eep_rpc_stream_t *stream)
{
    return stream->owner;
}

void eep_rpc_stream_event(void *tag, int ok, eep_rpc_stream_t **stream_p,
                          eep_rpc_stream_event_t *event_p)
{
    eep_rpc_op_t     *op     = tag;
    eep_rpc_stream_t *stream = op->stream;

    memset(event_p, 0, sizeof(*event_p));
    *stream_p                 = stream;
    stream->pending[op->kind] = 0;
    stream->npending--;
    switch (op->kind) {
    case EEP_RPC_OP_START:
        if (!ok) {
            grpc_call_cancel(stream->call, NULL);
        }
        break;
    case EEP_RPC_OP_SEND:
        grpc_byte_buffer_destroy(stream->send_buf);
        stream->send_buf = NULL;
        event_p->sent    = 1;
        if (!ok) {
            grpc_call_cancel(stream->call, NULL);
        }
        break;
    case EEP_RPC_OP_RECV:
        if (ok && stream->recv_buf != NULL) {
            if (eep_rpc_unpack(stream->recv_buf, stream->response_desc, &event_p->message) !=
                EEP_OK) {
                grpc_call_cancel(stream->call, NULL);
                stream->recv_ended = 1;
            }
            grpc_byte_buffer_destroy(stream->recv_buf);
            stream->recv_buf = NULL;
            if (!stream->recv_ended && eep_rpc_stream_post(stream, EEP_RPC_OP_RECV) != EEP_OK) {
                grpc_call_cancel(stream->call, NULL);
                stream->recv_ended = 1;
            }
        } else {
            stream->recv_ended = 1; /* end of stream: the status follows */
        }
        break;
    case EEP_RPC_OP_STATUS:
        stream->status_in = 1;
        break;
    default:
        break;
    }
    if (stream->status_in && stream->npending == 0 && !stream->closed_sent) {
        stream->closed_sent  = 1;
        event_p->closed      = 1;
        event_p->result.code = stream->code;
        {
            size_t len = GRPC_SLICE_LENGTH(stream->details);

            if (len >= sizeof(event_p->result.details)) {
                len = sizeof(event_p->result.details) - 1;
            }
            memcpy(event_p->result.details, GRPC_SLICE_START_PTR(stream->details), len);
            event_p->result.details[len] = '\0';
        }
    }
}

void eep_rpc_stream_destroy(eep_rpc_stream_t *stream)
{
    if (stream == NULL) {
        return;
    }
    if (!stream->closed_sent) {
        eep_error(EEP_SUBSYS_RPC, "stream %s destroyed before it closed; leaking it",
                  stream->method);
        grpc_call_cancel(stream->call, NULL);
        return;
    }
    grpc_call_unref(stream->call);
    grpc_slice_unref(stream->details);
    grpc_metadata_array_destroy(&stream->trailing_md);
    grpc_metadata_array_destroy(&stream->initial_md);
    free(stream);
}
