/*
 * ep_kernel_shim.h - just enough CUDA and NCCL device API, on the CPU, to run the real direct-mode
 * dispatch and combine kernels (kernels/ep/dispatch.cuh, combine.cuh) in a unit test.  A fake
 * standing in for the GPU, which is not under test here: what is under test is the kernels'
 * logic (layout, order, the tag/handshake protocol between blocks and ranks, warp-uniform use of
 * warp operations).
 *
 * One process per block (fork), one OS thread per GPU thread: a block's __shared__ variables
 * become that process's statics, and "global memory" is one MAP_SHARED mapping made before the
 * forks, so every block of every rank sees the same bytes at the same addresses.  __syncthreads
 * is a barrier over the block's 512 threads; each warp operation (shuffle, ballot, match_any,
 * reduce, __syncwarp) is an exchange through the warp's slots between two 32-thread barriers, so
 * a warp operation that some lanes of the warp never reach blocks, as on the GPU, and the test's
 * time limit catches it.  ncclGetLsaPointer(window, offset, peer) returns the peer's emulated
 * window + offset.  Include this before any kernel header; C++20.  Test code only.
 */
#ifndef EEP_TESTS_EP_KERNEL_SHIM_H
#define EEP_TESTS_EP_KERNEL_SHIM_H

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <memory>
#include <sched.h>
#include <unistd.h>

#define __CUDACC__        1
#define EEP_EPK_EMULATION 1
#define __device__
#define __forceinline__ inline
#define __noinline__    __attribute__((noinline))
#define __shared__      static

using std::max;
using std::min;

struct eep_shim_dim3 {
    unsigned x = 0, y = 0, z = 0;
};
inline thread_local eep_shim_dim3 threadIdx;
inline eep_shim_dim3              blockIdx, blockDim, gridDim; /* per process = per block */

struct uint4 {
    unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d)
{
    return uint4{ a, b, c, d };
}

/* The block being run by this process. */
struct eep_shim_warp {
    std::barrier<>    *bar;
    unsigned long long slot[32];
};
inline std::barrier<> *eep_shim_block_bar;
inline eep_shim_warp   eep_shim_warps[32];
inline int            *eep_shim_dyn; /* dynamic shared memory of this block */

#define EEP_EPK_DYN_SMEM(name) int *name = eep_shim_dyn

/* Test hook of kernels/ep/dispatch.cuh: the senders of rank eep_shim_slow_rank sleep 200 ms before
   each token's bytes, so that the other ranks' copies meet records that have not landed yet. */
inline int eep_shim_slow_rank = -1;
#define EEP_EPK_TEST_SEND_DELAY(p)                                                                 \
    do {                                                                                           \
        if ((p).rank == eep_shim_slow_rank) {                                                      \
            usleep(200000);                                                                        \
        }                                                                                          \
    } while (0)

inline unsigned long long eep_shim_now_ns()
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

inline void __syncthreads()
{
    eep_shim_block_bar->arrive_and_wait();
}

inline unsigned eep_shim_lane()
{
    return threadIdx.x & 31u;
}

inline eep_shim_warp &eep_shim_my_warp()
{
    return eep_shim_warps[threadIdx.x / 32];
}

inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    (void)mask;
    eep_shim_my_warp().bar->arrive_and_wait();
}

/* Every lane publishes v; after the barrier each lane reads what it needs, then a second barrier
   keeps the slots until everyone has read. */
template <typename F>
inline auto eep_shim_exchange(unsigned long long v, F read)
{
    eep_shim_warp &w = eep_shim_my_warp();

    w.slot[eep_shim_lane()] = v;
    w.bar->arrive_and_wait();
    auto r = read(w.slot);
    w.bar->arrive_and_wait();
    return r;
}

template <typename T>
inline unsigned long long eep_shim_bits(T v)
{
    unsigned long long b = 0;

    static_assert(sizeof(T) <= 8, "shuffle of at most 8 bytes");
    memcpy(&b, &v, sizeof(T));
    return b;
}

