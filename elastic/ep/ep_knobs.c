/* ep_knobs.c - knob table of dispatch/combine: the SM model's constants and overrides. */
#include "elastic/ep/ep_knobs.h"

#include <stddef.h>

static const eep_knob_t eep_ep_knobs[] = {
    EEP_KNOB_ROW(eep_ep_config_t, "EEP_EP_NUM_SMS", "0", EEP_KNOB_INT, num_sms, EEP_KNOB_RUNTIME, 0,
                 1024,
                 "SM budget of dispatch/combine (senders and copiers together) when a call "
                 "passes num_sms = 0; 0: the whole device, the bandwidth model's split "
                 "(docs/dispatch.md 5)."),
    EEP_KNOB_ROW(eep_ep_config_t, "EEP_EP_LINK_GBPS", "0", EEP_KNOB_DOUBLE, link_gbps,
                 EEP_KNOB_RUNTIME, 0, 0,
                 "NVLink bandwidth out of one GPU in GB/s for the SM model; 0: measured from the "
                 "device's links, else 430 (H200, 18 links x 26.56 GB/s x 0.9)."),
    EEP_KNOB_ROW(eep_ep_config_t, "EEP_EP_SM_READ_GBPS", "200", EEP_KNOB_DOUBLE, sm_read_gbps,
                 EEP_KNOB_RUNTIME, 0, 0,
                 "SM model: what one SM reads from HBM, GB/s (DeepEP: 200)."),
    EEP_KNOB_ROW(eep_ep_config_t, "EEP_EP_SM_WRITE_GBPS", "50", EEP_KNOB_DOUBLE, sm_write_gbps,
                 EEP_KNOB_RUNTIME, 0, 0,
                 "SM model: what one SM writes to peers for large tokens, GB/s (DeepEP: 50)."),
    EEP_KNOB_ROW(eep_ep_config_t, "EEP_EP_TOKEN_OVERHEAD_BYTES", "1024", EEP_KNOB_DOUBLE,
                 token_overhead_bytes, EEP_KNOB_RUNTIME, 0, 0,
                 "SM model: fixed per-token cost expressed as bytes of write time "
                 "(uncalibrated guess; eep-bench --sweep-sms measures it)."),
    EEP_KNOB_ROW(eep_ep_config_t, "EEP_EP_SM_MARGIN", "1.25", EEP_KNOB_DOUBLE, sm_margin,
                 EEP_KNOB_RUNTIME, 0, 0,
                 "SM model: safety factor on the computed SM count (DeepEP: 1.25)."),
    EEP_KNOB_ROW(eep_ep_config_t, "EEP_EP_MIN_SMS", "4", EEP_KNOB_INT, min_sms, EEP_KNOB_RUNTIME, 1,
                 1024, "SM model: the fewest SMs it picks."),
    EEP_KNOB_ROW(eep_ep_config_t, "EEP_EP_COPY_SMS", "0", EEP_KNOB_INT, copy_sms, EEP_KNOB_RUNTIME,
                 0, 1024,
                 "Blocks that copy received tokens into the expert-major outputs; without a "
                 "budget beside the model's senders (0: the device's SMs minus those), within "
                 "a budget at most its size - 1 (0: the model's split of it)."),
    EEP_KNOB_ROW(eep_ep_config_t, "EEP_EP_COPY_ENGINE", "1", EEP_KNOB_INT, copy_engine,
                 EEP_KNOB_RUNTIME, 0, 2,
                 "1: at one rank a rank-major dispatch without an SM budget (or with the "
                 "whole device) moves x to recv_x with cuMemcpyDtoDAsync where that measured "
                 "faster (elastic/ep/ep_solo.c has the sizes), and the kernels write the rest; "
                 "never within a smaller budget, since the driver runs that copy as a kernel "
                 "on every free SM; 2: always, past the budget (for measurement); 0: never."),
    EEP_KNOB_ROW(eep_ep_config_t, "EEP_EP_SOLO", "1", EEP_KNOB_INT, solo, EEP_KNOB_RUNTIME, 0, 1,
                 "1: at one rank (direct mode), a rank-major dispatch takes the path without "
                 "records (kernels/ep/dispatch_solo.cuh: each block routes and numbers its "
                 "tokens, one exchange of counts, rows written in place); 0: the general kernel "
                 "(records to itself), for measurement."),
    EEP_KNOB_ROW(eep_ep_config_t, "EEP_EP_TRACE", "0", EEP_KNOB_INT, trace, EEP_KNOB_RUNTIME, 0, 1,
                 "1: the kernels stamp %globaltimer at each phase, per block, for the last "
                 "dispatch and combine (eep-bench ep --trace prints them); costs a few stores."),
    EEP_KNOB_ROW(eep_ep_config_t, "EEP_EP_PREFETCH_SHRINK", "1", EEP_KNOB_INT, prefetch_shrink,
                 EEP_KNOB_RUNTIME, 0, 1,
                 "1: when a kernel is first built, compile the same kernel for one rank fewer on "
                 "the JIT's background thread (nice 10), so that survivors of a lost rank need no "
                 "compiler in their recovery; 0: compile it when first used."),
    EEP_KNOB_ROW(eep_ep_config_t, "EEP_EP_PDL", "1", EEP_KNOB_INT, pdl, EEP_KNOB_RUNTIME, 0, 1,
                 "1: launch dispatch and combine with programmatic dependent launch (sm_90 and "
                 "later): a kernel is scheduled while the stream's previous kernel finishes and "
                 "waits on the device for it, which hides most of the launch gap; 0: plain "
                 "launches."),
    EEP_KNOB_ROW(eep_ep_config_t, "EEP_EP_MODE", "auto", EEP_KNOB_STRING, mode, EEP_KNOB_STARTUP, 0,
                 0,
                 "auto: direct mode (NVLink stores only) when every rank is an LSA peer of every "
                 "other, hybrid mode (peers of other nodes over GIN put + signal) otherwise, from "
                 "the device communicator's teams; direct or hybrid forces one (a forced mode "
                 "the runtime cannot run is an error, never a silent fallback)."),
};

EEP_KNOB_TABLE(eep_ep_knob_table, "ep", eep_ep_knobs, eep_ep_config_t);
