/* eepctl_knobs.h - defaults of the eepctl CLI (flags override them). */
#ifndef EEP_EEPCTL_KNOBS_H
#define EEP_EEPCTL_KNOBS_H

#include "util/config.h"

typedef struct {
    char addr[EEP_KNOB_STRING_MAX]; /* --addr */
    char ca[EEP_KNOB_STRING_MAX];   /* --ca */
    char cert[EEP_KNOB_STRING_MAX]; /* --cert */
    char key[EEP_KNOB_STRING_MAX];  /* --key */
} eepctl_config_t;

extern const eep_knob_table_t eepctl_knob_table;

#endif
