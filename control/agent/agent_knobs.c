/* agent_knobs.c - knob table of the rank-side agent; eep_agent_params_t fields override it. */
#include "control/agent/agent_knobs.h"

#include <stddef.h>

static const eep_knob_t eep_agent_knobs[] = {
    EEP_KNOB_ROW(eep_agent_config_t, "EEP_AGENT_LEASE_TTL_S", "5", EEP_KNOB_INT, lease_ttl_s,
                 EEP_KNOB_STARTUP, 1, 3600,
                 "TTL of the member lease in seconds: a dead rank leaves the view within it "
                 "plus eepd's settle window."),
    EEP_KNOB_ROW(eep_agent_config_t, "EEP_AGENT_RDMA", "1", EEP_KNOB_BOOL, rdma, EEP_KNOB_STARTUP,
                 0, 0, "Discover RDMA NICs with libibverbs and publish them in the member key."),
    EEP_KNOB_ROW(eep_agent_config_t, "EEP_AGENT_GPU_UUID", "", EEP_KNOB_STRING, gpu_uuid,
                 EEP_KNOB_STARTUP, 0, 0,
                 "GPU uuid published in the member key when the runtime passes none."),
    EEP_KNOB_ROW(eep_agent_config_t, "EEP_AGENT_MAX_EPOCH_JUMP", "1000000", EEP_KNOB_INT,
                 max_epoch_jump, EEP_KNOB_STARTUP, 1, 1000000000,
                 "A view whose epoch is this far past the newest one seen (or above 2^53) is "
                 "corrupt: logged and ignored, never handed to the runtime."),
};

EEP_KNOB_TABLE(eep_agent_knob_table, "agent", eep_agent_knobs, eep_agent_config_t);
