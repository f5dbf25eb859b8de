/* core_knobs.c - knob table of the core services. */
#include "util/core_knobs.h"

#include <stddef.h>

/* clang-format off */
#define EEP_CORE_KNOB(_name, _def, _type, _field, _doc)                                     \
    { _name, _def, _doc, _type, offsetof(eep_core_config_t, _field), EEP_KNOB_STARTUP, 0, 0 }
/* clang-format on */

static const eep_knob_t eep_core_knobs[] = {
    EEP_CORE_KNOB("EEP_LOG_LEVEL", "warn", EEP_KNOB_STRING, log_level,
                  "Log level: none, error, warn, info, debug or trace."),
    EEP_CORE_KNOB(
        "EEP_LOG_SUBSYS", "all", EEP_KNOB_STRING, log_subsys,
        "Subsystems to log, comma separated (core, config, jit, runtime, barrier, kernel, "
        "bootstrap, etcd, agent, eepd, rpc, tool, test) or all."),
    EEP_CORE_KNOB("EEP_LOG_FILE", "", EEP_KNOB_STRING, log_file,
                  "Append log lines to this file instead of stderr; %h is the host, %p the pid."),
    EEP_CORE_KNOB("EEP_CONFIG_FILE", "", EEP_KNOB_STRING, config_file,
                  "File of NAME=value lines read for knobs not set in the environment."),
};

const eep_knob_table_t eep_core_knob_table = {
    .module      = "core",
    .knobs       = eep_core_knobs,
    .count       = sizeof(eep_core_knobs) / sizeof(eep_core_knobs[0]),
    .struct_size = sizeof(eep_core_config_t),
};
