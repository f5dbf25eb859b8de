/*
 * spin_probe.cuh - a kernel that spins until a flag in device memory reaches a value, or its own
 * deadline passes: the shape of a barrier or dispatch waiting for a peer's GIN signal.
 *
 * tests/gpu/test_jit_load.c loads a second module while it spins and a second thread of the
 * process writes the flag through the driver, as a GIN proxy thread applies a signal.  Plain C
 * parameters, so host C code includes this header for the struct.
 */
#ifndef EEP_KERNELS_PROBE_SPIN_PROBE_CUH
#define EEP_KERNELS_PROBE_SPIN_PROBE_CUH

typedef struct {
    unsigned long long flag;        /* device pointer to the u64 awaited */
    unsigned long long expect;      /* done once *flag >= expect */
    unsigned long long deadline_ns; /* give up after this long (%globaltimer) */
    unsigned long long result;      /* device pointer to a u32: 1 saw the flag, 2 timed out */
} eep_spin_probe_params_t;

#ifdef __CUDACC__
/* Tag only makes distinct modules of the same body (one spins, others are loaded meanwhile). */
template <int Tag>
__device__ void eep_spin_probe_body(const eep_spin_probe_params_t &p)
{
    const volatile unsigned long long *flag = (const volatile unsigned long long *)p.flag;
    unsigned long long                 t0, t;

    if (blockIdx.x != 0 || threadIdx.x != 0) {
        return;
    }
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    while (*flag < p.expect) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 > p.deadline_ns) {
            *(unsigned int *)p.result = 2;
            return;
        }
        __nanosleep(1000);
    }
    *(unsigned int *)p.result = 1;
}
#endif

#endif /* EEP_KERNELS_PROBE_SPIN_PROBE_CUH */
