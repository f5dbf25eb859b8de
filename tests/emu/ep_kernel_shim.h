/*
 * ep_kernel_shim.h - just enough CUDA and NCCL device API, on the CPU, to run the real direct-mode
 * dispatch and combine kernels (kernels/ep/dispatch.cuh, combine.cuh) and the NCCL baseline's
 * (bench/kernels/baseline_*.cuh, through eep_shim_launch at the end) in a unit test: the one
 * emulator of both kernel families.  A fake
 * standing in for the GPU, which is not under test here: what is under test is the kernels'
 * logic (layout, order, the tag/handshake protocol between blocks and ranks, warp-uniform use of
 * warp operations).
 *
 * One process per block (fork), one fiber per GPU thread: a block's __shared__ variables become
 * that process's statics, and "global memory" is one MAP_SHARED mapping made before the forks, so
 * every block of every rank sees the same bytes at the same addresses, and the blocks run truly
 * at once.  Inside a block the 512 GPU threads are fibers on the process's one OS thread
 * (eep_shim_run_fibers), switched only where a GPU thread waits: __syncthreads is a barrier over
 * the block's 512 fibers; each warp operation (shuffle, ballot, match_any, reduce, __syncwarp) is
 * an exchange through the warp's slots between two 32-fiber barriers; __nanosleep and the clock
 * (read by every bounded wait) let the next fiber run.  A warp operation that some lanes of the
 * warp never reach leaves its fibers blocked for good, as it hangs the GPU: when every fiber of
 * the block is blocked the block process says so and exits with status 5.  Fibers replaced OS
 * threads (futex barriers between 512 threads on 2 cores: 80 % of the suites' time was system
 * time).  Each round of the scheduler runs the fibers in the opposite order of the last, so a
 * read of another warp's shared-memory write that lacks the sync between them gets two chances
 * to come first.  ncclGetLsaPointer(window, offset, peer) returns the peer's emulated
 * window + offset.  Include this before any kernel header, in one translation unit; C++20,
 * x86-64 (the fiber switch is a few lines of its assembly).  Test code only.
 */
#ifndef EEP_TESTS_EP_KERNEL_SHIM_H
#define EEP_TESTS_EP_KERNEL_SHIM_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <cstdio>
#include <memory>
#include <sched.h>
#include <sys/mman.h>
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
/* threadIdx: the running fiber's (set by the scheduler at every switch) */
inline eep_shim_dim3 threadIdx, blockIdx, blockDim, gridDim; /* per process = per block */

struct uint4 {
    unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d)
{
    return uint4{ a, b, c, d };
}

/* Fibers.  eep_shim_switch saves the callee-saved registers, the SSE and x87 control words and
   the stack pointer on the current stack (into *save), then loads them from @p load. */
extern "C" void eep_shim_switch(void **save, void *load);
#if defined(__x86_64__)
asm(".pushsection .text\n"
    ".weak eep_shim_switch\n"
    ".type eep_shim_switch, @function\n"
    "eep_shim_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size eep_shim_switch, .-eep_shim_switch\n"
    ".popsection\n");
#define EEP_SHIM_SWITCH_FRAME 7 /* words below the return address: csr, r15..r12, rbx, rbp */
#else
#error "tests/emu/ep_kernel_shim.h: the fiber switch is written for x86-64 only"
#endif

/* AddressSanitizer (make asan) keeps one stack a thread in its books: it is told of every
   switch between stacks (its fiber API). */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EEP_SHIM_ASAN 1
#else
#define EEP_SHIM_ASAN 0
#endif

enum { EEP_SHIM_RUNNABLE, EEP_SHIM_BLOCKED, EEP_SHIM_DONE };

struct eep_shim_fiber {
    void          *sp;
    unsigned char *stack;
    int            state;
    void          *asan_fake; /* ASan's fake stack of the fiber while it is switched out */
};

