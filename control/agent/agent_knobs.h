/* agent_knobs.h - settings of the rank-side agent (all startup-only). */
#ifndef EEP_AGENT_KNOBS_H
#define EEP_AGENT_KNOBS_H

#include "util/config.h"

typedef struct {
    char    job[EEP_KNOB_STRING_MAX]; /* EEP_JOB, the etcd table's: eep_etcd_job_name() */
    int64_t lease_ttl_s;
    int     rdma;
    char    gpu_uuid[EEP_KNOB_STRING_MAX];
    int64_t max_epoch_jump;
} eep_agent_config_t;

extern const eep_knob_table_t eep_agent_knob_table;

#endif
