/*
 * bench/membw/membw.cu - per-SM copy rates that the dispatch/combine SM model rests on.
 *
 * A standalone nvcc program (not part of libeep): it times row copies of token-sized rows the
 * way the EP kernels move them, for a sweep of grid sizes, so the constants of the SM model
 * (docs/dispatch.md section 5) and the kernels' copy strategy come from measurements:
 *   ldst  one warp per row, 16-byte loads (U in flight per lane) then stores;
 *   tma   one warp per row, cp.async.bulk global->shared (mbarrier), then one bulk store per
 *         destination row from shared memory;
 *   st    ldst without the loads: zeros stored (the write ceiling, e.g. padding rows);
 *   tma2  tma with two slots a warp (8 warps): a row's load overlaps the previous row's stores;
 *   ldst32 ldst with 1024 threads a block (32 warps an SM instead of 16);
 * each 1 -> 1 (a copy), 1 -> 4 and 1 -> 8 (the expert-major fan-out: one read, four or eight row
 * writes: a token at two ranks and at one, K 8), local
 * (HBM to HBM) and remote (to the peer GPU over NVLink, both GPUs at once when there are two).
 *
 *   nvcc -O3 -arch=sm_90 -o build/bin/eep-membw bench/membw/membw.cu
 *   build/bin/eep-membw [row_bytes] [rows]
 */
#include "../cuda_check.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

struct Dsts {
    uint4 *d[8];
};

__device__ __forceinline__ unsigned long long gtimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* @p stamps (or NULL): [2 * block] = the block's start, [2 * block + 1] its end (globaltimer). */
template <int U, bool Load>
__global__ void k_ldst(const uint4 *src, Dsts dsts, int ndst, int rows, int row_vecs,
                       unsigned long long *stamps)
{
    const int lane = threadIdx.x & 31, gw = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int nw = (gridDim.x * blockDim.x) >> 5;

    if (stamps != nullptr && threadIdx.x == 0) {
        stamps[2 * blockIdx.x] = gtimer();
    }

    for (int r = gw; r < rows; r += nw) {
        const uint4 *s = src + (long long)r * row_vecs;
        for (int v0 = lane; v0 < row_vecs; v0 += 32 * U) {
            uint4 x[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                if (!Load) {
                    x[u] = make_uint4(0, 0, 0, 0);
                } else if (v0 + 32 * u < row_vecs) {
                    x[u] = s[v0 + 32 * u];
                }
            }
            for (int d = 0; d < ndst; d++) {
                uint4 *o = dsts.d[d] + (long long)r * row_vecs;
#pragma unroll
                for (int u = 0; u < U; u++) {
                    if (v0 + 32 * u < row_vecs) {
                        o[v0 + 32 * u] = x[u];
                    }
                }
            }
        }
    }
    if (stamps != nullptr) {
        __syncthreads();
        if (threadIdx.x == 0) {
            stamps[2 * blockIdx.x + 1] = gtimer();
        }
    }
}

__device__ __forceinline__ unsigned smem_addr(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

/* The TMA steps of k_tma and k_tma2, by one lane: an mbarrier for one transfer at a time; a row
   of @p bytes from global memory into a shared slot, completing on the mbarrier; the wait for
   phase @p phase of it; one bulk store of the slot to row @p r of each destination. */
__device__ __forceinline__ void mbar_init(unsigned mb)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(mb));
    asm volatile("fence.mbarrier_init.release.cluster;");
}

__device__ __forceinline__ void bulk_load(unsigned char *slot, const void *src, int bytes,
                                          unsigned mb)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(mb), "r"(bytes)
                 : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1], %2, [%3];" ::"r"(smem_addr(slot)),
                 "l"(src), "r"(bytes), "r"(mb)
                 : "memory");
}

__device__ __forceinline__ void mbar_wait(unsigned mb, unsigned phase)
{
    unsigned done = 0;
    while (!done) {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;"
                     " selp.u32 %0, 1, 0, p; }"
                     : "=r"(done)
                     : "r"(mb), "r"(phase)
                     : "memory");
    }
}