#define EEP_SHIM_STACK_BYTES (256u * 1024u)
#define EEP_SHIM_MAX_FIBERS  512u

/* A barrier of n fibers: the last to arrive makes the others runnable and goes on. */
struct eep_shim_barrier {
    unsigned n = 0, arrived = 0;
    unsigned waiting[EEP_SHIM_MAX_FIBERS];
};

inline eep_shim_fiber eep_shim_fibers[EEP_SHIM_MAX_FIBERS];
inline unsigned       eep_shim_cur;      /* the running fiber */
inline void          *eep_shim_sched_sp; /* the scheduler's stack while a fiber runs */
inline bool           eep_shim_in_fiber; /* false in the test's own (host) code */
inline bool           eep_shim_slept;    /* the running fiber gave way while waiting */
inline void (*eep_shim_body)(void *);
inline void       *eep_shim_body_arg;
inline const void *eep_shim_sched_stack; /* the scheduler's stack, for ASan */
inline size_t      eep_shim_sched_stack_bytes;
inline void       *eep_shim_sched_fake;

/* The block being run by this process. */
struct eep_shim_warp {
    eep_shim_barrier   bar;
    unsigned long long slot[32];
};
inline eep_shim_barrier eep_shim_block_bar;
inline eep_shim_warp    eep_shim_warps[32];
inline int             *eep_shim_dyn; /* dynamic shared memory of this block */

/* From the scheduler to fiber @p t, until it gives the CPU back. */
inline void eep_shim_to_fiber(unsigned t)
{
#if EEP_SHIM_ASAN
    __sanitizer_start_switch_fiber(&eep_shim_sched_fake, eep_shim_fibers[t].stack,
                                   EEP_SHIM_STACK_BYTES);
#endif
    eep_shim_switch(&eep_shim_sched_sp, eep_shim_fibers[t].sp);
#if EEP_SHIM_ASAN
    __sanitizer_finish_switch_fiber(eep_shim_sched_fake, NULL, NULL);
#endif
}

/* From the running fiber to the scheduler (for good when it is done); returns when this fiber is
   scheduled again. */
inline void eep_shim_yield()
{
    eep_shim_fiber &f = eep_shim_fibers[eep_shim_cur];

#if EEP_SHIM_ASAN
    __sanitizer_start_switch_fiber(f.state == EEP_SHIM_DONE ? NULL : &f.asan_fake,
                                   eep_shim_sched_stack, eep_shim_sched_stack_bytes);
#endif
    eep_shim_switch(&f.sp, eep_shim_sched_sp);
#if EEP_SHIM_ASAN
    __sanitizer_finish_switch_fiber(f.asan_fake, NULL, NULL);
#endif
}

/* A GPU thread that polls: let the others run (no-op in the test's host code). */
inline void eep_shim_give_way()
{
    if (eep_shim_in_fiber) {
        eep_shim_slept = true;
        eep_shim_yield();
    }
}

inline void eep_shim_arrive_and_wait(eep_shim_barrier &b)
{
    if (++b.arrived == b.n) {
        for (unsigned i = 0; i + 1 < b.n; i++) {
            eep_shim_fibers[b.waiting[i]].state = EEP_SHIM_RUNNABLE;
        }
        b.arrived = 0;
        return;
    }
    b.waiting[b.arrived - 1]            = eep_shim_cur;
    eep_shim_fibers[eep_shim_cur].state = EEP_SHIM_BLOCKED;
    eep_shim_yield();
}

[[noreturn]] inline void eep_shim_fiber_main()
{
#if EEP_SHIM_ASAN
    __sanitizer_finish_switch_fiber(NULL, &eep_shim_sched_stack, &eep_shim_sched_stack_bytes);
#endif
    eep_shim_body(eep_shim_body_arg);
    eep_shim_fibers[eep_shim_cur].state = EEP_SHIM_DONE;
    eep_shim_yield();
    __builtin_unreachable();
}

