/*
 * kernels/ep/ep_numeric.cuh - bit-exact number helpers shared by every dispatch/combine kernel.
 *
 * bf16 conversions are written on bits, the same algorithm as tests/common/ep_reference.c (round to
 * nearest even, NaN -> 0x7FFF), so device and CPU reference agree bit for bit without depending on
 * cuda_bf16.h (which NVRTC would need to find).  Sums use the explicit _rn intrinsics: the
 * contract of combine (eep/ep.h) fixes fmaf for the weighted partial and plain adds for the total,
 * and nothing must be left to the compiler's contraction choices.
 */
#ifndef EEP_KERNELS_EP_NUMERIC_CUH
#define EEP_KERNELS_EP_NUMERIC_CUH

#ifdef __CUDACC__
__device__ __forceinline__ float eep_bf16_to_f32(unsigned short b)
{
    return __uint_as_float((unsigned int)b << 16);
}

__device__ __forceinline__ unsigned short eep_f32_to_bf16(float f)
{
    unsigned int u = __float_as_uint(f);

    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return 0x7fff;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

/* 8 bf16 channels (one 16-byte vector) to f32, and back with round to nearest even. */
__device__ __forceinline__ void eep_bf16x8_unpack(uint4 v, float f[8])
{
    const unsigned int u[4] = { v.x, v.y, v.z, v.w };

    for (int i = 0; i < 4; i++) {
        f[2 * i]     = eep_bf16_to_f32((unsigned short)(u[i] & 0xffffu));
        f[2 * i + 1] = eep_bf16_to_f32((unsigned short)(u[i] >> 16));
    }
}

__device__ __forceinline__ uint4 eep_bf16x8_pack(const float f[8])
{
    unsigned int u[4];

    for (int i = 0; i < 4; i++) {
        u[i] = (unsigned int)eep_f32_to_bf16(f[2 * i]) |
               ((unsigned int)eep_f32_to_bf16(f[2 * i + 1]) << 16);
    }
    return make_uint4(u[0], u[1], u[2], u[3]);
}

/* The combine partial: acc + w * y, one rounding. */
__device__ __forceinline__ float eep_fma(float w, float y, float acc)
{
    return __fmaf_rn(w, y, acc);
}

/* The combine total: acc + p, one rounding, never contracted. */
__device__ __forceinline__ float eep_add(float acc, float p)
{
    return __fadd_rn(acc, p);
}
#endif

#endif /* EEP_KERNELS_EP_NUMERIC_CUH */
