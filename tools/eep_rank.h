/*
 * tools/eep_rank.h - what eep-rank's files share: the rank's options and state (eep_rank_t), its
 * phases, its stop flags, and its fault injection (tools/eep_rank_fault.c: the specs of
 * tools/eep_fault.h armed by --fault, --arm-file + SIGUSR1 and --agent-faults, fired around the
 * step's kernels).  The step loop, its JSON lines and the options are tools/eep_rank.c's.
 */
#ifndef EEP_TOOLS_EEP_RANK_H
#define EEP_TOOLS_EEP_RANK_H

#include <signal.h>
#include <stdint.h>

#include "control/agent/agent.h"
#include "control/agent/agent_membership.h"
#include "eep/eep.h"
#include "tools/eep_fault.h"
#include "tools/eep_rank_obs.h"
#include "tools/eep_step.h"

#define EEP_RANK_EXIT(status)     ((int)-(status))
#define EEP_RANK_EXIT_WRONG       3
#define EEP_RANK_MAX_WORLD        8 /* MoE buffers are sized for this many ranks */
#define EEP_RANK_FIRST_TIMEOUT_MS 60000
#define EEP_RANK_MAX_FAULTS       EEP_FAULT_QUEUE_MAX /* --fault flags */

/* set by the signal handlers and the agent's thread (eep_rank.c) */
extern volatile sig_atomic_t eep_rank_stop, eep_rank_view_flag, eep_rank_arm_req;

typedef enum {
    EEP_RANK_PH_NONE = 0,
    EEP_RANK_PH_BARRIER,
    EEP_RANK_PH_DISPATCH,
    EEP_RANK_PH_COMBINE
} eep_rank_phase_t;

extern const char *const eep_rank_phase_names[]; /* by eep_rank_phase_t */

/* --mode of the MoE steps' dispatch. */
enum {
    EEP_RANK_MODE_NO_CPU_SYNC = 0, /* the default: no host wait, worst-case buffers */
    EEP_RANK_MODE_CPU_SYNC,        /* eep_dispatch waits for the counts (exact rows) */
    EEP_RANK_MODE_CACHED,          /* a NO_CPU_SYNC dispatch, then a CACHED one of other data
                                      on its handle (as a backward pass sends its gradients);
                                      the expert and the combine take the cached one's rows */
};

typedef struct {
    /* options */
    int         moe, interval_ms, seconds, max_steps, timeout_ms, view_wait_s, join_timeout_s;
    int         moe_barrier; /* --moe-barrier: each MoE step starts with a barrier */
    int         rank_major;  /* --layout rank: EEP_EP_LAYOUT_RANK_MAJOR (else expert-major) */
    int         ep_mode;     /* --mode: EEP_RANK_MODE_* */
    int         tokens, hidden, topk, experts, seed;
    const char *arm_file;
    const char *fault_specs[EEP_RANK_MAX_FAULTS];
    int         n_fault_specs;
    int         agent_faults; /* --agent-faults: arm what eepctl inject-fault data-plane sends */
    /* state */
    eep_agent_t          *agent;
    eep_membership_t      ms;
    eep_runtime_t        *rt;
    eep_membership_info_t info;
    uint64_t              step, good, faults;
    uint64_t              view_step;  /* steps begun in this view: the MoE routing's step, the
                                        same on every member (a newcomer's step count is not) */
    int                   fresh_view; /* no good step yet in this view: a peer may still be
                                         compiling its kernels (seconds) */
    eep_fault_queue_t     fq;         /* armed faults, fired in order */
    uint64_t              injected;
    int                   corrupted; /* this step's topk_idx was corrupted on purpose */
    double                t_us[4];   /* by phase */
    eep_rank_obs_t        obs;       /* metrics endpoint, EEP_RANK_SLOW_MS (eep_rank_obs.h) */
    /* MoE device buffers */
    void *d_x, *d_idx, *d_w, *d_recv_x, *d_recv_idx, *d_recv_w, *d_counts, *d_offsets, *d_y, *d_out;
    uint16_t *h_x, *h_rows, *h_want_rows, *h_y, *h_out, *h_want_out;
    int64_t  *h_idx;
    float    *h_w;
    int32_t  *h_counts, *h_want_counts;
    int32_t  *h_ridx, *h_want_ridx, *h_offsets, *h_want_offsets; /* rank-major's lanes, sources */
    float    *h_rw, *h_want_rw;
    int64_t   rows_max;
} eep_rank_t;

/* The step's first kernel: dispatch with MoE steps, else the barrier. */
eep_rank_phase_t eep_rank_first_phase(const eep_rank_t *r);

/* Parse and queue fault @p spec (from @p from, for messages) for the next step; -1 on a bad
   spec or a phase with no kernel in this mode (said on stderr). */
int eep_rank_fault_arm(eep_rank_t *r, const char *spec, const char *from);

/* SIGUSR1 asked: arm the spec the --arm-file holds. */
void eep_rank_arm_read(eep_rank_t *r);

/* Before @p phase's launch: hang, delay.  EEP_ERR_ABORTED when stopped or a view came. */
eep_status_t eep_rank_fault_before(eep_rank_t *r, eep_rank_phase_t phase);

/* Right after @p phase's launch: kill, stop, exit, stall. */
void eep_rank_fault_after(eep_rank_t *r, eep_rank_phase_t phase);

/* After the routing was drawn: corrupt-id. */
void eep_rank_fault_corrupt(eep_rank_t *r, const eep_step_shape_t *s);

#endif /* EEP_TOOLS_EEP_RANK_H */
