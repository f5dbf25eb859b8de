/*
 * rpc_client.c - gRPC C-core client glue: channels, status translation, message packing, unary.
 *
 * A unary call is one batch of all six client ops on a completion queue of its own (pluck type),
 * so calls from many threads never contend on a queue and a call cannot outlive its function:
 * if the pluck passes the deadline (gRPC should have ended the call by then) the call is
 * cancelled and its completion, which cancellation guarantees, is awaited before returning.
 * Channels reconnect with a short bounded backoff so that a restarted server is found again
 * within a second, not gRPC's default two minutes.
 */
#include "control/rpc/rpc_client.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include "util/clock.h"
#include "util/log.h"

/* gRPC's own log lines, through ours: its errors are mostly transport trouble that the caller
 * retries and reports itself, so they become warnings; the rest is debug. */
static void eep_rpc_gpr_log(gpr_log_func_args *args)
{
    eep_log_level_t level = args->severity == GPR_LOG_SEVERITY_ERROR ? EEP_LOG_LEVEL_WARN
                                                                     : EEP_LOG_LEVEL_DEBUG;

    if (eep_log_enabled(level, EEP_SUBSYS_RPC)) {
        eep_log_write(level, EEP_SUBSYS_RPC, args->file, args->line, "grpc: %s", args->message);
    }
}

void eep_rpc_init(void)
{
    gpr_set_log_function(eep_rpc_gpr_log);
    grpc_init();
}

void eep_rpc_shutdown(void)
{
    grpc_shutdown();
}

int64_t eep_rpc_now_ms(void)
{
    return (int64_t)eep_clock_ms();
}

gpr_timespec eep_rpc_deadline_ms(int64_t ms)
{
    if (ms < 0) {
        ms = 0;
    }
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

const char *eep_rpc_code_name(grpc_status_code code)
{
    static const char *const names[] = {
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    };

    if ((int)code >= 0 && (size_t)code < sizeof(names) / sizeof(names[0])) {
        return names[code];
    }
    return "UNKNOWN_CODE";
}

eep_status_t eep_rpc_status_map(grpc_status_code code)
{
    switch (code) {
    case GRPC_STATUS_OK:
        return EEP_OK;
    case GRPC_STATUS_UNAVAILABLE:
    case GRPC_STATUS_DEADLINE_EXCEEDED:
        return EEP_ERR_CONTROL_UNAVAILABLE;
    case GRPC_STATUS_INVALID_ARGUMENT:
    case GRPC_STATUS_OUT_OF_RANGE:
        return EEP_ERR_INVALID_ARG;
    case GRPC_STATUS_NOT_FOUND:
        return EEP_ERR_NOT_FOUND;
    case GRPC_STATUS_ALREADY_EXISTS:
        return EEP_ERR_EXISTS;
    case GRPC_STATUS_PERMISSION_DENIED:
    case GRPC_STATUS_UNAUTHENTICATED:
        return EEP_ERR_PERMISSION;
    case GRPC_STATUS_UNIMPLEMENTED:
        return EEP_ERR_UNSUPPORTED;
    default:
        return EEP_ERR_RPC;
    }
}

eep_status_t eep_status_from_grpc(grpc_status_code code, const char *details, const char *what)
{
    eep_status_t status = eep_rpc_status_map(code);

    if (status != EEP_OK) {
        eep_error(EEP_SUBSYS_RPC, "%s failed: %s: %s", what, eep_rpc_code_name(code),
                  (details != NULL && details[0] != '\0') ? details : "(no message)");
    }
    return status;
}

eep_status_t eep_status_from_grpc_call(grpc_call_error err, const char *what)
{
    if (err == GRPC_CALL_OK) {
        return EEP_OK;
    }
    eep_error(EEP_SUBSYS_RPC, "%s: grpc call error %d: %s", what, (int)err,
              grpc_call_error_to_string(err));
    return EEP_ERR_INTERNAL;
}

eep_status_t eep_rpc_pack(const ProtobufCMessage *msg, grpc_byte_buffer **buffer_p)
{
    size_t            len   = protobuf_c_message_get_packed_size(msg);
    grpc_slice        slice = grpc_slice_malloc(len);
    grpc_byte_buffer *buffer;

    protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(slice));
    buffer = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    if (buffer == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    *buffer_p = buffer;
    return EEP_OK;
}

eep_status_t eep_rpc_unpack(grpc_byte_buffer *buffer, const ProtobufCMessageDescriptor *desc,
                            ProtobufCMessage **msg_p)
{
    grpc_byte_buffer_reader reader;
    grpc_slice              slice;
    ProtobufCMessage       *msg;

    if (!grpc_byte_buffer_reader_init(&reader, buffer)) {
        eep_error(EEP_SUBSYS_RPC, "cannot read a %s message (compressed?)", desc->name);
        return EEP_ERR_RPC;
    }
    slice = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    msg = protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(slice),
                                    GRPC_SLICE_START_PTR(slice));
    if (msg == NULL) {
        eep_error(EEP_SUBSYS_RPC, "malformed %s message of %zu bytes", desc->name,
                  (size_t)GRPC_SLICE_LENGTH(slice));
        grpc_slice_unref(slice);
        return EEP_ERR_RPC;
    }
    grpc_slice_unref(slice);
    *msg_p = msg;
    return EEP_OK;
}

