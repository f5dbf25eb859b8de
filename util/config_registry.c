/*
 * config_registry.c - the list of every module's knob table.
 *
 * Adding a module's knobs means adding one line here.  The tables are plain data with no
 * dependencies, so every process (ranks, eepd, tools) knows every knob and the unknown-variable
 * warning is never a false alarm.
 */
#include "util/config.h"
#include "util/core_knobs.h"
#include "elastic/ep/ep_knobs.h"
#include "elastic/jit/jit_knobs.h"
#include "elastic/runtime/runtime_knobs.h"
#include "control/etcd/etcd_knobs.h"
#include "control/eepd/eepd_knobs.h"
#include "control/agent/agent_knobs.h"

static const eep_knob_table_t *const eep_config_registry[] = {
    &eep_core_knob_table, &eep_ep_knob_table, &eep_jit_knob_table,   &eep_runtime_knob_table,
    &eep_etcd_knob_table, &eepd_knob_table,   &eep_agent_knob_table,
};

const eep_knob_table_t *const *eep_config_tables(size_t *count_p)
{
    *count_p = sizeof(eep_config_registry) / sizeof(eep_config_registry[0]);
    return eep_config_registry;
}
