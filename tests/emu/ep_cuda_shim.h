/*
 * ep_cuda_shim.h - just enough CUDA, on the CPU, to run the NCCL baseline's kernel bodies
 * (kernels/ep/baseline_*.cuh) in a unit test: one OS thread per GPU thread, one block at a time.
 *
 * __shared__ becomes static (one block runs at a time), __syncthreads a std::barrier over the
 * block, __shfl_up_sync an exchange through a per-warp slot array between two warp barriers, and
 * the intrinsics their libm/bit equivalents (compile with -ffp-contract=off so that the host adds
 * and multiplies round like __fadd_rn and separate ops).  Include it before any kernel header.
 * C++20 (std::barrier).  Test code only.
 */
#ifndef EEP_TESTS_EP_CUDA_SHIM_H
#define EEP_TESTS_EP_CUDA_SHIM_H

#include <barrier>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#define __CUDACC__ 1
#define __device__
#define __forceinline__ inline
#define __shared__      static

struct eep_shim_dim3 {
    unsigned x = 0, y = 0, z = 0;
};
inline thread_local eep_shim_dim3 threadIdx, blockIdx;
inline eep_shim_dim3              blockDim, gridDim;

struct uint4 {
    unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d)
{
    return uint4{ a, b, c, d };
}

struct eep_shim_warp {
    std::unique_ptr<std::barrier<>> bar;
    int                             vals[32];
};
inline std::barrier<>            *eep_shim_block_bar;
inline std::vector<eep_shim_warp> eep_shim_warps;

inline void __syncthreads()
{
    eep_shim_block_bar->arrive_and_wait();
}

inline int __shfl_up_sync(unsigned, int v, int d)
{
    eep_shim_warp &w    = eep_shim_warps[threadIdx.x / 32];
    int            lane = (int)(threadIdx.x % 32);

    w.vals[lane] = v;
    w.bar->arrive_and_wait();
    int r = lane >= d ? w.vals[lane - d] : v;
    w.bar->arrive_and_wait();
    return r;
}

inline int atomicCAS(int *p, int cmp, int val)
{
    __atomic_compare_exchange_n(p, &cmp, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return cmp;
}

inline float __uint_as_float(unsigned u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

inline unsigned __float_as_uint(float f)
{
    unsigned u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

inline float __fmaf_rn(float a, float b, float c)
{
    return std::fmaf(a, b, c);
}

inline float __fadd_rn(float a, float b)
{
    volatile float r = a + b;
    return r;
}

/* Run fn(p) as a grid of @p grid blocks of @p block threads (a multiple of 32). */
template <typename P>
void eep_shim_launch(void (*fn)(const P &), unsigned grid, unsigned block, const P &p)
{
    blockDim.x = block;
    gridDim.x  = grid;
    for (unsigned b = 0; b < grid; b++) {
        std::barrier<>           bar(block);
        std::vector<std::thread> threads;

        eep_shim_block_bar = &bar;
        eep_shim_warps.clear();
        eep_shim_warps.resize(block / 32);
        for (auto &w : eep_shim_warps) {
            w.bar = std::make_unique<std::barrier<>>(32);
        }
        for (unsigned t = 0; t < block; t++) {
            threads.emplace_back([=, &p]() {
                threadIdx.x = t;
                blockIdx.x  = b;
                fn(p);
            });
        }
        for (auto &t : threads) {
            t.join();
        }
    }
}

#endif /* EEP_TESTS_EP_CUDA_SHIM_H */
