/*
 * kernels/common/mem_ops.cuh - the memory operations the device code orders its signals with:
 * loads and stores with acquire/release or relaxed semantics at system or GPU scope, fences, the
 * global timer, and programmatic dependent launch (eep_grid_dep_wait/launch).
 */
#ifndef EEP_KERNELS_COMMON_MEM_OPS_CUH
#define EEP_KERNELS_COMMON_MEM_OPS_CUH

/*
 * The memory operations the kernels order their signals with.  EEP_EPK_EMULATION (defined only
 * by tests/emu/ep_kernel_shim.h, which runs the kernels on CPU threads) swaps the PTX for the
 * compiler's atomics and a host clock; the GPU build never sees that branch.
 */
#ifndef EEP_EPK_EMULATION
__device__ __forceinline__ unsigned long long eep_globaltimer(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ unsigned long long eep_ld_acquire_sys(const unsigned long long *p)
{
    unsigned long long v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ unsigned long long eep_ld_relaxed_sys(const unsigned long long *p)
{
    unsigned long long v;
    asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void eep_st_release_sys(unsigned long long *p, unsigned long long v)
{
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ void eep_st_relaxed_sys(unsigned long long *p, unsigned long long v)
{
    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ void eep_st_release_gpu(unsigned long long *p, unsigned long long v)
{
    asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned long long eep_ld_acquire_gpu(const unsigned long long *p)
{
    unsigned long long v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

/*
 * This thread's earlier writes reach every observer (a peer over NVLink included) before its
 * later ones: the release half of "data, fence, tag".  On sm_90 fence.release.sys is
 * MEMBAR.ALL.SYS; __threadfence_system() is fence.sc.sys, MEMBAR.SC.SYS, sequential consistency
 * that tags do not need (sm_80 has only fence.acq_rel, which adds an L1 invalidation).
 */
/*
 * The acquire half: after a relaxed load saw a peer's released value, this thread's later reads
 * see what the peer wrote before it.  On sm_90 fence.acquire.sys is one L1 invalidation
 * (CCTL.IVALL); an ld.acquire.sys of the word instead is that plus another strong load of it from
 * L2, a round trip on the critical path of every wait.
 */
__device__ __forceinline__ void eep_fence_acquire_sys(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.acquire.sys;" ::: "memory");
#else
    asm volatile("fence.acq_rel.sys;" ::: "memory");
#endif
}

__device__ __forceinline__ void eep_fence_release_sys(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.release.sys;" ::: "memory");
#else
    asm volatile("fence.acq_rel.sys;" ::: "memory");
#endif
}

/* The same at the GPU's scope (MEMBAR.GPU, not MEMBAR.SYS): for a writer and a reader on one GPU
   (a kernel at one rank has no peer on another). */
__device__ __forceinline__ void eep_fence_acquire_gpu(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.acquire.gpu;" ::: "memory");
#else
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
#endif
}

__device__ __forceinline__ void eep_fence_release_gpu(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.release.gpu;" ::: "memory");
#else
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
#endif
}

__device__ __forceinline__ unsigned long long eep_ld_relaxed_gpu(const unsigned long long *p)
{
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

/*
 * Programmatic dependent launch (host: EEP_JIT_LAUNCH_PDL).  A kernel launched with it may start
 * while the stream's previous kernel still runs; eep_grid_dep_wait() returns once that kernel
 * has completed and its writes are visible, so every kernel calls it before its first global
 * memory access (without the launch attribute it returns at once).  eep_grid_dep_launch() lets
 * the stream's next kernel, if launched with the attribute, be scheduled before this one ends:
 * its blocks take SMs as this kernel's blocks leave and wait in their own eep_grid_dep_wait().
 * Both are no-ops before sm_90.
 */
__device__ __forceinline__ void eep_grid_dep_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void eep_grid_dep_launch(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
#else
__device__ __forceinline__ unsigned long long eep_globaltimer(void)
{
    return eep_shim_now_ns();
}

__device__ __forceinline__ unsigned long long eep_ld_acquire_sys(const unsigned long long *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

__device__ __forceinline__ unsigned long long eep_ld_relaxed_sys(const unsigned long long *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

__device__ __forceinline__ void eep_st_release_sys(unsigned long long *p, unsigned long long v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

__device__ __forceinline__ void eep_st_relaxed_sys(unsigned long long *p, unsigned long long v)
{
    __atomic_store_n(p, v, __ATOMIC_RELAXED);
}

__device__ __forceinline__ void eep_st_release_gpu(unsigned long long *p, unsigned long long v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

__device__ __forceinline__ unsigned long long eep_ld_acquire_gpu(const unsigned long long *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

__device__ __forceinline__ void eep_fence_acquire_sys(void)
{
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
}

__device__ __forceinline__ void eep_grid_dep_wait(void)
{
}

__device__ __forceinline__ void eep_grid_dep_launch(void)
{
}

__device__ __forceinline__ void eep_fence_release_sys(void)
{
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

__device__ __forceinline__ void eep_fence_acquire_gpu(void)
{
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
}

__device__ __forceinline__ void eep_fence_release_gpu(void)
{
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

__device__ __forceinline__ unsigned long long eep_ld_relaxed_gpu(const unsigned long long *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}
#endif

#endif /* EEP_KERNELS_COMMON_MEM_OPS_CUH */
