/* eep_bench_stats.h - what every benchmark's timing shares (defined in eep_bench.c). */
#ifndef EEP_BENCH_STATS_H
#define EEP_BENCH_STATS_H

/** The median of @p v[0, n) (n >= 1); sorts @p v in place. */
double eep_bench_median(double *v, int n);

#endif
