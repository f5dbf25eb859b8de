/*
 * eep_fault.h - eep-rank's data-plane fault injection, the pure host part (no CUDA): one fault
 * spec parsed from text ("stall phase=dispatch ms=200 step=40"), and the token a corrupt-id fault
 * may damage without making a peer's step wrong.  tools/eep_rank.c applies the faults;
 * tests/tools/test_eep_fault.c checks this part on the CPU; docs/fault-schedule.md has the format.
 *
 * A spec is ACTION followed by key=value words, separated by blanks:
 *   kill | stop              raise SIGKILL / SIGSTOP right after the phase's kernel was launched
 *   exit | exit-dispatch | exit-combine
 *                            _exit(4) right after the phase's kernel was launched (no cleanup)
 *   stall ms=N               sleep N ms after the phase's kernel was launched, before waiting
 *   hang [ms=N]              before the phase's launch, make no call for N ms (0: until SIGTERM)
 *   delay ms=N [steps=K]     sleep N ms before the phase's launch, K steps in a row (1)
 *   corrupt-id [expert=N]    one topk_idx entry of a token routed only to this rank's own
 *                            experts becomes N (default num_experts: out of range)
 * Keys: phase=barrier|dispatch|combine (default: the step's first kernel), step=N (the step
 * number at which the fault fires; default: the next step), ms, steps, expert as above.  The
 * legacy arm-file line "PHASE KILL|STOP" (make gpu-elastic) reads as "kill phase=PHASE".
 */
#ifndef EEP_TOOLS_FAULT_H
#define EEP_TOOLS_FAULT_H

#include <stddef.h>
#include <stdint.h>

#include "eep/status.h"

typedef enum {
    EEP_FAULT_NONE = 0,
    EEP_FAULT_KILL,
    EEP_FAULT_STOP,
    EEP_FAULT_EXIT,
    EEP_FAULT_STALL,
    EEP_FAULT_HANG,
    EEP_FAULT_DELAY,
    EEP_FAULT_CORRUPT_ID,
} eep_fault_action_t;

/* The numbering of eep-rank's own phases (tools/eep_rank.c's eep_rank_phase_t). */
typedef enum {
    EEP_FAULT_PH_FIRST    = 0, /* the step's first kernel: barrier, or dispatch for MoE steps */
    EEP_FAULT_PH_BARRIER  = 1,
    EEP_FAULT_PH_DISPATCH = 2,
    EEP_FAULT_PH_COMBINE  = 3,
} eep_fault_phase_t;

#define EEP_FAULT_MAX_MS    3600000
#define EEP_FAULT_EXIT_CODE 4 /* eep-rank's exit status after an injected exit */

typedef struct {
    eep_fault_action_t action;
    eep_fault_phase_t  phase;
    int                ms;     /* stall, hang (0: for ever), delay */
    int                steps;  /* delay: steps in a row, >= 1 */
    int64_t            step;   /* fires at this step number; -1: the next step */
    int                expert; /* corrupt-id: the id written */
    int                has_expert;
} eep_fault_t;

/**
 * Parse one fault spec (the grammar above).
 * @param [in]  spec     the text; leading and trailing blanks and a trailing newline are fine.
 * @param [out] fault_p  written only on success.
 * @param [out] err      on failure, one line naming the bad word and what is wanted.
 * @param [in]  err_len  size of @p err.
 * @return EEP_OK, or EEP_ERR_INVALID_ARG.
 */
eep_status_t eep_fault_parse(const char *spec, eep_fault_t *fault_p, char *err, size_t err_len);

/** @return the action's name ("stall", "exit"), "none" for an unknown value. */
const char *eep_fault_action_name(eep_fault_action_t action);

/** @return the phase's name ("first", "barrier", "dispatch", "combine"). */
const char *eep_fault_phase_name(eep_fault_phase_t phase);

/* The armed faults of one rank, fired in the order they were armed. */
#define EEP_FAULT_QUEUE_MAX 16
#define EEP_FAULT_BIT(a)    (1u << (a))

typedef struct {
    eep_fault_t f[EEP_FAULT_QUEUE_MAX];
    int         n;
} eep_fault_queue_t;

/**
 * Arm @p fault; one without a step (-1) fires at @p next_step.
 * @return EEP_OK; EEP_ERR_NO_MEMORY when EEP_FAULT_QUEUE_MAX are armed already.
 */
eep_status_t eep_fault_queue_add(eep_fault_queue_t *q, const eep_fault_t *fault,
                                 uint64_t next_step);

/**
 * @return the index of the first armed fault due at step @p step (its step <= @p step) and
 *         @p phase whose action is in @p mask (EEP_FAULT_BIT()s), or -1.
 */
int eep_fault_queue_due(const eep_fault_queue_t *q, uint64_t step, eep_fault_phase_t phase,
                        unsigned mask);

/**
 * Fire fault @p i at step @p step: it leaves the queue, except a delay with steps left, which
 * stays, due again at @p step + 1.  @return the fault as it fired.
 */
eep_fault_t eep_fault_queue_take(eep_fault_queue_t *q, int i, uint64_t step);

/**
 * The token a corrupt-id fault damages: the first one whose @p topk experts all live on @p rank
 * (expert e on rank e / @p local_experts), so that no peer expects a row from it and a dropped
 * token cannot make a peer's checked step wrong.
 * @param [in] idx            [tokens, topk] global expert ids.
 * @return the token index, or -1 when this step has none (the fault waits for a later step).
 */
int eep_fault_corrupt_pick(const int64_t *idx, int tokens, int topk, int local_experts, int rank);

#endif
