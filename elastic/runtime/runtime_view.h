/*
 * runtime_view.h - applying a membership view: the state machine that decides, from the current
 * view, the new one and this rank's state, what to do with the communicator, and does it in a
 * fixed order through an ops table of communicator operations (NCCL in the runtime, a fake in
 * tests/elastic/runtime/view_apply_fake.h).  Pure host code: no CUDA, no NCCL.
 *
 * The decision depends on the two views alone (never on what this rank saw locally), so every
 * survivor of a view change makes the same one, with the same exclusion list:
 *   - the new epoch is not newer than the current one:       refuse (EEP_ERR_STALE_EPOCH);
 *   - this rank is not in the new view:                      refuse, fenced (EEP_ERR_FENCED);
 *   - no usable communicator here (newcomer, fenced, failed): fresh;
 *   - the same members in the same order:                    nothing (epoch and placement move);
 *   - only removals, survivors in the old relative order:    shrink, excluding the removed
 *                                                            ranks (old rank order, ascending);
 *   - anything else (an addition, a new member id, a reorder): fresh communicator from a unique
 *     id the new view's root publishes (attempt 0).
 * A failed shrink (or window / device communicator on the shrunk comm) falls back to a fresh
 * communicator under attempt 1.  A failed fresh communicator leaves the rank FAILED: the old set
 * is aborted, the fault is reported naming this rank (evict me, I rejoin as a newcomer).
 *
 * A step that fails with EEP_ERR_STALE_EPOCH was abandoned (a newer view is waiting and a member
 * never came): nothing changes (the old set, view and state stay; the epoch counts as seen), no
 * fallback, no report: the newer view is applied from where the rank was, as on the other members
 * (with params.release_early, a fresh view's old set is already gone: state FAILED, no report).
 *
 * Order of steps: the new communicator, its window and its device communicator are made before
 * anything of the old set is touched; then the new set is swapped in, and only then is the old
 * set handed to abort_async (off the critical path: it returns at once, NCCL's abort takes
 * ~0.5-1 s).  A set that failed half-way, never used, is discarded.
 */
#ifndef EEP_RUNTIME_VIEW_H
#define EEP_RUNTIME_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "eep/layout.h"
#include "eep/membership.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One communicator set: the comm, its window, its device communicator (opaque to the machine). */
typedef struct {
    void *comm;
    void *window;
    void *devcomm;
} eep_view_comm_set_t;

/* The communicator operations the machine drives.  Every one is bounded by its implementation. */
typedef struct eep_view_comm_ops {
    const char *name;
    /** Shrink @p old_comm (abort mode), leaving out @p exclude (old ranks, ascending). */
    eep_status_t (*shrink)(void *ctx, void *old_comm, const int *exclude, int n_exclude,
                           void **comm_p);
    /** Make a new unique id (the root only). */
    eep_status_t (*uid_create)(void *ctx, eep_comm_uid_t *uid_p);
    /** Create a communicator of @p world ranks, this one @p rank, from @p uid. */
    eep_status_t (*create)(void *ctx, const eep_comm_uid_t *uid, int world, int rank,
                           void **comm_p);
    /** Register the symmetric window on @p comm (collective; fresh buffers per view). */
    eep_status_t (*window_register)(void *ctx, void *comm, void **window_p);
    /** Create the device communicator on @p comm and @p window (collective). */
    eep_status_t (*devcomm_create)(void *ctx, void *comm, void *window, void **devcomm_p);
    /** Release a set that was never used (a later step failed); NULL members are skipped. */
    void (*discard)(void *ctx, const eep_view_comm_set_t *set);
    /** Abort a set that was in use, off the critical path: return at once. */
    void (*abort_async)(void *ctx, const eep_view_comm_set_t *set);
} eep_view_comm_ops_t;

typedef enum {
    EEP_VIEW_STATE_NONE = 0, /* no view applied yet (a newcomer) */
    EEP_VIEW_STATE_RUNNING,  /* a communicator of the current view, no fault known */
    EEP_VIEW_STATE_DEGRADED, /* running, with a fault pending until a view handles it */
    EEP_VIEW_STATE_FENCED,   /* removed by the last view: no communicator */
    EEP_VIEW_STATE_FAILED,   /* the last view could not be applied: no communicator */
} eep_view_state_t;

typedef enum {
    EEP_VIEW_ACTION_NONE = 0,
    EEP_VIEW_ACTION_SHRINK,
    EEP_VIEW_ACTION_FRESH,
    EEP_VIEW_ACTION_REFUSE_STALE,
    EEP_VIEW_ACTION_REFUSE_REMOVED,
} eep_view_action_t;

/* What eep_view_decide() chose. */
typedef struct {
    eep_view_action_t action;
    int               new_rank, new_world, root; /* in the new view */
    int               n_exclude;
    int               exclude[EEP_MAX_RANKS]; /* SHRINK: old ranks left out, ascending */
    const char       *why;                    /* a constant phrase, for logs and tests */
} eep_view_plan_t;

/* The machine's copy of a view (member ids and placement copied). */
typedef struct {
    uint64_t            epoch;
    int                 world, my_rank, root, num_experts;
    char              **member_ids;
    eep_expert_place_t *placement;
} eep_view_copy_t;