/* Read a whole PEM file into a NUL-terminated string. */
static eep_status_t eep_rpc_read_file(const char *path, char **text_p)
{
    FILE  *f;
    char  *text;
    long   len;
    size_t got;

    f = fopen(path, "rb");
    if (f == NULL) {
        eep_error(EEP_SUBSYS_RPC, "cannot open %s: %m", path);
        return EEP_ERR_IO;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0 ||
        len > (64 << 20)) {
        eep_error(EEP_SUBSYS_RPC, "cannot size %s: %m", path);
        fclose(f);
        return EEP_ERR_IO;
    }
    text = malloc((size_t)len + 1);
    if (text == NULL) {
        fclose(f);
        return EEP_ERR_NO_MEMORY;
    }
    got = fread(text, 1, (size_t)len, f);
    fclose(f);
    if (got != (size_t)len) {
        eep_error(EEP_SUBSYS_RPC, "short read of %s", path);
        free(text);
        return EEP_ERR_IO;
    }
    text[len] = '\0';
    *text_p   = text;
    return EEP_OK;
}

static int eep_rpc_str_set(const char *s)
{
    return s != NULL && s[0] != '\0';
}

static eep_status_t eep_rpc_credentials(const eep_rpc_channel_params_t *params,
                                        grpc_channel_credentials      **creds_p)
{
    grpc_ssl_pem_key_cert_pair pair;
    grpc_channel_credentials  *creds;
    char                      *ca = NULL, *cert = NULL, *key = NULL;
    eep_status_t               status;

    if (!eep_rpc_str_set(params->ca_file)) {
        if (eep_rpc_str_set(params->cert_file) || eep_rpc_str_set(params->key_file)) {
            eep_error(EEP_SUBSYS_RPC, "a client certificate was given without a CA file");
            return EEP_ERR_INVALID_ARG;
        }
        *creds_p = grpc_insecure_credentials_create();
        return EEP_OK;
    }
    if (eep_rpc_str_set(params->cert_file) != eep_rpc_str_set(params->key_file)) {
        eep_error(EEP_SUBSYS_RPC, "client certificate and key must be given together");
        return EEP_ERR_INVALID_ARG;
    }
    status = eep_rpc_read_file(params->ca_file, &ca);
    if (status != EEP_OK) {
        goto out;
    }
    if (eep_rpc_str_set(params->cert_file)) {
        status = eep_rpc_read_file(params->cert_file, &cert);
        if (status != EEP_OK) {
            goto out;
        }
        status = eep_rpc_read_file(params->key_file, &key);
        if (status != EEP_OK) {
            goto out;
        }
        pair.private_key = key;
        pair.cert_chain  = cert;
    }
    creds = grpc_ssl_credentials_create(ca, cert != NULL ? &pair : NULL, NULL, NULL);
    if (creds == NULL) {
        eep_error(EEP_SUBSYS_RPC, "grpc_ssl_credentials_create failed (ca %s)", params->ca_file);
        status = EEP_ERR_RPC;
        goto out;
    }
    *creds_p = creds;
out:
    free(key);
    free(cert);
    free(ca);
    return status;
}

