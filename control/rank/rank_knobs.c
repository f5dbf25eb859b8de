/*
 * rank_knobs.c - knob table of a rank process (eep-rank): its metrics endpoint, and a delay that
 * makes it the rank its peers wait for (to see `eepctl top` name it).
 */
#include "control/rank/rank_knobs.h"

#include <stddef.h>

static const eep_knob_t eep_rank_knobs[] = {
    EEP_KNOB_ROW(eep_rank_config_t, "EEP_RANK_METRICS_ADDR", "127.0.0.1:0", EEP_KNOB_STRING,
                 metrics_addr, EEP_KNOB_STARTUP, 0, 0,
                 "IPv4:PORT where a rank serves its Prometheus /metrics (port 0: any free one; "
                 "0.0.0.0 is advertised as the host name); the URL goes into its member key "
                 "(endpoint), where eepctl top finds it.  \"\" or off: no endpoint."),
    EEP_KNOB_ROW(eep_rank_config_t, "EEP_RANK_SLOW_MS", "0", EEP_KNOB_INT, slow_ms,
                 EEP_KNOB_STARTUP, 0, 600000,
                 "Test knob: eep-rank sleeps this long before each dispatch (each barrier with "
                 "--steps barrier), so its peers wait for it."),
};

EEP_KNOB_TABLE(eep_rank_knob_table, "rank", eep_rank_knobs, eep_rank_config_t);
