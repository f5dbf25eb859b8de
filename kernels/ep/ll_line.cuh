/*
 * kernels/ep/ll_line.cuh - rows whose flags travel in the data (LL128 lines, as NCCL's protocol
 * of that name on NVLink).
 *
 * A row is cut into 128-byte lines of 8 slots of 16 bytes: slots 0-6 carry 7 vectors of data,
 * slot 7 carries the writer's flag (the call's sequence) in its upper 8 bytes.  The 8 lanes of a
 * warp that share a line store it in one warp instruction, and a reader's 8 lanes load it in one:
 * on NVLink (and locally, through L2) a 128-byte line written by one warp instruction is seen
 * whole or not at all, which NCCL's LL128 relies on too.  So a reader whose flag slot shows this
 * call's sequence holds this call's data in the same registers: no fence and no separate tag
 * between writer and reader, and a row is consumed line by line as it lands.
 *
 * Lane l of a warp works on line (base + l / 8), slot l % 8: one instruction covers 4 lines.
 * Vector v of a row lives at line v / 7, slot v % 7.
 *
 * EEP_EPK_EMULATION (tests/emu/ep_kernel_shim.h: one CPU thread per lane) has no such
 * instruction: there a line's data slots are stored, the warp meets, and the flag is stored with
 * release; a reader loads the flag with acquire, the warp meets, and the data slots are loaded.
 * Every lane of the warp calls these functions together.
 */
#ifndef EEP_KERNELS_EP_LL_LINE_CUH
#define EEP_KERNELS_EP_LL_LINE_CUH

#define EEP_LL_LINE_BYTES 128
#define EEP_LL_DATA_SLOTS 7 /* 16-byte data slots of a line; slot 7 holds the flag */
#define EEP_LL_WARP_LINES 4 /* lines one warp instruction covers */

#ifdef __CUDACC__

/* Lines of a row of @p vecs 16-byte vectors. */
__device__ __forceinline__ int eep_ll_lines(int vecs)
{
    return (vecs + EEP_LL_DATA_SLOTS - 1) / EEP_LL_DATA_SLOTS;
}

/* The vector a lane carries at line @p line (-1: the flag slot, or past the row's @p vecs). */
__device__ __forceinline__ int eep_ll_vector(int line, unsigned lane, int vecs)
{
    const int slot = (int)(lane & 7u), v = line * EEP_LL_DATA_SLOTS + slot;

    return slot < EEP_LL_DATA_SLOTS && v < vecs ? v : -1;
}

/* The line of this lane in step @p u of a round that starts at line @p l0 (steps of
   EEP_LL_WARP_LINES lines, one warp instruction each). */
__device__ __forceinline__ int eep_ll_round_line(int l0, int u, unsigned lane)
{
    return l0 + EEP_LL_WARP_LINES * u + (int)(lane >> 3);
}

/* The lane's 16-byte slot at line @p line of the row at @p row. */
__device__ __forceinline__ uint4 *eep_ll_slot(unsigned char *row, int line, unsigned lane)
{
    return (uint4 *)(row + (unsigned long long)line * EEP_LL_LINE_BYTES) + (lane & 7u);
}

#ifndef EEP_EPK_EMULATION
/*
 * Store @p v (a data slot) or the flag @p flag (the flag slot) at @p slot when @p active.
 * st.volatile: neither cached in L1 nor merged with later stores, one transaction per line.
 */
__device__ __forceinline__ void eep_ll_store(uint4 *slot, uint4 v, unsigned long long flag,
                                             bool active, unsigned lane)
{
    if ((lane & 7u) == 7u) {
        v = make_uint4(0u, 0u, (unsigned)flag, (unsigned)(flag >> 32));
    }
    if (active) {
        asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(slot), "r"(v.x),
                     "r"(v.y), "r"(v.z), "r"(v.w)
                     : "memory");
    }
}

/* Load the slot at @p slot into @p v when @p active; @return the line's flag on the flag lane,
   ~0 on the others (and on inactive lanes), so that only flag lanes can hold a wait. */
__device__ __forceinline__ unsigned long long eep_ll_load(const uint4 *slot, uint4 &v, bool active,
                                                          unsigned lane)
{
    if (!active) {
        return ~0ull;
    }
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(slot)
                 : "memory");
    return (lane & 7u) == 7u ? ((unsigned long long)v.w << 32) | v.z : ~0ull;
}
#else
__device__ __forceinline__ void eep_ll_store(uint4 *slot, uint4 v, unsigned long long flag,
                                             bool active, unsigned lane)
{
    unsigned long long *w  = (unsigned long long *)slot;
    unsigned long long  lo = ((unsigned long long)v.y << 32) | v.x;
    unsigned long long  hi = ((unsigned long long)v.w << 32) | v.z;

    if (active && (lane & 7u) != 7u) {
        __atomic_store_n(&w[0], lo, __ATOMIC_RELAXED);
        __atomic_store_n(&w[1], hi, __ATOMIC_RELAXED);
    }
    __syncwarp();
    if (active && (lane & 7u) == 7u) {
        __atomic_store_n(&w[0], 0ull, __ATOMIC_RELAXED);
        __atomic_store_n(&w[1], flag, __ATOMIC_RELEASE);
    }
}

__device__ __forceinline__ unsigned long long eep_ll_load(const uint4 *slot, uint4 &v, bool active,
                                                          unsigned lane)
{
    const unsigned long long *w    = (const unsigned long long *)slot;
    unsigned long long        flag = ~0ull, lo = 0, hi = 0;

    if (active && (lane & 7u) == 7u) {
        hi   = __atomic_load_n(&w[1], __ATOMIC_ACQUIRE);
        lo   = __atomic_load_n(&w[0], __ATOMIC_RELAXED);
        flag = hi;
    }
    __syncwarp();
    if (active && (lane & 7u) != 7u) {
        lo = __atomic_load_n(&w[0], __ATOMIC_RELAXED);
        hi = __atomic_load_n(&w[1], __ATOMIC_RELAXED);
    }
    if (active) {
        v = make_uint4((unsigned)lo, (unsigned)(lo >> 32), (unsigned)hi, (unsigned)(hi >> 32));
    }
    return flag;
}
#endif

#endif /* __CUDACC__ */

#endif /* EEP_KERNELS_EP_LL_LINE_CUH */
