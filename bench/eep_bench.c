/*
 * eep_bench.c - `eep-bench`: the benchmark driver; each subcommand lives in bench/eep_bench_*.c.
 *
 *   eep-bench ep ...        dispatch/combine against the NCCL baseline (bench/eep_bench_ep.c)
 *   eep-bench --baseline nccl ...   the same as `eep-bench ep --baseline nccl ...`
 *   eep-bench --version | --help
 *
 * The driver only picks the command; each command parses its own options (ep: getopt_long).
 * A new benchmark adds its file and one row to the table below.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eep/version.h"
#include "eep_bench_barrier.h"
#include "eep_bench_ep.h"
#include "eep_bench_stats.h"

typedef int (*eep_bench_main_func_t)(int argc, char **argv);

static const struct {
    const char           *name;
    eep_bench_main_func_t main;
    const char           *doc;
} eep_bench_commands[] = {
    { "ep", eep_bench_ep_main, "dispatch/combine vs the NCCL baseline (eep-bench ep --help)" },
    { "barrier", eep_bench_barrier_main, "barrier latency vs NCCL (make bench-barrier)" },
};

#define EEP_BENCH_NCOMMANDS (sizeof(eep_bench_commands) / sizeof(eep_bench_commands[0]))

static int eep_bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

double eep_bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), eep_bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv)
{
    size_t i;

    /* Steady-state timings: no background compile of the kernels for one rank fewer competing
       for the host during the first timed iterations (unless the caller asks for it). */
    setenv("EEP_EP_PREFETCH_SHRINK", "0", 0);
    if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
        printf("eep-bench (ElasticEP) %s\n", eep_version());
        return 0;
    }
    if (argc >= 2 && argv[1][0] != '-') {
        for (i = 0; i < EEP_BENCH_NCOMMANDS; i++) {
            if (strcmp(argv[1], eep_bench_commands[i].name) == 0) {
                return eep_bench_commands[i].main(argc - 1, argv + 1);
            }
        }
    }
    if (argc >= 2 &&
        (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || argv[1][0] != '-')) {
        FILE *out = argv[1][0] == '-' ? stdout : stderr;

        fprintf(out, "usage: eep-bench COMMAND [options]\n");
        for (i = 0; i < EEP_BENCH_NCOMMANDS; i++) {
            fprintf(out, "  %-8s %s\n", eep_bench_commands[i].name, eep_bench_commands[i].doc);
        }
        return argv[1][0] == '-' ? 0 : 2;
    }
    /* No command: options belong to the dispatch/combine benchmark (eep-bench --baseline nccl). */
    return eep_bench_ep_main(argc, argv);
}
