/*
 * eep_bench_ep_trace.c - `eep-bench ep --trace`: where ours' last dispatch and combine spent their
 * time, one line per block group, from the stamps each block leaves (eep_ep_trace_copy).
 */
#include "eep_bench_ep_parts.h"

#include <stdio.h>

#include "elastic/ep/ep_handle.h"
#include "kernels/ep/ep_params.h"

/* A stamp in us after @p t0 (ns). */
static double us_after(uint64_t stamp, uint64_t t0)
{
    return (double)(int64_t)(stamp - t0) / 1e3;
}

/* " | name min-max": the earliest and latest stamp of blocks [lo, hi), st[b * stride] (0: none),
   in us after @p t0; nothing when no block has one. */
static void print_span(const uint64_t *st, int stride, int lo, int hi, uint64_t t0,
                       const char *name)
{
    double mn = 1e30, mx = -1e30;
    int    found = 0, b;

    for (b = lo; b < hi; b++) {
        if (st[(size_t)b * stride] != 0) {
            double us = us_after(st[(size_t)b * stride], t0);

            mn    = us < mn ? us : mn;
            mx    = us > mx ? us : mx;
            found = 1;
        }
    }
    if (found) {
        printf(" | %s %.1f-%.1f", name, mn, mx);
    }
}

/*
 * --trace: for the last dispatch and combine, per phase stamp k (kernels/ep/dispatch.cuh,
 * eep_epk_stamp) and block group, the earliest / latest block in us after the first block's
 * phase 0; first, when the blocks began and left griddepcontrol.wait (negative: before that).
 * Dispatch groups: senders [0, S), the counter S, copy blocks (S, G), then each block alone;
 * combine: all blocks.
 */
void eep_bench_ep_print_trace(eep_runtime_t *rt, int rank, int S, int G)
{
    static uint64_t    st[EEP_EPK_TRACE_WORDS];
    static const char *dnames[8] = { "start",  "counted", "sent",    "counts in",
                                     "layout", "padding", "records", "end" };
    static const char *cnames[8] = { "start", "expert side", "source side", "handshake",
                                     "-",     "-",           "-",           "end" };
    int                which, g, k, b;

    for (which = 0; which < 2; which++) {
        uint64_t t0 = UINT64_MAX;

        if (eep_ep_trace_copy(rt, which, st, EEP_EPK_TRACE_WORDS) != EEP_OK) {
            return;
        }
        for (b = 0; b < G; b++) {
            if (st[b * 8] != 0 && st[b * 8] < t0) {
                t0 = st[b * 8];
            }
        }
        for (g = 0; g < (which == 0 ? 3 : 1); g++) {
            int lo = which == 1 ? 0 : g == 0 ? 0 : g == 1 ? S : S + 1;
            int hi = which == 1 ? G : g == 0 ? S : g == 1 ? S + 1 : G;

            printf("trace rank %d %s %-8s", rank, which == 0 ? "dispatch" : "combine ",
                   which == 1 ? "all"
                   : g == 0   ? "senders"
                   : g == 1   ? "counter"
                              : "copiers");
            for (k = 0; k < 2; k++) {
                print_span(st + EEP_EPK_TRACE_LAUNCH + k, 2, lo, hi, t0,
                           k == 0 ? "began" : "waited");
            }
            for (k = 0; k < 8; k++) {
                print_span(st + k, 8, lo, hi, t0, which == 0 ? dnames[k] : cnames[k]);
            }
            printf("\n");
        }
        /* dispatch, block by block too, those that ran (the one-rank path's blocks are not in
           those groups and fewer than G: its last block sums the counts, dispatch_solo.cuh) */
        for (b = 0; which == 0 && b < G; b++) {
            if (st[b * 8] == 0) {
                continue;
            }
            printf("trace rank %d dispatch block %3d", rank, b);
            for (k = 0; k < 8; k++) {
                if (st[b * 8 + k] != 0) {
                    printf(" | %s %.1f", dnames[k], us_after(st[b * 8 + k], t0));
                }
            }
            printf("\n");
        }
    }
    fflush(stdout);
}
