/* eepd_knobs.c - knob table of the eepd controller. */
#include "control/eepd/eepd_knobs.h"

#include <stddef.h>

static const eep_knob_t eepd_knobs[] = {
    EEP_KNOB_ROW(eepd_config_t, "EEP_EEPD_ID", "", EEP_KNOB_STRING, id, EEP_KNOB_STARTUP, 0, 0,
                 "Replica id written to the leader key; empty: <host>:<pid>:<listen port>."),
    EEP_KNOB_ROW(eepd_config_t, "EEP_EEPD_LISTEN", "127.0.0.1:7070", EEP_KNOB_STRING, listen,
                 EEP_KNOB_STARTUP, 0, 0, "gRPC listen address of the EepControl service."),
    EEP_KNOB_ROW(eepd_config_t, "EEP_EEPD_HZ", "50", EEP_KNOB_INT, hz, EEP_KNOB_STARTUP, 1, 1000,
                 "Cron frequency: election, settle window, metrics; also bounds event latency."),
    EEP_KNOB_ROW(eepd_config_t, "EEP_EEPD_SETTLE_MS", "500", EEP_KNOB_INT, settle_ms,
                 EEP_KNOB_STARTUP, 0, 600000,
                 "Settle window: publish a change once membership was quiet this long (at most 4x "
                 "after the first change); leave, drain and faults skip it."),
    EEP_KNOB_ROW(eepd_config_t, "EEP_EEPD_MIN_RANKS", "1", EEP_KNOB_INT, min_ranks,
                 EEP_KNOB_STARTUP, 1, 1000000, "No view is published with fewer ranks."),
    EEP_KNOB_ROW(eepd_config_t, "EEP_EEPD_MAX_RANKS", "0", EEP_KNOB_INT, max_ranks,
                 EEP_KNOB_STARTUP, 0, 1000000,
                 "Largest view; extra members wait as standby (0: unbounded)."),
    EEP_KNOB_ROW(eepd_config_t, "EEP_EEPD_LEASE_TTL_S", "3", EEP_KNOB_INT, lease_ttl_s,
                 EEP_KNOB_STARTUP, 1, 3600,
                 "TTL of the leader lease in seconds: a dead leader is replaced within it."),
    EEP_KNOB_ROW(eepd_config_t, "EEP_EEPD_NUM_EXPERTS", "0", EEP_KNOB_INT, num_experts,
                 EEP_KNOB_STARTUP, 0, 1000000,
                 "Experts placed evenly over the ranks of each view (0: no placement)."),
    EEP_KNOB_ROW(eepd_config_t, "EEP_EEPD_REDUNDANT_EXPERTS", "0", EEP_KNOB_INT, redundant_experts,
                 EEP_KNOB_STARTUP, 0, 64, "Extra copies of each expert, on the following ranks."),
    EEP_KNOB_ROW(eepd_config_t, "EEP_EEPD_VIEW_HISTORY", "100", EEP_KNOB_INT, view_history,
                 EEP_KNOB_STARTUP, 1, 1000000,
                 "views/<epoch> keys kept in etcd; older ones are deleted with each publish."),
    EEP_KNOB_ROW(eepd_config_t, "EEP_EEPD_FAULT_INJECTION", "0", EEP_KNOB_BOOL, fault_injection,
                 EEP_KNOB_STARTUP, 0, 0,
                 "Enable the InjectFault RPC (testing only; startup only)."),
    EEP_KNOB_ROW(eepd_config_t, "EEP_EEPD_TLS_CERT", "", EEP_KNOB_STRING, tls_cert,
                 EEP_KNOB_STARTUP, 0, 0,
                 "PEM server certificate; empty: plaintext gRPC (bind to loopback then)."),
    EEP_KNOB_ROW(eepd_config_t, "EEP_EEPD_TLS_KEY", "", EEP_KNOB_STRING, tls_key, EEP_KNOB_STARTUP,
                 0, 0, "PEM private key of EEP_EEPD_TLS_CERT."),
    EEP_KNOB_ROW(eepd_config_t, "EEP_EEPD_TLS_CA", "", EEP_KNOB_STRING, tls_ca, EEP_KNOB_STARTUP, 0,
                 0, "PEM CA that signs client certificates; mutating calls need one under TLS."),
    EEP_KNOB_ROW(eepd_config_t, "EEP_EEPD_METRICS_PORT", "0", EEP_KNOB_INT, metrics_port,
                 EEP_KNOB_STARTUP, 0, 65535,
                 "HTTP port of /metrics (Prometheus), /healthz (200 while etcd answers; the body "
                 "says whether this replica leads) and /livez (200 while the loop runs); 0: off."),
    EEP_KNOB_ROW(eepd_config_t, "EEP_EEPD_METRICS_ADDR", "127.0.0.1", EEP_KNOB_STRING, metrics_addr,
                 EEP_KNOB_STARTUP, 0, 0,
                 "IPv4 address the HTTP port binds (0.0.0.0: every interface, as in a pod)."),
    EEP_KNOB_ROW(eepd_config_t, "EEP_EEPD_MAX_MESSAGE", "1048576", EEP_KNOB_INT, max_message,
                 EEP_KNOB_STARTUP, 1024, 67108864,
                 "Largest request accepted in bytes; larger ones get RESOURCE_EXHAUSTED."),
    EEP_KNOB_ROW(eepd_config_t, "EEP_EEPD_MAX_MEMBER_BYTES", "4096", EEP_KNOB_INT, max_member_bytes,
                 EEP_KNOB_STARTUP, 256, 65536,
                 "Largest Member value accepted from members/<id>; larger ones (and fields over "
                 "their bounds: host 255, gpu uuid 128, endpoint 256, 64 NICs of 64) are ignored."),
    EEP_KNOB_ROW(eepd_config_t, "EEP_EEPD_MAX_VIEW_BYTES", "524288", EEP_KNOB_INT, max_view_bytes,
                 EEP_KNOB_STARTUP, 1024, 8388608,
                 "Largest View published; a publish writes it twice in one Txn, so keep twice this "
                 "under etcd's --max-request-bytes (1.5 MiB by default)."),
    EEP_KNOB_ROW(eepd_config_t, "EEP_EEPD_MAX_EPOCH_JUMP", "1000000", EEP_KNOB_INT, max_epoch_jump,
                 EEP_KNOB_STARTUP, 1, 1000000000,
                 "A view whose epoch is this far past the highest one known (or above 2^53) is "
                 "corrupt: logged, counted, ignored."),
};

EEP_KNOB_TABLE(eepd_knob_table, "eepd", eepd_knobs, eepd_config_t);