typedef struct {
    size_t                     size; /* sizeof(eep_view_machine_params_t) */
    const eep_view_comm_ops_t *comm_ops;
    void                      *comm_ctx;
    const eep_membership_t    *membership; /* publish_uid, fetch_uid, report_fault */
    int                        timeout_ms; /* the unique id fetch; 0: 10 s */
    /* A fresh view hands the old set to abort_async when it starts building, not once the new
       set is complete, so that the release overlaps the new communicator's creation (a release
       is 50-512 ms of NCCL's destroy; bench/RESULTS.md, session 27).  The price: a fresh view
       given up for a newer one leaves the rank with no set (state FAILED, no report), and the
       newer view is then fresh here.  0: the order described above.  The runtime sets it from
       EEP_VIEW_RELEASE_EARLY (default 1: the grow goal was met only with it, session 28). */
    int release_early;
} eep_view_machine_params_t;

#define EEP_VIEW_DEAD_WORDS (EEP_MAX_RANKS / 64)

/* Counters, for tests and eep-rank's lines. */
typedef struct {
    unsigned applied, shrinks, fresh, fallbacks, refused, failed, faults_reported, abandoned;
} eep_view_stats_t;

typedef struct {
    eep_view_machine_params_t p;
    eep_view_state_t          state;
    uint64_t                  last_epoch; /* of the last view seen and not refused as stale */
    eep_view_copy_t           view;       /* the view the current set belongs to (world 0: none) */
    eep_view_comm_set_t       set;        /* current communicator set, or all NULL */
    int                       fault_pending;
    uint64_t                  dead[EEP_VIEW_DEAD_WORDS]; /* by rank of the current view */
    uint64_t                  reported[EEP_VIEW_DEAD_WORDS];
    eep_view_stats_t          stats;
} eep_view_machine_t;

/**
 * Decide what applying @p next means, from the views alone.
 * @param [in]  cur         the current view, or NULL (none yet).
 * @param [in]  have_comm   a usable communicator of @p cur is held.
 * @param [in]  last_epoch  the newest epoch seen (refuses anything not newer).
 * @param [in]  next        a view that passed eep_view_check().
 * @param [out] plan_p      filled on EEP_OK.
 * @return EEP_OK; EEP_ERR_INVALID_ARG (NULL).
 */
eep_status_t eep_view_decide(const eep_view_copy_t *cur, int have_comm, uint64_t last_epoch,
                             const eep_view_t *next, eep_view_plan_t *plan_p);

/**
 * @param [in]  params  see eep_view_machine_params_t; comm_ops and membership are required.
 * @param [out] m       the machine, state NONE; written on success only.
 */
eep_status_t eep_view_machine_init(eep_view_machine_t *m, const eep_view_machine_params_t *params);

/** Abort the current set (if any) and free the view copy.  The machine may be inited again. */
void eep_view_machine_cleanup(eep_view_machine_t *m);

/**
 * Apply @p next at a safe point (no kernel of the current set running: between calls, or once a
 * faulted kernel has left).
 * @param [out] plan_p  what was decided (may be NULL), filled whenever the view passed its check.
 * @return EEP_OK (applied: NONE, SHRINK or FRESH); EEP_ERR_INVALID_ARG (a bad view: nothing
 *         changes); EEP_ERR_STALE_EPOCH (refused as not newer, or abandoned for a newer view:
 *         nothing changes); EEP_ERR_FENCED (this rank is not in the
 *         view: the old set is aborted, state FENCED); the failing step's status when no
 *         communicator could be made (state FAILED, reported).
 */
eep_status_t eep_view_machine_apply(eep_view_machine_t *m, const eep_view_t *next,
                                    eep_view_plan_t *plan_p);

/**
 * A kernel fault was seen (a bounded wait expired): record it until a view handles it.  The
 * suspect is marked dead (degraded mode) and reported once per suspect and epoch.
 * @param [in] suspect  the suspect peer's rank in the current view, or -1 when unknown.
 * @param [in] reason   "dispatch timeout", ... (for the report).
 * @return EEP_OK; EEP_ERR_INVALID_ARG (suspect out of range); EEP_ERR_FENCED when there is no
 *         current communicator (nothing recorded).
 */
eep_status_t eep_view_machine_fault(eep_view_machine_t *m, int suspect, const char *reason);

/** @return 1 when @p rank of the current view is known dead, else 0. */
int eep_view_machine_dead(const eep_view_machine_t *m, int rank);

/**
 * Degraded mode: which experts are lost (their holder is known dead).  A token's top-k lane on a
 * lost expert is reported and left out of combine (docs/architecture.md, "Faults").
 * @param [out] lost_p   [num_experts of the current view] 1 lost, 0 alive; may be NULL.
 * @param [out] n_lost_p experts lost; may be NULL.
 * @return EEP_OK; EEP_ERR_NOT_FOUND when no view is applied.
 */
eep_status_t eep_view_machine_lost_experts(const eep_view_machine_t *m, uint8_t *lost_p,
                                           int *n_lost_p);

/** @return the state's name ("running"), the action's name ("shrink"). */
const char *eep_view_state_name(eep_view_state_t state);
const char *eep_view_action_name(eep_view_action_t action);

#ifdef __cplusplus
}
#endif

#endif /* EEP_RUNTIME_VIEW_H */