__device__ __forceinline__ void bulk_store_rows(const unsigned char *slot, const Dsts &dsts,
                                                int ndst, int r, int bytes)
{
    for (int d = 0; d < ndst; d++) {
        unsigned char *o = (unsigned char *)dsts.d[d] + (long long)r * bytes;
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(o),
                     "r"(smem_addr(slot)), "r"(bytes)
                     : "memory");
    }
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

__global__ void k_tma(const uint4 *src, Dsts dsts, int ndst, int rows, int row_bytes, int slots)
{
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) unsigned long long bar[32];
    const int                                  lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int                                  nw = gridDim.x * slots;

    if (warp >= slots) {
        return;
    }
    unsigned char *slot = smem + (size_t)warp * row_bytes;
    const unsigned mb   = smem_addr(&bar[warp]);
    if (lane == 0) {
        mbar_init(mb);
    }
    __syncwarp();
    unsigned phase = 0;
    for (int r = blockIdx.x * slots + warp; r < rows; r += nw) {
        if (lane == 0) {
            /* the slot may still be read by the previous stores */
            asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
            bulk_load(slot, (const unsigned char *)src + (long long)r * row_bytes, row_bytes, mb);
            mbar_wait(mb, phase);
            phase ^= 1u;
            bulk_store_rows(slot, dsts, ndst, r, row_bytes);
        }
        __syncwarp();
    }
    if (lane == 0) {
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
}

/* k_tma with two slots a warp (8 warps a block): the load of a warp's next row overlaps the bulk
   stores of its current one, so an SM's write stream does not stop for each row's load. */
__global__ void k_tma2(const uint4 *src, Dsts dsts, int ndst, int rows, int row_bytes, int warps)
{
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) unsigned long long bar[32];
    const int                                  lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int                                  nw = gridDim.x * warps;

    if (warp >= warps || lane != 0) {
        return;
    }
    unsigned char *slot[2] = { smem + (size_t)(2 * warp) * row_bytes,
                               smem + (size_t)(2 * warp + 1) * row_bytes };
    const unsigned mb[2]   = { smem_addr(&bar[2 * warp]), smem_addr(&bar[2 * warp + 1]) };
    mbar_init(mb[0]);
    mbar_init(mb[1]);
    unsigned phase[2] = { 0, 0 };
    auto     load     = [&](int r, int b) {
        bulk_load(slot[b], (const unsigned char *)src + (long long)r * row_bytes, row_bytes, mb[b]);
    };
    int r = blockIdx.x * warps + warp, b = 0;
    if (r < rows) {
        load(r, 0);
    }
    for (; r < rows; r += nw, b ^= 1) {
        /* the other slot's stores (the previous row) must have read it before it is refilled */
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
        if (r + nw < rows) {
            load(r + nw, b ^ 1);
        }
        mbar_wait(mb[b], phase[b]);
        phase[b] ^= 1u;
        bulk_store_rows(slot[b], dsts, ndst, r, row_bytes);
    }
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

struct Side {
    int                 dev;
    uint4              *src;
    Dsts                dst;
    cudaStream_t        st;
    cudaEvent_t         e0, e1;
    unsigned long long *stamps; /* device, 2 per block (decode section) */
};

static int g_ndev;

/* Run kind (0 ldst, 1 tma, 2 st, 3 tma2, 4 ldst32) on every side at once; return the slowest side's ms (min of reps).
   With @p span_us: also the slowest side's in-kernel span (first block start to last block end,
   globaltimer; ldst only), min of reps. */
