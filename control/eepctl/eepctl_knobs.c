/*
 * eepctl_knobs.c - knob table of eepctl: where eepd is and how to reach it, so that an operator's
 * shell (or a pod) sets them once instead of on every command.  The default address is eepd's
 * default EEP_EEPD_LISTEN (tests/control/test_eepctl_cli.sh holds the two equal).
 */
#include "control/eepctl/eepctl_knobs.h"

#include <stddef.h>

static const eep_knob_t eepctl_knobs[] = {
    EEP_KNOB_ROW(eepctl_config_t, "EEP_EEPCTL_ADDR", "127.0.0.1:7070", EEP_KNOB_STRING, addr,
                 EEP_KNOB_STARTUP, 0, 0,
                 "eepctl: host:port of an eepd replica (--addr overrides); the default is eepd's "
                 "default EEP_EEPD_LISTEN."),
    EEP_KNOB_ROW(eepctl_config_t, "EEP_EEPCTL_CA", "", EEP_KNOB_STRING, ca, EEP_KNOB_STARTUP, 0, 0,
                 "eepctl: PEM CA of eepd's certificate; set: TLS (--ca overrides)."),
    EEP_KNOB_ROW(eepctl_config_t, "EEP_EEPCTL_CERT", "", EEP_KNOB_STRING, cert, EEP_KNOB_STARTUP, 0,
                 0, "eepctl: PEM client certificate for mutating calls under TLS (--cert)."),
    EEP_KNOB_ROW(eepctl_config_t, "EEP_EEPCTL_KEY", "", EEP_KNOB_STRING, key, EEP_KNOB_STARTUP, 0,
                 0, "eepctl: PEM private key of EEP_EEPCTL_CERT (--key)."),
};

EEP_KNOB_TABLE(eepctl_knob_table, "eepctl", eepctl_knobs, eepctl_config_t);
