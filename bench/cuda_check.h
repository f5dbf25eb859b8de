/*
 * bench/cuda_check.h - CHECK(call) for the standalone nvcc programs of bench/ (eep-membw,
 * eep-copy-sm): a CUDA runtime call that fails prints where and why, and the program exits 1.
 */
#ifndef EEP_BENCH_CUDA_CHECK_H
#define EEP_BENCH_CUDA_CHECK_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        cudaError_t err_ = (x);                                                                    \
        if (err_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(err_));  \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#endif /* EEP_BENCH_CUDA_CHECK_H */