static float run(Side *sides, int nsides, int kind, int grid, int ndst, int rows, int row_bytes,
                 double *span_us = nullptr)
{
    double    best_span = 1e30;
    float     best      = 1e30f;
    const int slots_max = (227 * 1024) / row_bytes < 32 ? (227 * 1024) / row_bytes : 32;
    const int slots     = slots_max < 16 ? slots_max : 16;

    for (int rep = 0; rep < 5; rep++) {
        for (int i = 0; i < nsides; i++) {
            CHECK(cudaSetDevice(sides[i].dev));
            CHECK(cudaDeviceSynchronize());
        }
        for (int i = 0; i < nsides; i++) {
            Side *s = &sides[i];
            CHECK(cudaSetDevice(s->dev));
            CHECK(cudaEventRecord(s->e0, s->st));
            if (kind == 0 || kind == 2) {
                auto k = kind == 0 ? k_ldst<8, true> : k_ldst<8, false>;
                k<<<grid, 512, 0, s->st>>>(s->src, s->dst, ndst, rows, row_bytes / 16,
                                           span_us != nullptr ? s->stamps : nullptr);
            } else if (kind == 4) {
                k_ldst<8, true>
                    <<<grid, 1024, 0, s->st>>>(s->src, s->dst, ndst, rows, row_bytes / 16, nullptr);
            } else if (kind == 3) {
                const int    warps = slots / 2;
                const size_t smem  = (size_t)2 * warps * row_bytes;
                CHECK(cudaFuncSetAttribute(k_tma2, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)smem));
                k_tma2<<<grid, warps * 32, smem, s->st>>>(s->src, s->dst, ndst, rows, row_bytes,
                                                          warps);
            } else {
                const size_t smem = (size_t)slots * row_bytes;
                CHECK(cudaFuncSetAttribute(k_tma, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)smem));
                k_tma<<<grid, slots * 32, smem, s->st>>>(s->src, s->dst, ndst, rows, row_bytes,
                                                         slots);
            }
            CHECK(cudaGetLastError());
            CHECK(cudaEventRecord(s->e1, s->st));
        }
        float worst = 0;
        for (int i = 0; i < nsides; i++) {
            float ms;
            CHECK(cudaSetDevice(sides[i].dev));
            CHECK(cudaEventSynchronize(sides[i].e1));
            CHECK(cudaEventElapsedTime(&ms, sides[i].e0, sides[i].e1));
            worst = ms > worst ? ms : worst;
        }
        best = worst < best ? worst : best;
        if (span_us != nullptr) {
            double span = 0;
            for (int i = 0; i < nsides; i++) {
                unsigned long long st[2 * 132], lo = ~0ull, hi = 0;
                CHECK(cudaSetDevice(sides[i].dev));
                CHECK(cudaMemcpy(st, sides[i].stamps, sizeof(unsigned long long) * 2 * grid,
                                 cudaMemcpyDeviceToHost));
                for (int b = 0; b < grid; b++) {
                    lo = st[2 * b] < lo ? st[2 * b] : lo;
                    hi = st[2 * b + 1] > hi ? st[2 * b + 1] : hi;
                }
                span = (hi - lo) / 1e3 > span ? (hi - lo) / 1e3 : span;
            }
            best_span = span < best_span ? span : best_span;
        }
    }
    if (span_us != nullptr) {
        *span_us = best_span;
    }
    return best;
}