/*
 * Run body(arg) as @p n GPU threads (threadIdx.x 0..n-1) of this process's block, to the end of
 * every one.  Exits the process with status 5 when every unfinished fiber is blocked at a barrier
 * (a warp operation or __syncthreads that some threads never reach: a hang on the GPU).
 */
inline void eep_shim_run_fibers(unsigned n, void (*body)(void *), void *arg)
{
    unsigned live = n, round = 0, idle_rounds = 0;

    if (n > EEP_SHIM_MAX_FIBERS) {
        fprintf(stderr, "emulation: %u threads a block, at most %u\n", n, EEP_SHIM_MAX_FIBERS);
        _exit(3);
    }
    eep_shim_body        = body;
    eep_shim_body_arg    = arg;
    eep_shim_block_bar.n = n;
    for (unsigned w = 0; w < (n + 31) / 32; w++) {
        eep_shim_warps[w].bar.n = 32;
    }
    for (unsigned t = 0; t < n; t++) {
        eep_shim_fiber &f = eep_shim_fibers[t];
        void          **sp;

        f.stack = (unsigned char *)mmap(NULL, EEP_SHIM_STACK_BYTES, PROT_READ | PROT_WRITE,
                                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (f.stack == MAP_FAILED) {
            _exit(3);
        }
        /* The first switch to it "returns" into eep_shim_fiber_main with an aligned stack. */
        sp  = (void **)(f.stack + EEP_SHIM_STACK_BYTES) - 2;
        *sp = (void *)&eep_shim_fiber_main;
        sp -= EEP_SHIM_SWITCH_FRAME;
        memset(sp, 0, EEP_SHIM_SWITCH_FRAME * sizeof(void *));
        ((unsigned *)sp)[0] = 0x1f80u; /* MXCSR default */
        ((unsigned *)sp)[1] = 0x037fu; /* x87 control word default */
        f.sp                = sp;
        f.state             = EEP_SHIM_RUNNABLE;
    }
    eep_shim_in_fiber = true;
    while (live > 0) {
        unsigned ran = 0, gave_way = 0;

        for (unsigned k = 0; k < n; k++) {
            const unsigned t = round & 1u ? n - 1 - k : k;

            if (eep_shim_fibers[t].state != EEP_SHIM_RUNNABLE) {
                continue;
            }
            eep_shim_cur   = t;
            threadIdx.x    = t;
            eep_shim_slept = false;
            eep_shim_to_fiber(t);
            ran++;
            gave_way += eep_shim_slept ? 1u : 0u;
            if (eep_shim_fibers[t].state == EEP_SHIM_DONE) {
                live--;
            }
        }
        round++;
        if (ran == 0) {
            fprintf(stderr,
                    "emulation: block %u: every unfinished thread waits at a barrier that "
                    "others never reach (a hang on the GPU)\n",
                    blockIdx.x);
            _exit(5);
        }
        /* Every fiber that ran is polling memory that another block or rank must write: give
           the CPU to the other block processes, and sleep a little when that lasts. */
        if (gave_way == ran) {
            if (++idle_rounds > 64) {
                usleep(50);
            } else {
                sched_yield();
            }
        } else {
            idle_rounds = 0;
        }
    }
    eep_shim_in_fiber = false;
    for (unsigned t = 0; t < n; t++) {
        munmap(eep_shim_fibers[t].stack, EEP_SHIM_STACK_BYTES);
    }
}

#define EEP_EPK_DYN_SMEM(name) int *name = eep_shim_dyn

/* Test hook of kernels/ep/dispatch.cuh: the senders of rank eep_shim_slow_rank sleep 200 ms before
   each token's bytes, so that the other ranks' copies meet records that have not landed yet.
   With 8 ranks (24 block processes on CI's 2 cores) a rank's blocks can start 100-150 ms after
   another's: 500 ms there, so that the waits for the slow rank (counted in wall-clock seconds,
   overlapping waits once: kernels/common/wait.cuh) stand above that scheduling noise (1 s
   before: 15 runs of the five 8-rank builds at 500 ms passed, 5 of them with one or both cores
   taken by busy loops, and make test spent ~65 s less). */
#if defined(EEP_EPK_FIXED_W) && EEP_EPK_FIXED_W >= 8
#define EEP_SHIM_SLOW_SEND_NS 500000000ull
#else
#define EEP_SHIM_SLOW_SEND_NS 200000000ull
#endif
inline int                eep_shim_slow_rank = -1;
inline unsigned long long eep_shim_clock_ns()
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

/* The kernels' clock (%globaltimer): every bounded wait reads it, so a fiber gives way here. */
inline unsigned long long eep_shim_now_ns()
{
    eep_shim_give_way();
    return eep_shim_clock_ns();
}

/* A GPU thread that sleeps @p ns while the others of its block run. */
inline void eep_shim_sleep_ns(unsigned long long ns)
{
    const unsigned long long until = eep_shim_clock_ns() + ns;

    while (eep_shim_clock_ns() < until) {
        eep_shim_give_way();
    }
}

#define EEP_EPK_TEST_SEND_DELAY(p)                                                                 \
    do {                                                                                           \
        if ((p).rank == eep_shim_slow_rank) {                                                      \
            eep_shim_sleep_ns(EEP_SHIM_SLOW_SEND_NS);                                              \
        }                                                                                          \
    } while (0)

inline void __syncthreads()
{
    eep_shim_arrive_and_wait(eep_shim_block_bar);
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
    eep_shim_arrive_and_wait(eep_shim_my_warp().bar);
}

/* Every lane publishes v; after the barrier each lane reads what it needs, then a second barrier
   keeps the slots until everyone has read. */
template <typename F>
inline auto eep_shim_exchange(unsigned long long v, F read)
{
    eep_shim_warp &w = eep_shim_my_warp();

    w.slot[eep_shim_lane()] = v;
    eep_shim_arrive_and_wait(w.bar);
    auto r = read(w.slot);
    eep_shim_arrive_and_wait(w.bar);
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
    eep_shim_give_way();
}

template <typename T>
inline T __ldcg(const T *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/* read-only data (the placement table): a plain load */
template <typename T>
inline T __ldg(const T *p)
{
    return *p;
}

template <typename T>
inline T atomicAdd(T *p, T v)
{
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

inline unsigned long long atomicMax(unsigned long long *p, unsigned long long v)
{
    unsigned long long old = __atomic_load_n(p, __ATOMIC_RELAXED);

    while (old < v &&
           !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return old;
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

/*
 * In-process launch, for kernels whose blocks never wait for one another (the NCCL baseline's,
 * bench/kernels/): the @p grid blocks run one after another in this process, each block's
 * @p block threads as fibers, as eep_shim_run_fibers runs them; __shared__ statics are this
 * process's, so a block sees what the previous one left (kernels that rely on zeroed shared
 * memory are wrong on the GPU too).
 */
template <typename P>
struct eep_shim_launch_ctx {
    void (*fn)(const P &);
    const P *p;
};

template <typename P>
inline void eep_shim_launch_body(void *arg)
{
    const eep_shim_launch_ctx<P> *c = (const eep_shim_launch_ctx<P> *)arg;

    c->fn(*c->p);
}

template <typename P>
inline void eep_shim_launch(void (*fn)(const P &), unsigned grid, unsigned block, const P &p)
{
    eep_shim_launch_ctx<P> c = { fn, &p };

    blockDim.x = block;
    gridDim.x  = grid;
    for (unsigned b = 0; b < grid; b++) {
        blockIdx.x = b;
        eep_shim_run_fibers(block, eep_shim_launch_body<P>, &c);
    }
}

#endif /* EEP_TESTS_EP_KERNEL_SHIM_H */
