/* core_knobs.h - settings of the core services (logging, config file). */
#ifndef EEP_CORE_KNOBS_H
#define EEP_CORE_KNOBS_H

#include "util/config.h"

typedef struct {
    char log_level[EEP_KNOB_STRING_MAX];
    char log_subsys[EEP_KNOB_STRING_MAX];
    char log_file[EEP_KNOB_STRING_MAX];
    char config_file[EEP_KNOB_STRING_MAX];
} eep_core_config_t;

extern const eep_knob_table_t eep_core_knob_table;

#endif
