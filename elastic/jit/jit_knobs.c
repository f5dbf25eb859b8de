/*
 * jit_knobs.c - knob table of the kernel JIT.
 *
 * The default of EEP_JIT_NVCC and the fallback source root are baked in at build time (-D from
 * elastic/module.mk: the toolkit's nvcc and the repository root), so tests and tools work from
 * the build tree without any environment; an installed library finds <prefix>/share/eep first
 * (jit.c, eep_jit_default_source_root).
 */
#include "elastic/jit/jit_knobs.h"

#include <stddef.h>

#ifndef EEP_JIT_DEFAULT_NVCC
#define EEP_JIT_DEFAULT_NVCC "/usr/local/cuda/bin/nvcc"
#endif
#ifndef EEP_JIT_DEFAULT_SOURCE_ROOT
#define EEP_JIT_DEFAULT_SOURCE_ROOT "."
#endif

static const eep_knob_t eep_jit_knobs[] = {
    EEP_KNOB_ROW(eep_jit_config_t, "EEP_JIT_CACHE_DIR", "", EEP_KNOB_STRING, cache_dir,
                 EEP_KNOB_STARTUP, 0, 0,
                 "Directory of compiled kernels (cubins); empty: $XDG_CACHE_HOME/eep, else "
                 "~/.cache/eep."),
    EEP_KNOB_ROW(eep_jit_config_t, "EEP_JIT_BACKEND", "auto", EEP_KNOB_STRING, backend,
                 EEP_KNOB_STARTUP, 0, 0,
                 "Kernel compiler: auto (NVRTC in process, nvcc for kernels that need GIN), nvrtc "
                 "or nvcc."),
    EEP_KNOB_ROW(eep_jit_config_t, "EEP_JIT_NVCC", EEP_JIT_DEFAULT_NVCC, EEP_KNOB_STRING, nvcc,
                 EEP_KNOB_STARTUP, 0, 0,
                 "Path of nvcc for the nvcc backend; empty or missing: nvcc on PATH."),
    EEP_KNOB_ROW(eep_jit_config_t, "EEP_JIT_SOURCE_ROOT", "", EEP_KNOB_STRING, source_root,
                 EEP_KNOB_STARTUP, 0, 0,
                 "Root of the kernel sources (kernels/, barrier/) that JIT specs name headers in; "
                 "empty: <libdir>/../share/eep of the installed library when it is there, else "
                 "the source tree it was built from (" EEP_JIT_DEFAULT_SOURCE_ROOT ")."),
    EEP_KNOB_ROW(eep_jit_config_t, "EEP_JIT_KEEP_SOURCE", "0", EEP_KNOB_BOOL, keep_source,
                 EEP_KNOB_STARTUP, 0, 0,
                 "Debug: keep each generated unit, and the source of a failed compile, in "
                 "<cache>/src/."),
    EEP_KNOB_ROW(eep_jit_config_t, "EEP_JIT_ARCH", "auto", EEP_KNOB_STRING, arch, EEP_KNOB_STARTUP,
                 0, 0,
                 "GPU architecture kernels are compiled for (sm_90 for H100/H200); auto: the "
                 "device of the current CUDA context (else device 0), sm_90 when the driver is "
                 "not loaded or there is no device."),
    EEP_KNOB_ROW(eep_jit_config_t, "EEP_JIT_PCH", "1", EEP_KNOB_BOOL, pch, EEP_KNOB_STARTUP, 0, 0,
                 "NVRTC (12.8 and later) precompiles the headers every unit shares once per "
                 "process and reuses them: a process's second and later kernels compile 2-3x "
                 "faster; the cubins are the same.  0 turns it off."),
};

EEP_KNOB_TABLE(eep_jit_knob_table, "jit", eep_jit_knobs, eep_jit_config_t);
