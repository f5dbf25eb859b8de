/* core_knobs.c - knob table of the core services. */
#include "util/core_knobs.h"

#include <stddef.h>

static const eep_knob_t eep_core_knobs[] = {
    EEP_KNOB_ROW(eep_core_config_t, "EEP_LOG_LEVEL", "warn", EEP_KNOB_STRING, log_level,
                 EEP_KNOB_STARTUP, 0, 0, "Log level: none, error, warn, info, debug or trace."),
    EEP_KNOB_ROW(eep_core_config_t, "EEP_LOG_SUBSYS", "all", EEP_KNOB_STRING, log_subsys,
                 EEP_KNOB_STARTUP, 0, 0,
                 "Subsystems to log, comma separated (core, config, jit, runtime, barrier, kernel, "
                 "bootstrap, etcd, agent, eepd, rpc, tool, test) or all."),
    EEP_KNOB_ROW(eep_core_config_t, "EEP_LOG_FILE", "", EEP_KNOB_STRING, log_file, EEP_KNOB_STARTUP,
                 0, 0,
                 "Append log lines to this file instead of stderr; %h is the host, %p the pid."),
    EEP_KNOB_ROW(eep_core_config_t, "EEP_CONFIG_FILE", "", EEP_KNOB_STRING, config_file,
                 EEP_KNOB_STARTUP, 0, 0,
                 "File of NAME=value lines read for knobs not set in the environment."),
};

EEP_KNOB_TABLE(eep_core_knob_table, "core", eep_core_knobs, eep_core_config_t);
