/* eepd_knobs.h - settings of the eepd controller (all startup-only). */
#ifndef EEP_EEPD_KNOBS_H
#define EEP_EEPD_KNOBS_H

#include "util/config.h"

typedef struct {
    char    job[EEP_KNOB_STRING_MAX]; /* EEP_JOB, the etcd table's: eep_etcd_job_name() */
    char    id[EEP_KNOB_STRING_MAX];
    char    listen[EEP_KNOB_STRING_MAX];
    int64_t hz;
    int64_t settle_ms;
    int64_t min_ranks;
    int64_t max_ranks;
    int64_t lease_ttl_s;
    int64_t num_experts;
    int64_t redundant_experts;
    int64_t view_history;
    int     fault_injection;
    char    tls_cert[EEP_KNOB_STRING_MAX];
    char    tls_key[EEP_KNOB_STRING_MAX];
    char    tls_ca[EEP_KNOB_STRING_MAX];
    int64_t metrics_port;
    char    metrics_addr[EEP_KNOB_STRING_MAX];
    int64_t max_message;
    int64_t max_member_bytes;
    int64_t max_view_bytes;
    int64_t max_epoch_jump;
} eepd_config_t;

extern const eep_knob_table_t eepd_knob_table;

#endif
