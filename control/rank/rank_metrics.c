/*
 * rank_metrics.c - a rank's counters and their Prometheus text (control/rank/rank_metrics.h).
 *
 * Pure: no thread, no socket.  Histograms keep per-bucket counts and are made cumulative when
 * rendered; bounds are in seconds.  Wait series appear for the peers this rank waited for (a
 * counter that is still 0 for every peer of a phase is left out, as a 1024-rank job would
 * otherwise render 4096 zero lines).
 */
#include "control/rank/rank_metrics.h"

#include <math.h>
#include <string.h>

const double eep_rank_hist_bounds[EEP_RANK_HIST_BUCKETS] = {
    10e-6, 25e-6, 50e-6,  100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3,
    25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1.0,    2.5,  5.0,    10.0,
};

const char *const eep_rank_wait_phase_names[EEP_RANK_WAIT_PHASES] = {
    "barrier",
    "dispatch_counts",
    "dispatch_data",
    "combine",
};

void eep_rank_stats_observe(eep_rank_hist_t *h, double seconds)
{
    int b = 0;

    if (h == NULL || !(seconds >= 0)) {
        return;
    }
    while (b < EEP_RANK_HIST_BUCKETS && seconds > eep_rank_hist_bounds[b]) {
        b++;
    }
    h->bucket[b]++;
    h->count++;
    h->sum += seconds;
}

void eep_rank_stats_fault(eep_rank_stats_t *s, eep_status_t status)
{
    size_t i;

    if (s == NULL || status == EEP_OK) {
        return;
    }
    for (i = 0; i < s->n_fault_kinds; i++) {
        if (s->faults[i].status == status) {
            s->faults[i].count++;
            return;
        }
    }
    if (s->n_fault_kinds < EEP_RANK_FAULT_KINDS) {
        s->faults[s->n_fault_kinds].status  = status;
        s->faults[s->n_fault_kinds++].count = 1;
    } else {
        s->faults[EEP_RANK_FAULT_KINDS - 1].count++; /* past the table: the last kind */
    }
}

static void eep_rank_metric_head(FILE *out, const char *name, const char *type, const char *help)
{
    fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void eep_rank_metric_hist(FILE *out, const char *name, const char *help,
                                 const eep_rank_hist_t *h)
{
    uint64_t cum = 0;
    int      b;

    eep_rank_metric_head(out, name, "histogram", help);
    for (b = 0; b < EEP_RANK_HIST_BUCKETS; b++) {
        cum += h->bucket[b];
        fprintf(out, "%s_bucket{le=\"%g\"} %llu\n", name, eep_rank_hist_bounds[b],
                (unsigned long long)cum);
    }
    cum += h->bucket[EEP_RANK_HIST_BUCKETS];
    fprintf(out, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name,
            (unsigned long long)cum, name, h->sum, name, (unsigned long long)h->count);
}

eep_status_t eep_rank_metrics_render(FILE *out, const eep_rank_stats_t *s)
{
    int    p, peer, world;
    size_t i;

    if (out == NULL || s == NULL) {
        return EEP_ERR_INVALID_ARG;
    }
    world = s->world < 0 ? 0 : s->world > EEP_MAX_RANKS ? EEP_MAX_RANKS : s->world;
    eep_rank_metric_head(out, "eep_step", "gauge", "Steps this rank started.");
    fprintf(out, "eep_step %llu\n", (unsigned long long)s->step);
    eep_rank_metric_head(out, "eep_epoch", "gauge", "Membership epoch of the view in use.");
    fprintf(out, "eep_epoch %llu\n", (unsigned long long)s->epoch);
    eep_rank_metric_head(out, "eep_world", "gauge", "Ranks in the view in use.");
    fprintf(out, "eep_world %d\n", s->world);
    eep_rank_metric_head(out, "eep_rank", "gauge", "This process's rank in the view (-1: none).");
    fprintf(out, "eep_rank %d\n", s->rank);
    eep_rank_metric_hist(out, "eep_dispatch_duration_seconds",
                         "Dispatch calls, enqueue to finished, host-measured.", &s->dispatch);
    eep_rank_metric_hist(out, "eep_combine_duration_seconds",
                         "Combine calls, enqueue to finished, host-measured.", &s->combine);
    eep_rank_metric_head(out, "eep_calls_total", "counter", "Dispatch and combine calls.");
    fprintf(out, "eep_calls_total{op=\"dispatch\"} %llu\neep_calls_total{op=\"combine\"} %llu\n",
            (unsigned long long)s->dispatch.count, (unsigned long long)s->combine.count);
    eep_rank_metric_head(out, "eep_bytes_total", "counter",
                         "Token bytes received by dispatch and sent back by combine.");
    fprintf(out, "eep_bytes_total{op=\"dispatch\"} %llu\neep_bytes_total{op=\"combine\"} %llu\n",
            (unsigned long long)s->dispatch_bytes, (unsigned long long)s->combine_bytes);
    eep_rank_metric_head(out, "eep_faults_total", "counter",
                         "Failed steps, by the status they failed with.");
    for (i = 0; i < s->n_fault_kinds && i < EEP_RANK_FAULT_KINDS; i++) {
        fprintf(out, "eep_faults_total{kind=\"%s\"} %llu\n", eep_status_name(s->faults[i].status),
                (unsigned long long)s->faults[i].count);
    }
    eep_rank_metric_head(out, "eep_jit_compiles_total", "counter",
                         "Kernels compiled (a cache miss).");
    fprintf(out, "eep_jit_compiles_total %llu\n", (unsigned long long)s->jit_compiles);
    eep_rank_metric_head(out, "eep_jit_cache_hits_total", "counter",
                         "Kernels found compiled in the cache.");
    fprintf(out, "eep_jit_cache_hits_total %llu\n", (unsigned long long)s->jit_cache_hits);
    eep_rank_metric_head(out, "eep_wait_seconds_total", "counter",
                         "Time this rank's device waits spent waiting for a peer (world rank), "
                         "by phase.");
    for (p = 0; p < EEP_RANK_WAIT_PHASES; p++) {
        int any = 0;

        for (peer = 0; peer < world && !any; peer++) {
            any = s->wait_s[p][peer] > 0;
        }
        for (peer = 0; any && peer < world; peer++) {
            fprintf(out, "eep_wait_seconds_total{phase=\"%s\",peer=\"%d\"} %.9g\n",
                    eep_rank_wait_phase_names[p], peer,
                    isfinite(s->wait_s[p][peer]) ? s->wait_s[p][peer] : 0.0);
        }
    }
    return ferror(out) ? EEP_ERR_IO : EEP_OK;
}
