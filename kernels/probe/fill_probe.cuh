/*
 * fill_probe.cuh - the smallest useful JIT kernel: out[i] = seed * Scale + i.
 *
 * No NCCL, so it runs on any single GPU: the JIT's load-and-launch test uses it.  The parameter
 * struct is plain C (a CUdeviceptr as unsigned long long), so host C code includes this header
 * for the struct; the device body is compiled only by CUDA compilers.
 */
#ifndef EEP_KERNELS_PROBE_FILL_PROBE_CUH
#define EEP_KERNELS_PROBE_FILL_PROBE_CUH

typedef struct {
    unsigned long long out; /* device pointer to n unsigned ints */
    unsigned int       n;
    unsigned int       seed;
} eep_fill_probe_params_t;

#ifdef __CUDACC__
template <unsigned int Scale>
__device__ void eep_fill_probe_body(const eep_fill_probe_params_t &p)
{
    unsigned int *out = (unsigned int *)p.out;

    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.n;
         i += gridDim.x * blockDim.x) {
        out[i] = p.seed * Scale + i;
    }
}
#endif

#endif /* EEP_KERNELS_PROBE_FILL_PROBE_CUH */
