/* eep_bench_barrier.h - `eep-bench barrier`: barrier latency against NCCL (eep_bench_barrier.c). */
#ifndef EEP_BENCH_BARRIER_H
#define EEP_BENCH_BARRIER_H

/** argv[0] is "barrier"; argv[1] an optional markdown output path; argv[2] the sample count. */
int eep_bench_barrier_main(int argc, char **argv);

#endif
