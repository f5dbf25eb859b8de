/* etcd_knobs.c - knob table of the etcd client; eep_etcd_params_t fields override these. */
#include "control/etcd/etcd_knobs.h"

#include <stddef.h>

/* clang-format off */
#define EEP_ETCD_KNOB(_name, _def, _type, _field, _min, _max, _doc)                          \
    { _name, _def, _doc, _type, offsetof(eep_etcd_config_t, _field), EEP_KNOB_STARTUP, _min,  \
      _max }
/* clang-format on */

static const eep_knob_t eep_etcd_knobs[] = {
    EEP_ETCD_KNOB("EEP_ETCD_ENDPOINTS", "127.0.0.1:2379", EEP_KNOB_STRING, endpoints, 0, 0,
                  "etcd client endpoints, comma separated host:port (an http:// or https:// "
                  "prefix is accepted); tried in turn when one is unavailable."),
    EEP_ETCD_KNOB("EEP_ETCD_TIMEOUT_MS", "5000", EEP_KNOB_INT, timeout_ms, 10, 3600000,
                  "Deadline of each etcd call in milliseconds, failover included."),
    EEP_ETCD_KNOB("EEP_ETCD_KEEPALIVE_MS", "10000", EEP_KNOB_INT, keepalive_ms, 1000, 3600000,
                  "Interval of the client's HTTP/2 keepalive pings to etcd while a watch or "
                  "lease keepalive stream is open, in milliseconds; a ping unanswered for as "
                  "long closes the connection and the stream moves on.  Keep it above etcd's "
                  "--grpc-keepalive-min-time (5 s by default), or etcd drops the connection "
                  "(too_many_pings)."),
    EEP_ETCD_KNOB("EEP_ETCD_CA", "", EEP_KNOB_STRING, ca_file, 0, 0,
                  "PEM file of the CA that signed etcd's certificate; empty: plaintext."),
    EEP_ETCD_KNOB("EEP_ETCD_CERT", "", EEP_KNOB_STRING, cert_file, 0, 0,
                  "PEM client certificate for mutual TLS (with EEP_ETCD_KEY), or empty."),
    EEP_ETCD_KNOB("EEP_ETCD_KEY", "", EEP_KNOB_STRING, key_file, 0, 0,
                  "PEM private key of EEP_ETCD_CERT, or empty."),
};

const eep_knob_table_t eep_etcd_knob_table = {
    .module      = "etcd",
    .knobs       = eep_etcd_knobs,
    .count       = sizeof(eep_etcd_knobs) / sizeof(eep_etcd_knobs[0]),
    .struct_size = sizeof(eep_etcd_config_t),
};
