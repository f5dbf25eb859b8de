/*
 * eep/membership.h - how membership views reach libeep: a view struct and an ops table.
 *
 * The control plane decides who is in the job and publishes numbered views (epoch, members in
 * rank order, expert placement, root).  libeep never talks to etcd or gRPC: a provider outside it
 * (the control plane's agent, libeep_agent; a fake in tests) implements eep_membership_ops_t, and
 * the runtime polls it between calls.  Epochs only grow: a provider never hands out a view whose
 * epoch is not greater than the last one it handed out.
 *
 * The expert placement is data, not arithmetic: for every global expert, the rank and the local
 * slot that hold it.  Counts per rank may differ (256 experts on 7 ranks), a rank may hold none.
 * eep_placement_default() is the documented default policy (the one eepd publishes);
 * eep_placement_check() validates any placement, the application's own included.
 *
 * The header needs no CUDA or NCCL header.
 */
#ifndef EEP_MEMBERSHIP_H
#define EEP_MEMBERSHIP_H

#include <stddef.h>
#include <stdint.h>

#include "eep/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where one global expert lives. */
#ifndef EEP_EXPERT_PLACE_T_DECLARED
#define EEP_EXPERT_PLACE_T_DECLARED
typedef struct eep_expert_place eep_expert_place_t;
#endif
struct eep_expert_place {
    int32_t rank; /* rank of the view that holds it, 0 <= rank < world */
    int32_t slot; /* its local index on that rank, 0 <= slot < that rank's expert count */
};

/*
 * One membership view.  The arrays are the provider's (the view came from its poll()) and stay
 * valid until it is given back with release(); the library copies what it keeps.
 */
typedef struct {
    size_t             size;       /* sizeof(eep_view_t) */
    uint64_t           epoch;      /* > 0, strictly increasing from one view to the next */
    int                world;      /* members, 1 <= world <= EEP_MAX_RANKS */
    const char *const *member_ids; /* [world], in rank order: member_ids[r] is rank r; unique,
                                       never reused (a rank that rejoins has a new id) */
    int                my_rank;    /* this process's rank in the view, -1 when it is not in it */
    int                root;       /* rank that publishes the communicator's unique id */
    int                num_experts;
    const eep_expert_place_t *placement; /* [num_experts]; NULL when num_experts is 0 */
} eep_view_t;

/* A communicator's unique id as bytes (NCCL_UNIQUE_ID_BYTES): what the root publishes. */
#define EEP_COMM_UID_BYTES 128

typedef struct {
    unsigned char bytes[EEP_COMM_UID_BYTES];
} eep_comm_uid_t;

/*
 * The provider's interface.  Every call is made on the runtime's thread and must not block longer
 * than its own bounded timeout; none may call back into the runtime.
 */
typedef struct eep_membership_ops {
    const char *name;
    /**
     * Take the newest view if it is newer than the last one handed out.
     * @param [in]  ctx        the provider's state.
     * @param [out] view_p     filled on EEP_OK with *changed_p 1; give it back with release().
     * @param [out] changed_p  1: a new view is in *view_p; 0: nothing new (view_p untouched).
     * @return EEP_OK; EEP_ERR_LEASE_LOST once per lost lease (stop acting on the old view);
     *         EEP_ERR_CONTROL_UNAVAILABLE while the provider cannot reach its store.
     */
    eep_status_t (*poll)(void *ctx, eep_view_t *view_p, int *changed_p);
    /**
     * Report a fault seen on the data plane; the control plane may evict the suspect.
     * @param [in] world_rank  the suspect's rank in @p epoch's view, or -1 when unknown; the
     *                         caller's own rank means "I could not apply this view: evict me so
     *                         that I rejoin as a newcomer".
     * @param [in] epoch       the view the caller was running.
     * @param [in] reason      "dispatch timeout", "shrink failed", ... (copied).
     */
    eep_status_t (*report_fault)(void *ctx, int world_rank, uint64_t epoch, const char *reason);
    /** Give back a view from poll(). */
    void (*release)(void *ctx, eep_view_t *view);
    /**
     * The view's root publishes the unique id of its new communicator under the view's key;
     * @p attempt numbers the tries within one epoch (0, then 1 after a failed shrink).
     */
    eep_status_t (*publish_uid)(void *ctx, uint64_t epoch, int attempt, const eep_comm_uid_t *uid);
    /**
     * Every other member fetches it, waiting at most @p timeout_ms.
     * @param [out] uid_p  filled on EEP_OK only.
     * @return EEP_OK; EEP_ERR_TIMEOUT when the root has not published it in time.
     */
    eep_status_t (*fetch_uid)(void *ctx, uint64_t epoch, int attempt, int timeout_ms,
                              eep_comm_uid_t *uid_p);
    /**
     * Optional (NULL: never).  Is a view newer than @p epoch waiting, or this member's lease
     * lost?  Must not block or hand anything out.  A rank that waits long for a communicator of
     * @p epoch (a member skipped that view) abandons it when this says yes, and applies the newer
     * view from where it was, as the other members of the skipped view do.
     */
    int (*has_newer)(void *ctx, uint64_t epoch);
} eep_membership_ops_t;

/* A provider: its ops and their context. */
typedef struct {
    const eep_membership_ops_t *ops;
    void                       *ctx;
} eep_membership_t;