eep_status_t eep_rpc_channel_create(const eep_rpc_channel_params_t *params,
                                    grpc_channel                  **channel_p)
{
    grpc_channel_credentials *creds = NULL;
    grpc_channel             *channel;
    grpc_arg                  args[8];
    grpc_channel_args         chargs;
    const char               *target;
    eep_status_t              status;
    int                       backoff_max, n = 0;

    if (params == NULL || params->size == 0 || !eep_rpc_str_set(params->target) ||
        channel_p == NULL) {
        eep_error(EEP_SUBSYS_RPC, "eep_rpc_channel_create: params, params->target and channel_p "
                                  "are required");
        return EEP_ERR_INVALID_ARG;
    }
    target = params->target;
    if (strncmp(target, "http://", 7) == 0) {
        target += 7;
    } else if (strncmp(target, "https://", 8) == 0) {
        target += 8;
    }
    status = eep_rpc_credentials(params, &creds);
    if (status != EEP_OK) {
        return status;
    }

    backoff_max = params->reconnect_max_ms > 0 ? params->reconnect_max_ms : 1000;
    args[n++]   = (grpc_arg){ .type          = GRPC_ARG_INTEGER,
                              .key           = GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
                              .value.integer = backoff_max < 100 ? backoff_max : 100 };
    args[n++]   = (grpc_arg){ .type          = GRPC_ARG_INTEGER,
                              .key           = GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
                              .value.integer = backoff_max < 100 ? backoff_max : 100 };
    args[n++]   = (grpc_arg){ .type          = GRPC_ARG_INTEGER,
                              .key           = GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
                              .value.integer = backoff_max };
    if (params->keepalive_ms > 0) {
        int timeout = params->keepalive_timeout_ms > 0 ? params->keepalive_timeout_ms
                                                       : params->keepalive_ms;

        args[n++] = (grpc_arg){ .type          = GRPC_ARG_INTEGER,
                                .key           = GRPC_ARG_KEEPALIVE_TIME_MS,
                                .value.integer = params->keepalive_ms };
        args[n++] = (grpc_arg){ .type          = GRPC_ARG_INTEGER,
                                .key           = GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                                .value.integer = timeout };
        /* Ping only while a call is open: etcd (grpc-go, PermitWithoutStream false) answers
         * pings on an idle connection with GOAWAY "too_many_pings" after the third.  Streams
         * are what needs a dead peer noticed; a unary call has its deadline. */
        args[n++] = (grpc_arg){ .type          = GRPC_ARG_INTEGER,
                                .key           = GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS,
                                .value.integer = 0 };
        args[n++] = (grpc_arg){ .type          = GRPC_ARG_INTEGER,
                                .key           = GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA,
                                .value.integer = 0 };
    }
    chargs.num_args = (size_t)n;
    chargs.args     = args;
    channel         = grpc_channel_create(target, creds, &chargs);
    grpc_channel_credentials_release(creds);
    if (channel == NULL) {
        eep_error(EEP_SUBSYS_RPC, "grpc_channel_create(%s) failed", target);
        return EEP_ERR_RPC;
    }
    eep_debug(EEP_SUBSYS_RPC, "channel to %s (%s, keepalive %d ms)", target,
              eep_rpc_str_set(params->ca_file) ? "tls" : "plaintext", params->keepalive_ms);
    *channel_p = channel;
    return EEP_OK;
}

void eep_rpc_channel_destroy(grpc_channel *channel)
{
    if (channel != NULL) {
        grpc_channel_destroy(channel);
    }
}

static void eep_rpc_copy_details(grpc_slice details, eep_rpc_result_t *result)
{
    size_t len = GRPC_SLICE_LENGTH(details);

    if (len >= sizeof(result->details)) {
        len = sizeof(result->details) - 1;
    }
    memcpy(result->details, GRPC_SLICE_START_PTR(details), len);
    result->details[len] = '\0';
}

