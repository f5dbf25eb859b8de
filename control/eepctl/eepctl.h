/*
 * eepctl.h - what eepctl's files share (internal to the CLI): the parsed options, one unary call
 * that prints its own failure, and the JSON emitters of members and views.
 */
#ifndef EEP_EEPCTL_H
#define EEP_EEPCTL_H

#include <stdint.h>

#include "proto/eep.pb-c.h"

typedef struct {
    const char *addr;
    const char *ca, *cert, *key;
    int         json;
    int         timeout_ms;
    uint64_t    from;        /* watch --from */
    long        count;       /* watch --count, top --iterations */
    int         interval_ms; /* top --interval-ms */
    const char *metrics;     /* top --metrics: eepd's /metrics URL, or NULL */
} eepctl_opts_t;

/**
 * One unary call of @p method; prints the failure (gRPC code and message) itself.
 * @param [out] resp_p  the unpacked reply on success (free with protobuf_c_message_free_unpacked).
 * @return 0, or 1 when the call failed.
 */
int eepctl_unary(const eepctl_opts_t *o, const char *method, const ProtobufCMessage *req,
                 const ProtobufCMessageDescriptor *desc, ProtobufCMessage **resp_p);

/** A JSON string of @p s on stdout (control/tool: escapes, UTF-8 checked). */
void eepctl_json_str(const char *s);

/** The member / view as one JSON object on stdout. */
void eepctl_json_member(const Eep__V1__Member *m);
void eepctl_json_view(const Eep__V1__View *v);

/**
 * eepctl top: the view's ranks and eepd's counters, refreshed every @p o->interval_ms, from the
 * sources of eepctl_top.c; @p o->count iterations (0: until interrupted).
 * @return the exit status.
 */
int eepctl_top(const eepctl_opts_t *o);

/** @return 0 when @p url is http://HOST:PORT/PATH (IPv4 or a name), else 2 after a message. */
int eepctl_top_check_url(const char *url);

#endif
