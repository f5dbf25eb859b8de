/* runtime_knobs.h - settings of the data-plane runtime, its bootstrap and its barrier. */
#ifndef EEP_RUNTIME_KNOBS_H
#define EEP_RUNTIME_KNOBS_H

#include <stdint.h>

#include "util/config.h"

typedef struct {
    int64_t  timeout_ms;                         /* EEP_TIMEOUT_MS */
    int64_t  device;                             /* EEP_DEVICE */
    uint64_t window_bytes;                       /* EEP_WINDOW_SIZE */
    char     gin[EEP_KNOB_STRING_MAX];           /* EEP_GIN: auto, probe, off, require */
    int64_t  init_timeout_ms;                    /* EEP_INIT_TIMEOUT_MS */
    int64_t  rank;                               /* EEP_RANK */
    int64_t  world_size;                         /* EEP_WORLD_SIZE */
    char     bootstrap[EEP_KNOB_STRING_MAX];     /* EEP_BOOTSTRAP */
    int64_t  bootstrap_timeout_ms;               /* EEP_BOOTSTRAP_TIMEOUT_MS */
    char     gpu_share_dir[EEP_KNOB_STRING_MAX]; /* EEP_GPU_SHARE_DIR */
    int      view_release_early;                 /* EEP_VIEW_RELEASE_EARLY */
} eep_runtime_config_t;

extern const eep_knob_table_t eep_runtime_knob_table;

#endif