eep_status_t eep_rpc_unary(grpc_channel *channel, const char *method,
                           const ProtobufCMessage           *request,
                           const ProtobufCMessageDescriptor *response_desc, gpr_timespec deadline,
                           ProtobufCMessage **response_p, eep_rpc_result_t *result_p)
{
    grpc_completion_queue *cq;
    grpc_call             *call;
    grpc_byte_buffer      *send_buf = NULL, *recv_buf = NULL;
    grpc_metadata_array    initial_md, trailing_md;
    grpc_status_code       code    = GRPC_STATUS_UNKNOWN;
    grpc_slice             details = grpc_empty_slice();
    grpc_op                ops[6];
    grpc_call_error        err;
    grpc_event             ev;
    eep_status_t           status;
    int                    tag;

    result_p->code       = GRPC_STATUS_UNKNOWN;
    result_p->details[0] = '\0';
    status               = eep_rpc_pack(request, &send_buf);
    if (status != EEP_OK) {
        return status;
    }
    cq   = grpc_completion_queue_create_for_pluck(NULL);
    call = grpc_channel_create_call(channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                    grpc_slice_from_static_string(method), NULL, deadline, NULL);
    if (call == NULL) {
        eep_error(EEP_SUBSYS_RPC, "grpc_channel_create_call(%s) failed", method);
        status = EEP_ERR_INTERNAL;
        goto out_cq;
    }
    grpc_metadata_array_init(&initial_md);
    grpc_metadata_array_init(&trailing_md);
    memset(ops, 0, sizeof(ops));
    ops[0].op                                               = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op                                               = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message                   = send_buf;
    ops[2].op                                               = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op                                               = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial_md;
    ops[4].op                                               = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message                   = &recv_buf;
    ops[5].op                                               = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata     = &trailing_md;
    ops[5].data.recv_status_on_client.status                = &code;
    ops[5].data.recv_status_on_client.status_details        = &details;
    err = grpc_call_start_batch(call, ops, 6, &tag, NULL);
    if (err != GRPC_CALL_OK) {
        status = eep_status_from_grpc_call(err, method);
        goto out_call;
    }
    /* gRPC ends the call at its deadline; the slack only covers a stuck completion. */
    ev = grpc_completion_queue_pluck(
        cq, &tag, gpr_time_add(deadline, gpr_time_from_millis(1000, GPR_TIMESPAN)), NULL);
    if (ev.type != GRPC_OP_COMPLETE) {
        eep_warn(EEP_SUBSYS_RPC, "%s: no completion 1 s past its deadline, cancelling", method);
        grpc_call_cancel(call, NULL);
        /* Cancellation guarantees the completion; the buffers are gRPC's until it comes. */
        ev = grpc_completion_queue_pluck(cq, &tag, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    }
    result_p->code = code;
    eep_rpc_copy_details(details, result_p);
    if (code != GRPC_STATUS_OK) {
        status = eep_rpc_status_map(code);
    } else if (recv_buf == NULL) {
        snprintf(result_p->details, sizeof(result_p->details), "no response message");
        result_p->code = GRPC_STATUS_INTERNAL;
        status         = EEP_ERR_RPC;
    } else {
        status = eep_rpc_unpack(recv_buf, response_desc, response_p);
        if (status != EEP_OK) {
            result_p->code = GRPC_STATUS_INTERNAL;
            snprintf(result_p->details, sizeof(result_p->details), "malformed %s",
                     response_desc->name);
        }
    }
out_call:
    if (recv_buf != NULL) {
        grpc_byte_buffer_destroy(recv_buf);
    }
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&trailing_md);
    grpc_metadata_array_destroy(&initial_md);
    grpc_call_unref(call);
out_cq:
    grpc_completion_queue_shutdown(cq);
    grpc_completion_queue_destroy(cq);
    grpc_byte_buffer_destroy(send_buf);
    return status;
}