/**
 * The default placement: contiguous blocks, as even as possible.  Expert e lives on rank
 * floor(e * world / num_experts), in slot e - first(rank), where first(r) = ceil(r * num_experts /
 * world) is the rank's first expert.  Block sizes differ by at most one; with fewer experts than
 * ranks some ranks hold none.  It is the placement eepd publishes (control/eepd/eepd_view.c,
 * eepd_view_place, primary copy), the placement dispatch/combine use without a view (eep/ep.h),
 * and for num_experts % world == 0 the arithmetic one (rank r holds [r * El, (r + 1) * El)).
 * @param [in]  num_experts  1 <= num_experts <= EEP_EP_MAX_EXPERTS (2048).
 * @param [in]  world        1 <= world <= EEP_MAX_RANKS.
 * @param [out] placement_p  [num_experts], written on success only.
 * @return EEP_OK; EEP_ERR_INVALID_ARG naming the bad argument.
 */
eep_status_t eep_placement_default(int num_experts, int world, eep_expert_place_t *placement_p);

/**
 * Check a placement: every expert placed exactly once, each rank in [0, world), each slot in
 * range, and each rank's slots dense (0 .. count - 1, each used once).  The first violation is
 * logged naming the expert (and the expert it collides with).
 * @param [in]  placement      [num_experts].
 * @param [in]  num_experts    as in eep_placement_default().
 * @param [in]  world          the view's rank count.
 * @param [out] counts_p       [world] experts per rank, written on success only; may be NULL.
 * @return EEP_OK; EEP_ERR_INVALID_ARG.
 */
eep_status_t eep_placement_check(const eep_expert_place_t *placement, int num_experts, int world,
                                 int *counts_p);

/**
 * Check a whole view as a provider handed it: size, epoch > 0, world and ranks in range, member
 * ids present and unique, the placement (eep_placement_check).
 * @return EEP_OK; EEP_ERR_INVALID_ARG naming the field.
 */
eep_status_t eep_view_check(const eep_view_t *view);

/* ------------------------------------------------------------------------------------------ */
/* The runtime's side: a runtime created with params.membership (eep/eep.h) follows the views. */

#ifndef EEP_RUNTIME_T_DECLARED
#define EEP_RUNTIME_T_DECLARED
typedef struct eep_runtime eep_runtime_t;
#endif

/* Where this rank stands after eep_membership_sync(). */
typedef struct {
    size_t                    size;  /* sizeof(eep_membership_info_t), set by the caller */
    uint64_t                  epoch; /* of the view the communicator belongs to (0: none) */
    int                       rank, world;
    int                       num_experts;
    int                       num_local;     /* experts this rank holds (may be 0) */
    const int32_t            *local_experts; /* [num_local]: global ids, by local slot */
    const eep_expert_place_t *placement;     /* [num_experts]; both valid until the next sync */
    int                       degraded;      /* a peer is known dead and no view has removed it yet
                                           (dispatch/combine skip it: eep/ep.h) */
    int                       n_lost;        /* experts held by peers known dead */
    const char               *action;        /* what the last view did: "none", "shrink", "fresh" */
    double                    apply_ms; /* how long the last view's application took on this rank */
} eep_membership_info_t;

/**
 * Between steps (no kernel of @p rt running, or one that faulted and left): take the newest view
 * and, when there is one, apply it in place: shrink the communicator for removals, build a fresh
 * one for additions, re-create window and device communicator (fresh buffers: a removed rank
 * that still runs cannot reach them), drop the old communicator off the critical path, clear the
 * fault page and move to the view's epoch (older handles are refused from now on).
 * @param [in]  rt         a runtime created with params.membership.
 * @param [out] changed_p  1 when a view was applied (rank, world or placement may differ).
 * @param [out] info_p     filled on EEP_OK and on EEP_ERR_FENCED (may be NULL).
 * @return EEP_OK; EEP_ERR_FENCED (this rank is not in the view, or its lease was lost: no
 *         communicator until a view that holds it again, which the next syncs apply);
 *         EEP_ERR_LEASE_LOST once per lost lease (fenced too); the failing step's status when
 *         no communicator could be made for the view (reported; the rank is then fenced);
 *         EEP_ERR_INVALID_ARG naming the argument (a runtime without membership).
 */
eep_status_t eep_membership_sync(eep_runtime_t *rt, int *changed_p, eep_membership_info_t *info_p);

/**
 * After a call or eep_poll() returned EEP_ERR_PEER_TIMEOUT: mark the peer named by the first
 * fault record dead (degraded mode) and report it to the control plane once, so that a view
 * without it follows.  Further calls return the fault until a view is applied, or until the
 * caller lowers it (eep_runtime_clear_fault): then dispatch and combine run degraded, skipping
 * the dead peer and reporting the tokens whose experts it held (eep/ep.h, "Degraded mode").
 * @param [in] phase  "dispatch", "combine", "barrier" (for the report).
 * @return EEP_OK; EEP_ERR_NOT_FOUND (no fault record); EEP_ERR_FENCED; EEP_ERR_INVALID_ARG.
 */
eep_status_t eep_membership_fault(eep_runtime_t *rt, const char *phase);

#ifdef __cplusplus
}
#endif

#endif /* EEP_MEMBERSHIP_H */
