/* tests/gpu/gin/gin_kernels.h - the C side's view of the GIN GPU test's device code
 * (gin_kernels.cu): the device communicator as an opaque pointer, and one launch function per
 * kernel.  Every kernel waits with a deadline (%globaltimer) and reports through a status word
 * instead of hanging: 0 done, GK_TIMEOUT when a wait passed its deadline. */
#ifndef EEP_TESTS_GPU_GIN_KERNELS_H
#define EEP_TESTS_GPU_GIN_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>
#include <nccl.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The window every test uses: puts land in [0, GK_DST_BYTES), come from
 * [GK_SRC_BASE, GK_SRC_BASE + GK_SRC_BYTES), and putValue writes 8-byte slots at GK_VAL_BASE. */
#define GK_DST_BYTES (4u << 20)
#define GK_SRC_BASE  (4u << 20)
#define GK_SRC_BYTES (4u << 20)
#define GK_VAL_BASE  (8u << 20)
#define GK_WIN_BYTES ((8u << 20) + (64u << 10))
#define GK_MAX_PUT   (64u << 10)

/* Signal and counter ids of the dev comm (ginSignalCount, ginCounterCount). */
enum {
    GK_SIG_ORDER = 0,
    GK_SIG_ADD,
    GK_SIG_INC,
    GK_SIG_VALUE,
    GK_SIG_KILL,
    GK_SIG_PING,
    GK_SIG_PONG,
    GK_NSIGNALS = 16
};
enum { GK_CTR_PUTS = 0, GK_CTR_BW, GK_NCOUNTERS = 4 };

#define GK_TIMEOUT (-1) /* a wait passed its deadline (wait_* say which) */
#define GK_WRONG   (-2) /* a signal passed the exact value it should stop at */

/* What a kernel's last wait was for (gk_result_t.wait_kind). */
enum { GK_WAIT_NONE = 0, GK_WAIT_SIGNAL, GK_WAIT_COUNTER, GK_WAIT_FLUSH };

#ifdef __CUDACC__
#define GK_HD __host__ __device__
#else
#define GK_HD
#endif

typedef struct {
    int64_t  status;   /* 0, GK_TIMEOUT or GK_WRONG */
    uint64_t observed; /* the last signal / counter value (flush: consumer index) read */
    uint64_t elapsed_ns;
    uint64_t puts;      /* puts issued */
    int32_t  wait_kind; /* GK_WAIT_*: the wait that ended last (the one that failed) */
    int32_t  wait_id;   /* its signal or counter id, or the flush's peer */
    uint64_t wait_want; /* the least value it waited for (flush: the producer index) */
} gk_result_t;

/* The byte the source area of `rank` holds at offset k (host fills it, receivers check it). */
static inline GK_HD unsigned char gk_src_byte(int rank, uint64_t k)
{
    return (unsigned char)(k * 13 + (uint64_t)rank * 59 + 7 + (k >> 9));
}

/* Draw i of the put-order sequence of `rank` (same on host and device). */
static inline GK_HD void gk_put_draw(int rank, int i, uint64_t *src_off, uint64_t *dst_off,
                                     uint64_t *size)
{
    uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1) + (uint64_t)i * 0x632be59bd9b4e019ull;

    s ^= s >> 31;
    s *= 0xbf58476d1ce4e5b9ull;
    s ^= s >> 27;
    *size    = (s % 3 == 0) ? (s >> 8) % 64 + 1 : (s >> 8) % GK_MAX_PUT + 1;
    *src_off = (s >> 24) % (GK_SRC_BYTES - *size);
    *dst_off = ((s >> 40) * 7919) % (GK_DST_BYTES - *size);
}

/* ncclDevCommCreate with GIN (signals and counters as above); 0 or the NCCL result. */
int  gk_devcomm_create(ncclComm_t comm, void **dc_p, int *contexts_p, int *gin_type_p);
void gk_devcomm_destroy(ncclComm_t comm, void *dc);
/* Frees our copy only, after ncclCommAbort freed the dev comm with its comm. */
void gk_devcomm_forget(void *dc);

/* Each rank puts `nputs` random pieces (gk_put_draw) to rank (rank+1)%n, the last with
 * SignalInc, then waits for its own from rank-1; the host checks the window afterwards. */
int gk_put_order(void *dc, ncclWindow_t win, int nputs, uint64_t timeout_ns, gk_result_t *res,
                 cudaStream_t s);
/* The same with a launch queued behind it on @p s (the application's next op). */
int gk_put_order_queued(void *dc, ncclWindow_t win, int nputs, uint64_t timeout_ns,
                        gk_result_t *res, cudaStream_t s);
/* Every rank sends rank 0 `nsig` bare SignalAdd (value rank*100000+i+1) on GK_SIG_ADD and as
 * many SignalInc on GK_SIG_INC.  Rank 0 waits for the exact sums. */
int gk_many_senders(void *dc, ncclWindow_t win, int nsig, uint64_t timeout_ns, gk_result_t *res,
                    cudaStream_t s);
/* Every rank putValue's 0xC0FFEE00+rank to rank 0's slot `rank` with SignalAdd 1 on GK_SIG_VALUE;
 * rank 0 waits for nRanks.  (NCCL 2.28.9's proxy writes inline values outside its buffer:
 * gin/gin_put.c, eep_gin_stray_inline.) */
int gk_put_value(void *dc, ncclWindow_t win, uint64_t timeout_ns, gk_result_t *res, cudaStream_t s);
/* Zeroes the test's signals and counters (context 0); run before the barrier ahead of a check,
 * when nothing is in flight. */
int gk_reset(void *dc, cudaStream_t s);
/* `nputs` puts of `bytes` to the next rank with CounterInc; waits for the counter. */
int gk_counter(void *dc, ncclWindow_t win, int nputs, size_t bytes, uint64_t timeout_ns,
               gk_result_t *res, cudaStream_t s);
/* Puts with SignalInc to `victim` every `gap_ns` until *stop (host-mapped) or `max_puts`. */
int gk_kill_probe(void *dc, ncclWindow_t win, int victim, volatile int *stop, int max_puts,
                  uint64_t gap_ns, uint64_t timeout_ns, gk_result_t *res, cudaStream_t s);
/* Rank 0: `iters` puts of `bytes` to rank 1 (counter-completed, in batches); elapsed in res. */
int gk_bench_bw(void *dc, ncclWindow_t win, size_t bytes, int iters, uint64_t timeout_ns,
                gk_result_t *res, cudaStream_t s);
/* Ranks 0 and 1: `rounds` signal ping-pongs; rank 0's elapsed in res. */
int gk_bench_rtt(void *dc, int rounds, uint64_t timeout_ns, gk_result_t *res, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
