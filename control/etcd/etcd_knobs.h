/* etcd_knobs.h - settings of the etcd client (endpoints, deadlines, keepalive, TLS files). */
#ifndef EEP_ETCD_KNOBS_H
#define EEP_ETCD_KNOBS_H

#include "util/config.h"

typedef struct {
    char    job[EEP_KNOB_STRING_MAX];
    char    endpoints[EEP_KNOB_STRING_MAX];
    int64_t timeout_ms;
    int64_t keepalive_ms;
    int64_t lease_grace_ms;
    char    ca_file[EEP_KNOB_STRING_MAX];
    char    cert_file[EEP_KNOB_STRING_MAX];
    char    key_file[EEP_KNOB_STRING_MAX];
} eep_etcd_config_t;

extern const eep_knob_table_t eep_etcd_knob_table;

#endif