int main(int argc, char **argv)
{
    const int    row_bytes = argc > 1 ? atoi(argv[1]) : 14336;
    const int    rows      = argc > 2 ? atoi(argv[2]) : 8192;
    const size_t bytes     = (size_t)rows * row_bytes;
    const int    grids[]   = { 4, 8, 16, 24, 32, 48, 64, 96, 132 };
    int          sms;

    CHECK(cudaGetDeviceCount(&g_ndev));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    printf("devices %d, SMs %d, row %d B, rows %d (%.1f MB per copy)\n", g_ndev, sms, row_bytes,
           rows, bytes / 1e6);
    const int nd = g_ndev >= 2 ? 2 : 1;
    uint4    *src[2], *dst[2][8];
    for (int d = 0; d < nd; d++) {
        CHECK(cudaSetDevice(d));
        if (nd == 2) {
            CHECK(cudaDeviceEnablePeerAccess(1 - d, 0));
        }
        CHECK(cudaMalloc(&src[d], bytes));
        CHECK(cudaMemset(src[d], 0x5a, bytes));
        for (int j = 0; j < 8; j++) {
            CHECK(cudaMalloc(&dst[d][j], bytes));
        }
    }
    Side sides[2];
    for (int d = 0; d < nd; d++) {
        CHECK(cudaSetDevice(d));
        sides[d].dev = d;
        sides[d].src = src[d];
        CHECK(cudaStreamCreateWithFlags(&sides[d].st, cudaStreamNonBlocking));
        CHECK(cudaEventCreate(&sides[d].e0));
        CHECK(cudaEventCreate(&sides[d].e1));
        CHECK(cudaMalloc(&sides[d].stamps, sizeof(unsigned long long) * 2 * 132));
    }
    printf("| test | kind | %s |\n|---|---|",
           "GB/s written per GPU for grids 4 8 16 24 32 48 64 96 132");
    printf("\n");
    for (int remote = 0; remote <= (nd == 2 ? 1 : 0); remote++) {
        for (int ndst = 1; ndst <= 8; ndst = ndst == 1 ? 4 : ndst * 2) {
            if (remote && ndst > 1) {
                continue;
            }
            for (int kind = 0; kind < 5; kind++) {
                for (int d = 0; d < nd; d++) {
                    for (int j = 0; j < 8; j++) {
                        sides[d].dst.d[j] = remote ? dst[1 - d][j] : dst[d][j];
                    }
                }
                static const char *const names[5] = { "ldst", "tma", "st", "tma2", "ldst32" };

                printf("| %s %d->%d | %s |", remote ? "remote (both GPUs)" : "local",
                       kind == 2 ? 0 : 1, ndst, names[kind]);
                for (unsigned g = 0; g < sizeof grids / sizeof grids[0]; g++) {
                    if (grids[g] > sms) {
                        continue;
                    }
                    float ms = run(sides, remote ? nd : 1, kind, grids[g], ndst, rows, row_bytes);
                    printf(" %.0f", (double)bytes * ndst / (ms * 1e-3) / 1e9);
                    fflush(stdout);
                }
                printf(" |\n");
            }
        }
    }
    /* Decode size: the first `decode_rows` rows (default 128, a T 128 call's tokens), timed in
       the kernel (globaltimer span) and by events, ldst: what a one-shot copy of that size costs
       before any protocol (push = store to the peer, pull = load from the peer). */
    const int want        = argc > 3 ? atoi(argv[3]) : 128;
    const int decode_rows = want < rows ? want : rows;
    printf("\n%d rows of %d B (%.2f MB): in-kernel span us / event us, ldst, grids", decode_rows,
           row_bytes, (double)decode_rows * row_bytes / 1e6);
    for (unsigned g = 0; g < sizeof grids / sizeof grids[0]; g++) {
        printf(" %d", grids[g]);
    }
    printf("\n");
    for (int test = 0; test < 5; test++) {
        static const char *const names[5] = { "local 1->1", "local 1->4", "remote push 1->1",
                                              "remote pull 1->1", "remote pull 1->4" };
        const int remote = test >= 2, pull = test >= 3, ndst = (test == 1 || test == 4) ? 4 : 1;
        if (remote && nd < 2) {
            continue;
        }
        for (int d = 0; d < nd; d++) {
            sides[d].src = pull ? src[1 - d] : src[d];
            for (int j = 0; j < 4; j++) {
                sides[d].dst.d[j] = remote && !pull ? dst[1 - d][j] : dst[d][j];
            }
        }
        printf("| %s |", names[test]);
        for (unsigned g = 0; g < sizeof grids / sizeof grids[0]; g++) {
            double span;
            if (grids[g] > sms) {
                continue;
            }
            float ms = run(sides, remote ? nd : 1, 0, grids[g], ndst, decode_rows, row_bytes,
                           &span);
            printf(" %.1f/%.1f", span, ms * 1e3);
            fflush(stdout);
        }
        printf(" |\n");
    }
    return 0;
}
