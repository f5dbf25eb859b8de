/* agent_knobs.c - knob table of the rank-side agent; eep_agent_params_t fields override it. */
#include "control/agent/agent_knobs.h"

#include <stddef.h>

/* clang-format off */
#define EEP_AGENT_KNOB(_name, _def, _type, _field, _min, _max, _doc)                           \
    { _name, _def, _doc, _type, offsetof(eep_agent_config_t, _field), EEP_KNOB_STARTUP, _min,  \
      _max }
/* clang-format on */

static const eep_knob_t eep_agent_knobs[] = {
    EEP_AGENT_KNOB("EEP_JOB", "default", EEP_KNOB_STRING, job, 0, 0,
                   "Job name: every key lives under /eep/<job>/ in etcd (agents and eepd share "
                   "it)."),
    EEP_AGENT_KNOB("EEP_AGENT_LEASE_TTL_S", "5", EEP_KNOB_INT, lease_ttl_s, 1, 3600,
                   "TTL of the member lease in seconds: a dead rank leaves the view within it "
                   "plus eepd's settle window."),
    EEP_AGENT_KNOB("EEP_AGENT_RDMA", "1", EEP_KNOB_BOOL, rdma, 0, 0,
                   "Discover RDMA NICs with libibverbs and publish them in the member key."),
    EEP_AGENT_KNOB("EEP_AGENT_GPU_UUID", "", EEP_KNOB_STRING, gpu_uuid, 0, 0,
                   "GPU uuid published in the member key when the runtime passes none."),
    EEP_AGENT_KNOB("EEP_AGENT_MAX_EPOCH_JUMP", "1000000", EEP_KNOB_INT, max_epoch_jump, 1,
                   1000000000,
                   "A view whose epoch is this far past the newest one seen (or above 2^53) is "
                   "corrupt: logged and ignored, never handed to the runtime."),
};

const eep_knob_table_t eep_agent_knob_table = {
    .module      = "agent",
    .knobs       = eep_agent_knobs,
    .count       = sizeof(eep_agent_knobs) / sizeof(eep_agent_knobs[0]),
    .struct_size = sizeof(eep_agent_config_t),
};
