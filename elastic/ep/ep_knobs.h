/* ep_knobs.h - settings of dispatch/combine (the SM model and its overrides). */
#ifndef EEP_EP_KNOBS_H
#define EEP_EP_KNOBS_H

#include <stdint.h>

#include "util/config.h"

typedef struct eep_ep_config {
    int64_t num_sms;   /* 0: the model */
    double  link_gbps; /* 0: the device's NVLink (or the H200 default) */
    double  sm_read_gbps;
    double  sm_write_gbps;
    double  token_overhead_bytes;
    double  sm_margin;
    int64_t min_sms;
    int64_t copy_engine;     /* 1: the one-rank rank-major copy by the copy engine (2: always) */
    int64_t copy_sms;        /* 0: the device's SMs minus the sending ones */
    int64_t solo;            /* 1: one rank, rank-major: the path without records */
    int64_t trace;           /* 1: per-block time stamps of the last dispatch and combine */
    int64_t prefetch_shrink; /* 1: compile each kernel for one rank fewer in the background */
    int64_t pdl;             /* 1: programmatic dependent launch on sm_90+ */
    char    mode[EEP_KNOB_STRING_MAX]; /* auto, direct, hybrid (EEP_EP_MODE) */
} eep_ep_config_t;

extern const eep_knob_table_t eep_ep_knob_table;

#endif
