/* rank_knobs.h - settings of a rank process's own services (eep-rank; all startup-only). */
#ifndef EEP_CONTROL_RANK_KNOBS_H
#define EEP_CONTROL_RANK_KNOBS_H

#include "util/config.h"

typedef struct {
    char    metrics_addr[EEP_KNOB_STRING_MAX]; /* EEP_RANK_METRICS_ADDR */
    int64_t slow_ms;                           /* EEP_RANK_SLOW_MS */
} eep_rank_config_t;

extern const eep_knob_table_t eep_rank_knob_table;

#endif
