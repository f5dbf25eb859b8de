/*
 * barrier/barrier_params.h - the one parameter struct of the barrier kernel, shared by the host
 * (C11, elastic/runtime/runtime_barrier.c fills it) and the device (barrier_kernel.cuh reads it).
 *
 * NVRTC-safe: no libc headers.  The include is relative so that it resolves the same way under
 * gcc, nvcc and NVRTC whatever their include paths.
 */
#ifndef EEP_BARRIER_PARAMS_H
#define EEP_BARRIER_PARAMS_H

#include "../include/eep/layout.h"

#define EEP_BARRIER_MAX_THREADS 256

typedef struct eep_barrier_params {
    eep_devcomm_blob_t  devcomm;        /* ncclDevComm, by value */
    void               *window;         /* ncclWindow_t of the runtime's window */
    eep_fault_page_t   *fault;          /* device address of the host-mapped fault page */
    unsigned int       *fault_claim;    /* device counter that hands out fault record slots */
    unsigned long long  lsa_arrive_off; /* window offset of u64[lsa_size] arrival counts */
    unsigned long long  gin_epoch_off;  /* window offset of this rank's GIN barrier count */
    unsigned long long  timeout_ns;     /* deadline of each barrier, from its start */
    unsigned long long  delay_ns;       /* test hook: spin before arriving */
    unsigned long long *stamps;         /* test hook: globaltimer at arrival/exit, or NULL */
    unsigned long long *cycles;         /* bench hook: clock64 at each exit, or NULL */
    unsigned int        iterations;     /* barriers in this launch (>= 1) */
    int                 gin_signal0;    /* first GIN signal id: signal0 + rail rank of sender */
    unsigned long long *wait_stats;     /* u64 [EEP_WAIT_STAT_PHASES][EEP_MAX_RANKS], or NULL */
} eep_barrier_params_t;

EEP_LAYOUT_ASSERT(sizeof(void *) == 8, "64-bit pointers");
EEP_LAYOUT_OFFSET(eep_barrier_params_t, window, 200);
EEP_LAYOUT_OFFSET(eep_barrier_params_t, lsa_arrive_off, 224);
EEP_LAYOUT_OFFSET(eep_barrier_params_t, iterations, 272);
EEP_LAYOUT_OFFSET(eep_barrier_params_t, wait_stats, 280);
EEP_LAYOUT_ASSERT(sizeof(eep_barrier_params_t) == 288, "eep_barrier_params_t size");

#endif /* EEP_BARRIER_PARAMS_H */
