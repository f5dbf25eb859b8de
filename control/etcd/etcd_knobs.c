/* etcd_knobs.c - knob table of the etcd client; eep_etcd_params_t fields override these. */
#include "control/etcd/etcd_knobs.h"

#include <stddef.h>

static const eep_knob_t eep_etcd_knobs[] = {
    EEP_KNOB_ROW(eep_etcd_config_t, "EEP_JOB", "default", EEP_KNOB_STRING, job, EEP_KNOB_STARTUP, 0,
                 0,
                 "Job name: every key lives under /eep/<job>/ in etcd (agents and eepd share it)."),
    EEP_KNOB_ROW(eep_etcd_config_t, "EEP_ETCD_ENDPOINTS", "127.0.0.1:2379", EEP_KNOB_STRING,
                 endpoints, EEP_KNOB_STARTUP, 0, 0,
                 "etcd client endpoints, comma separated host:port (an http:// or https:// "
                 "prefix is accepted); tried in turn when one is unavailable."),
    EEP_KNOB_ROW(eep_etcd_config_t, "EEP_ETCD_TIMEOUT_MS", "5000", EEP_KNOB_INT, timeout_ms,
                 EEP_KNOB_STARTUP, 10, 3600000,
                 "Deadline of each etcd call in milliseconds, failover included."),
    EEP_KNOB_ROW(eep_etcd_config_t, "EEP_ETCD_KEEPALIVE_MS", "10000", EEP_KNOB_INT, keepalive_ms,
                 EEP_KNOB_STARTUP, 1000, 3600000,
                 "Interval of the client's HTTP/2 keepalive pings to etcd while a watch or "
                 "lease keepalive stream is open, in milliseconds; a ping unanswered for as "
                 "long closes the connection and the stream moves on.  Keep it above etcd's "
                 "--grpc-keepalive-min-time (5 s by default), or etcd drops the connection "
                 "(too_many_pings)."),
    EEP_KNOB_ROW(eep_etcd_config_t, "EEP_ETCD_LEASE_GRACE_MS", "0", EEP_KNOB_INT, lease_grace_ms,
                 EEP_KNOB_STARTUP, 0, 3600000,
                 "How long a lease keepalive goes on trying, past the lease's TTL counted from "
                 "its last answered keepalive, before it counts the lease lost with no word from "
                 "etcd, in milliseconds; 0: one TTL.  Only while a member holds the keepalives "
                 "on a connected channel (etcd is up and answers nothing: it elects a raft "
                 "leader, 1-2 election timeouts, which then extends every lease by TTL + "
                 "election timeout); when no member takes a connection the lease is lost at "
                 "its TTL.  Meanwhile the lease is unconfirmed (what it backs is held).  An "
                 "answer that the lease is gone ends it at once."),
    EEP_KNOB_ROW(eep_etcd_config_t, "EEP_ETCD_CA", "", EEP_KNOB_STRING, ca_file, EEP_KNOB_STARTUP,
                 0, 0, "PEM file of the CA that signed etcd's certificate; empty: plaintext."),
    EEP_KNOB_ROW(eep_etcd_config_t, "EEP_ETCD_CERT", "", EEP_KNOB_STRING, cert_file,
                 EEP_KNOB_STARTUP, 0, 0,
                 "PEM client certificate for mutual TLS (with EEP_ETCD_KEY), or empty."),
    EEP_KNOB_ROW(eep_etcd_config_t, "EEP_ETCD_KEY", "", EEP_KNOB_STRING, key_file, EEP_KNOB_STARTUP,
                 0, 0, "PEM private key of EEP_ETCD_CERT, or empty."),
};

EEP_KNOB_TABLE(eep_etcd_knob_table, "etcd", eep_etcd_knobs, eep_etcd_config_t);
