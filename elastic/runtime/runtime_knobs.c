/* runtime_knobs.c - knob table of the data-plane runtime, its standalone bootstrap and barrier. */
#include "elastic/runtime/runtime_knobs.h"

#include <stddef.h>

static const eep_knob_t eep_runtime_knobs[] = {
    EEP_KNOB_ROW(eep_runtime_config_t, "EEP_TIMEOUT_MS", "30000", EEP_KNOB_INT, timeout_ms,
                 EEP_KNOB_STARTUP, 1, 86400000,
                 "Deadline of every device wait (barriers, dispatch, combine), in milliseconds; "
                 "a call may override it.  On expiry the kernel records the suspected peer and "
                 "exits, and eep_poll reports EEP_ERR_PEER_TIMEOUT."),
    EEP_KNOB_ROW(eep_runtime_config_t, "EEP_DEVICE", "-1", EEP_KNOB_INT, device, EEP_KNOB_STARTUP,
                 -1, 1023,
                 "CUDA device ordinal of this rank; -1 picks rank modulo the visible GPUs."),
    EEP_KNOB_ROW(eep_runtime_config_t, "EEP_WINDOW_SIZE", "32M", EEP_KNOB_SIZE, window_bytes,
                 EEP_KNOB_STARTUP, 0, 0,
                 "Bytes of the symmetric window (ncclMemAlloc) per rank: workspace + buffers."),
    EEP_KNOB_ROW(eep_runtime_config_t, "EEP_GIN", "auto", EEP_KNOB_STRING, gin, EEP_KNOB_STARTUP, 0,
                 0,
                 "GIN (GPU-initiated networking) for scale-out: auto (probe when the job spans "
                 "nodes), probe (always probe, use it if present), off, require (fail without)."),
    EEP_KNOB_ROW(eep_runtime_config_t, "EEP_INIT_TIMEOUT_MS", "120000", EEP_KNOB_INT,
                 init_timeout_ms, EEP_KNOB_STARTUP, 1, 86400000,
                 "Deadline of communicator, window and device-communicator creation; the "
                 "communicator is aborted when it passes."),
    EEP_KNOB_ROW(eep_runtime_config_t, "EEP_RANK", "-1", EEP_KNOB_INT, rank, EEP_KNOB_STARTUP, -1,
                 1048575, "Standalone bootstrap: this process's rank."),
    EEP_KNOB_ROW(eep_runtime_config_t, "EEP_WORLD_SIZE", "0", EEP_KNOB_INT, world_size,
                 EEP_KNOB_STARTUP, 0, 1048576, "Standalone bootstrap: number of ranks."),
    EEP_KNOB_ROW(eep_runtime_config_t, "EEP_BOOTSTRAP", "", EEP_KNOB_STRING, bootstrap,
                 EEP_KNOB_STARTUP, 0, 0,
                 "Standalone bootstrap: file:DIR (a fresh directory every rank sees) or "
                 "tcp:HOST:PORT (rank 0 listens there)."),
    EEP_KNOB_ROW(eep_runtime_config_t, "EEP_BOOTSTRAP_TIMEOUT_MS", "60000", EEP_KNOB_INT,
                 bootstrap_timeout_ms, EEP_KNOB_STARTUP, 1, 86400000,
                 "Standalone bootstrap: deadline of joining and of each exchange."),
    EEP_KNOB_ROW(
        eep_runtime_config_t, "EEP_GPU_SHARE_DIR", "/dev/shm", EEP_KNOB_STRING, gpu_share_dir,
        EEP_KNOB_STARTUP, 0, 0,
        "Folder of the registry of runtimes per GPU (elastic/gpu/gpu_share.h): when "
        "several processes share this GPU through MPS, dispatch and combine launch without "
        "programmatic dependent launch and share its SMs out; empty: no registry (the "
        "GPU is taken as this process's alone)."),
    EEP_KNOB_ROW(eep_runtime_config_t, "EEP_VIEW_RELEASE_EARLY", "1", EEP_KNOB_BOOL,
                 view_release_early, EEP_KNOB_STARTUP, 0, 0,
                 "A fresh view (a rank added) releases the old communicator when it starts "
                 "building the new one, so that NCCL's destroy (50-512 ms) overlaps the new "
                 "one's creation instead of delaying the view (grow max 1.18 s instead of 1.70 "
                 "s on the one-GPU cluster, bench/RESULTS.md); a fresh view given up for a "
                 "newer one then leaves no communicator, and the newer view is built fresh. "
                 "0: the old communicator is released once the new one is complete."),
};

EEP_KNOB_TABLE(eep_runtime_knob_table, "runtime", eep_runtime_knobs, eep_runtime_config_t);