template <typename T>
inline T eep_shim_from_bits(unsigned long long b)
{
    T v;

    memcpy(&v, &b, sizeof(T));
    return v;
}

template <typename T>
inline T __shfl_sync(unsigned, T v, int src)
{
    return eep_shim_exchange(eep_shim_bits(v), [src](const unsigned long long *s) {
        return eep_shim_from_bits<T>(s[src & 31]);
    });
}

inline int __shfl_up_sync(unsigned, int v, int d)
{
    const unsigned lane = eep_shim_lane();

    return eep_shim_exchange(eep_shim_bits(v), [lane, d, v](const unsigned long long *s) {
        return (int)lane >= d ? eep_shim_from_bits<int>(s[lane - d]) : v;
    });
}

template <typename T>
inline T __shfl_xor_sync(unsigned, T v, int x)
{
    const unsigned lane = eep_shim_lane();

    return eep_shim_exchange(eep_shim_bits(v), [lane, x](const unsigned long long *s) {
        return eep_shim_from_bits<T>(s[(lane ^ (unsigned)x) & 31u]);
    });
}

inline unsigned __ballot_sync(unsigned, int pred)
{
    return eep_shim_exchange(pred ? 1ull : 0ull, [](const unsigned long long *s) {
        unsigned b = 0;
        for (int i = 0; i < 32; i++) {
            b |= (s[i] != 0 ? 1u : 0u) << i;
        }
        return b;
    });
}

inline int __any_sync(unsigned mask, int pred)
{
    return __ballot_sync(mask, pred) != 0;
}

inline unsigned __reduce_or_sync(unsigned, unsigned v)
{
    return eep_shim_exchange(v, [](const unsigned long long *s) {
        unsigned r = 0;
        for (int i = 0; i < 32; i++) {
            r |= (unsigned)s[i];
        }
        return r;
    });
}

inline unsigned __match_any_sync(unsigned, int v)
{
    return eep_shim_exchange(eep_shim_bits(v), [v](const unsigned long long *s) {
        unsigned m = 0;
        for (int i = 0; i < 32; i++) {
            m |= (eep_shim_from_bits<int>(s[i]) == v ? 1u : 0u) << i;
        }
        return m;
    });
}

inline int __popc(unsigned v)
{
    return __builtin_popcount(v);
}

inline int __ffs(unsigned v)
{
    return __builtin_ffs((int)v);
}

inline void __threadfence()
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

inline void __threadfence_system()
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

inline void __nanosleep(unsigned)
{
    sched_yield();
}

template <typename T>
inline T __ldcg(const T *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

template <typename T>
inline T atomicAdd(T *p, T v)
{
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

inline int atomicOr(int *p, int v)
{
    return __atomic_fetch_or(p, v, __ATOMIC_RELAXED);
}

inline int atomicCAS(int *p, int cmp, int val)
{
    __atomic_compare_exchange_n(p, &cmp, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return cmp;
}

inline unsigned atomicCAS(unsigned *p, unsigned cmp, unsigned val)
{
    __atomic_compare_exchange_n(p, &cmp, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return cmp;
}

inline float __uint_as_float(unsigned u)
{
    return eep_shim_from_bits<float>(u);
}

inline unsigned __float_as_uint(float f)
{
    return (unsigned)eep_shim_bits(f);
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

/* NCCL's device API, as far as the direct-mode kernels use it: a window is the array of every
   rank's emulated window base. */
struct eep_shim_window {
    unsigned char *base[32];
};
typedef eep_shim_window *ncclWindow_t;

inline void *ncclGetLsaPointer(ncclWindow_t w, size_t offset, int peer)
{
    return w->base[peer] + offset;
}

#endif /* EEP_TESTS_EP_KERNEL_SHIM_H */
