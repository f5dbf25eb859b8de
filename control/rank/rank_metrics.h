/*
 * rank_metrics.h - one rank's metrics (eep-rank's /metrics): what it counts, the Prometheus text
 * it renders, and the small HTTP endpoint that serves it.
 *
 * Units are Prometheus base units: seconds, bytes.  The rank's loop owns an eep_rank_stats_t,
 * adds to it between calls (eep_rank_stats_observe, eep_rank_stats_fault, plain fields) and
 * publishes it (eep_rank_metrics_publish renders the text on the caller's thread); the HTTP
 * thread only copies the last text under a lock, so it never reads the loop's state.
 *
 * Who waits for whom: wait_s[phase][peer] is how long this rank waited for world rank `peer` in
 * `phase` (eep_wait_seconds_total{phase,peer}); the largest entry over the job's ranks names the
 * rank the others wait for (eepctl top).
 */
#ifndef EEP_CONTROL_RANK_METRICS_H
#define EEP_CONTROL_RANK_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "eep/layout.h"
#include "eep/status.h"

/* Histogram bounds in seconds (le), 10 us to 10 s; the +Inf bucket follows. */
#define EEP_RANK_HIST_BUCKETS 19
extern const double eep_rank_hist_bounds[EEP_RANK_HIST_BUCKETS];

typedef struct {
    uint64_t bucket[EEP_RANK_HIST_BUCKETS + 1]; /* not cumulative; the last is +Inf */
    uint64_t count;
    double   sum;
} eep_rank_hist_t;

/* The phases of eep_wait_seconds_total (label values: eep_rank_wait_phase_names). */
typedef enum {
    EEP_RANK_WAIT_BARRIER = 0,
    EEP_RANK_WAIT_DISPATCH_COUNTS,
    EEP_RANK_WAIT_DISPATCH_DATA,
    EEP_RANK_WAIT_COMBINE,
    EEP_RANK_WAIT_PHASES
} eep_rank_wait_phase_t;
extern const char *const eep_rank_wait_phase_names[EEP_RANK_WAIT_PHASES];

#define EEP_RANK_FAULT_KINDS 16 /* distinct fault statuses kept; more are counted as the last */

typedef struct {
    uint64_t        step, epoch;
    int             world, rank;
    eep_rank_hist_t dispatch, combine; /* host-measured call durations */
    uint64_t        dispatch_bytes, combine_bytes;
    uint64_t        jit_compiles, jit_cache_hits;
    struct {
        eep_status_t status;
        uint64_t     count;
    } faults[EEP_RANK_FAULT_KINDS];
    size_t n_fault_kinds;
    double wait_s[EEP_RANK_WAIT_PHASES][EEP_MAX_RANKS]; /* by world rank of the peer */
} eep_rank_stats_t;

/** Add one duration of @p seconds to @p h (negative or NaN durations are ignored). */
void eep_rank_stats_observe(eep_rank_hist_t *h, double seconds);

/** Count one fault of @p status (EEP_OK is ignored). */
void eep_rank_stats_fault(eep_rank_stats_t *s, eep_status_t status);

/**
 * Render @p s as Prometheus text: eep_step, eep_epoch, eep_world, eep_rank,
 * eep_dispatch_duration_seconds and eep_combine_duration_seconds (histograms), eep_bytes_total{op},
 * eep_calls_total{op}, eep_faults_total{kind}, eep_jit_compiles_total, eep_jit_cache_hits_total,
 * eep_wait_seconds_total{phase,peer} (peers this rank waited for; every peer of a phase that has
 * waits), all with their HELP and TYPE lines.
 * @return EEP_OK, EEP_ERR_INVALID_ARG (NULL), EEP_ERR_IO when @p out fails.
 */
eep_status_t eep_rank_metrics_render(FILE *out, const eep_rank_stats_t *s);

/* ---- the endpoint ---- */

typedef struct eep_rank_metrics eep_rank_metrics_t;

typedef struct {
    size_t      size; /* sizeof(eep_rank_metrics_params_t) */
    const char *addr; /* "IPv4:PORT" (port 0: the kernel picks); NULL: EEP_RANK_METRICS_ADDR;
                         "" or "off": no endpoint */
} eep_rank_metrics_params_t;

/**
 * Start serving /metrics (empty until the first publish) on its own thread.
 * @param [out] m_p  the endpoint; NULL when the address says off (EEP_OK all the same).
 * @return EEP_OK, EEP_ERR_INVALID_ARG naming the bad address, EEP_ERR_IO (cannot bind).
 */
eep_status_t eep_rank_metrics_create(const eep_rank_metrics_params_t *params,
                                     eep_rank_metrics_t             **m_p);

/** Stop serving and free.  NULL is a no-op. */
void eep_rank_metrics_destroy(eep_rank_metrics_t *m);

/** @return "http://HOST:PORT/metrics" (a bound 0.0.0.0 is advertised as the host name). */
const char *eep_rank_metrics_url(const eep_rank_metrics_t *m);

/** Render @p s and make it what /metrics serves.  NULL @p m is a no-op. */
eep_status_t eep_rank_metrics_publish(eep_rank_metrics_t *m, const eep_rank_stats_t *s);

#endif
