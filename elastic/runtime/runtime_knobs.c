/* runtime_knobs.c - knob table of the data-plane runtime, its standalone bootstrap and barrier. */
#include "elastic/runtime/runtime_knobs.h"

#include <stddef.h>

/* clang-format off */
#define EEP_RT_KNOB(_name, _def, _type, _field, _min, _max, _doc)                                 \
    { _name, _def, _doc, _type, offsetof(eep_runtime_config_t, _field), EEP_KNOB_STARTUP, _min,    \
      _max }
/* clang-format on */

static const eep_knob_t eep_runtime_knobs[] = {
    EEP_RT_KNOB("EEP_TIMEOUT_MS", "30000", EEP_KNOB_INT, timeout_ms, 1, 86400000,
                "Deadline of every device wait (barriers, dispatch, combine), in milliseconds; "
                "a call may override it.  On expiry the kernel records the suspected peer and "
                "exits, and eep_poll reports EEP_ERR_PEER_TIMEOUT."),
    EEP_RT_KNOB("EEP_DEVICE", "-1", EEP_KNOB_INT, device, -1, 1023,
                "CUDA device ordinal of this rank; -1 picks rank modulo the visible GPUs."),
    EEP_RT_KNOB("EEP_WINDOW_SIZE", "32M", EEP_KNOB_SIZE, window_bytes, 0, 0,
                "Bytes of the symmetric window (ncclMemAlloc) per rank: workspace + buffers."),
    EEP_RT_KNOB("EEP_GIN", "auto", EEP_KNOB_STRING, gin, 0, 0,
                "GIN (GPU-initiated networking) for scale-out: auto (probe when the job spans "
                "nodes), probe (always probe, use it if present), off, require (fail without)."),
    EEP_RT_KNOB("EEP_INIT_TIMEOUT_MS", "120000", EEP_KNOB_INT, init_timeout_ms, 1, 86400000,
                "Deadline of communicator, window and device-communicator creation; the "
                "communicator is aborted when it passes."),
    EEP_RT_KNOB("EEP_RANK", "-1", EEP_KNOB_INT, rank, -1, 1048575,
                "Standalone bootstrap: this process's rank."),
    EEP_RT_KNOB("EEP_WORLD_SIZE", "0", EEP_KNOB_INT, world_size, 0, 1048576,
                "Standalone bootstrap: number of ranks."),
    EEP_RT_KNOB("EEP_BOOTSTRAP", "", EEP_KNOB_STRING, bootstrap, 0, 0,
                "Standalone bootstrap: file:DIR (a fresh directory every rank sees) or "
                "tcp:HOST:PORT (rank 0 listens there)."),
    EEP_RT_KNOB("EEP_BOOTSTRAP_TIMEOUT_MS", "60000", EEP_KNOB_INT, bootstrap_timeout_ms, 1,
                86400000, "Standalone bootstrap: deadline of joining and of each exchange."),
};

const eep_knob_table_t eep_runtime_knob_table = {
    .module      = "runtime",
    .knobs       = eep_runtime_knobs,
    .count       = sizeof(eep_runtime_knobs) / sizeof(eep_runtime_knobs[0]),
    .struct_size = sizeof(eep_runtime_config_t),
};
