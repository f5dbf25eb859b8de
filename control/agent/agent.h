/*
 * agent.h - the rank side of the control plane (libeep_agent), for the runtime.
 *
 * An agent registers this process as a member of the job in etcd (a key under a lease it keeps
 * alive), follows the views eepd publishes, and reports faults.  Views are numbered by epoch; the
 * agent never hands out a view older than or equal to one it already handed out.  If the lease is
 * lost (partition, a long pause, eviction), the agent reports EEP_ERR_LEASE_LOST once through
 * eep_agent_poll(), then registers again as a NEW member (a new id): the runtime must drop its old
 * view and wait for a view that contains the new id.
 *
 * Threads: the agent runs one thread of its own; every function here may be called from any one
 * thread of the runtime (they lock).
 */
#ifndef EEP_AGENT_H
#define EEP_AGENT_H

#include <stddef.h>
#include <stdint.h>

#include "eep/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eep_agent eep_agent_t;

typedef struct {
    char *id;
    char *host;
    char *gpu_uuid;
    int   pid;
} eep_agent_member_t;

/* A view as the runtime sees it; free with eep_agent_view_free(). */
typedef struct {
    uint64_t            epoch;
    int                 my_rank; /* this member's rank, -1 when the view excludes it */
    uint32_t            n_ranks;
    eep_agent_member_t *members; /* n_ranks, in rank order */
    uint32_t            root;
    uint32_t            num_experts;
    uint32_t            copies;       /* copies of each expert */
    uint32_t           *expert_ranks; /* num_experts * copies: expert e at [e * copies ...] */
    char                reason[32];
} eep_agent_view_t;

/* Something new (a view or a lost lease) can be polled; runs on the agent's thread: keep it
 * short and do not call back into the agent from it. */
typedef void (*eep_agent_notify_func_t)(void *arg);

typedef struct {
    size_t                  size;        /* sizeof(eep_agent_params_t) */
    const char             *job;         /* NULL: EEP_JOB */
    const char             *gpu_uuid;    /* NULL: EEP_AGENT_GPU_UUID */
    const char             *endpoint;    /* optional address published in the member key */
    int                     lease_ttl_s; /* 0: EEP_AGENT_LEASE_TTL_S */
    eep_agent_notify_func_t notify;      /* optional */
    void                   *notify_arg;
} eep_agent_params_t;

/**
 * Connect to etcd (EEP_ETCD_* knobs), register as a member and start following views.
 * @param [in]  params   see eep_agent_params_t.
 * @param [out] agent_p  the agent.
 * @return EEP_OK, EEP_ERR_INVALID_ARG, EEP_ERR_CONTROL_UNAVAILABLE / EEP_ERR_ETCD (no etcd).
 */
eep_status_t eep_agent_create(const eep_agent_params_t *params, eep_agent_t **agent_p);

/** Leave (if still a member) and free everything.  NULL is a no-op. */
void eep_agent_destroy(eep_agent_t *agent);

/**
 * Take the newest view, if newer than the last one handed out.
 * @param [out] view_p  a view to free with eep_agent_view_free(), on EEP_OK only.
 * @return EEP_OK (a view), EEP_INPROGRESS (nothing new), EEP_ERR_LEASE_LOST (once per loss:
 *         stop acting on the old view; the agent now rejoins as a new member - not before this
 *         call has reported the loss, so a process whose loop hangs is not brought back).
 */
eep_status_t eep_agent_poll(eep_agent_t *agent, eep_agent_view_t **view_p);

/** eep_agent_poll(), waiting up to @p timeout_ms for something (EEP_ERR_TIMEOUT if nothing). */
eep_status_t eep_agent_wait(eep_agent_t *agent, int timeout_ms, eep_agent_view_t **view_p);

void eep_agent_view_free(eep_agent_view_t *view);

/** @return the epoch of the last view handed out (0: none yet). */
uint64_t eep_agent_epoch(eep_agent_t *agent);

/**
 * @return the epoch of the newest view the agent has seen, handed out or not (0: none yet);
 *         UINT64_MAX while a lost lease waits to be reported.  Hands nothing out.
 */
uint64_t eep_agent_newest_epoch(eep_agent_t *agent);

/**
 * Copy this process's current member id into @p buf (it changes after a lost lease).
 * @return EEP_OK, EEP_ERR_BUSY while (re)registering, EEP_ERR_INVALID_ARG if @p len is too small.
 */
eep_status_t eep_agent_member_id(eep_agent_t *agent, char *buf, size_t len);

/**
 * Report a fault to eepd: the leader evicts @p suspect (its agent rejoins as a new member).
 * @param [in] suspect       member id of the suspected peer.
 * @param [in] suspect_rank  its rank in @p epoch, or -1.
 * @param [in] epoch         the view this rank was running.
 * @param [in] phase         "dispatch", "combine", "barrier", ...
 * @param [in] detail        free text, or NULL.
 */
eep_status_t eep_agent_report_fault(eep_agent_t *agent, const char *suspect, int suspect_rank,
                                    uint64_t epoch, const char *phase, const char *detail);

/** Leave gracefully: eepd publishes a view without this member at once.  Idempotent. */
eep_status_t eep_agent_leave(eep_agent_t *agent);

/**
 * Take the newest data-plane fault spec eepd sent this member (`eepctl inject-fault data-plane
 * MEMBER SPEC`, eepd with EEP_EEPD_FAULT_INJECTION=1: the key inject/<member id>); eep-rank arms
 * it (tools/eep_fault.h).  Specs meant for an older registration of this agent are dropped.
 * @param [out] spec  the spec, NUL-terminated (truncated to @p len - 1).
 * @return EEP_OK; EEP_ERR_NOT_FOUND when none is waiting; EEP_ERR_INVALID_ARG.
 */
eep_status_t eep_agent_take_fault(eep_agent_t *agent, char *spec, size_t len);

/**
 * Discover RDMA devices with libibverbs.  Zero devices (or no RDMA stack) is not an error.
 * @param [out] names_p  a NULL-terminated array of names (free each and the array), or NULL.
 * @param [out] count_p  the number found.
 */
eep_status_t eep_agent_find_nics(char ***names_p, size_t *count_p);

#ifdef __cplusplus
}
#endif

#endif /* EEP_AGENT_H */
