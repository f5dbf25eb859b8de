/* jit_knobs.h - settings of the kernel JIT (elastic/jit/jit.h). */
#ifndef EEP_JIT_KNOBS_H
#define EEP_JIT_KNOBS_H

#include "util/config.h"

typedef struct {
    char cache_dir[EEP_KNOB_STRING_MAX];   /* "": $XDG_CACHE_HOME/eep, else ~/.cache/eep */
    char backend[EEP_KNOB_STRING_MAX];     /* auto, nvrtc or nvcc */
    char nvcc[EEP_KNOB_STRING_MAX];        /* nvcc path; "" or missing: nvcc found on PATH */
    char source_root[EEP_KNOB_STRING_MAX]; /* kernel source root */
    int  keep_source;                      /* keep generated units and failing sources */
    char arch[EEP_KNOB_STRING_MAX];        /* sm_90 */
    int  pch;                              /* NVRTC reuses precompiled shared headers */
} eep_jit_config_t;

extern const eep_knob_table_t eep_jit_knob_table;

#endif
