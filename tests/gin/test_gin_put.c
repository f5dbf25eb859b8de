/* tests/gin/test_gin_put.c - the plugin's GIN side (ncclGinPlugin_v11) between forked processes
 * with host-memory registrations, called as NCCL's proxy would: collective registration, put
 * ordering (many random, overlapping puts then one put + signal: every byte checked after the
 * signal), many senders adding to and incrementing one signal (exact sums), bare signals, self
 * puts, inline values, two comms live in one process (the second with a NULL context), and a
 * peer SIGKILLed mid-transfer (the survivors' requests to it complete as dropped, the plugin's
 * eep_gin_peers_lost reports it within a bound, teardown returns at once, and a new comm among
 * the survivors works), and a long stream of bare signals checked one by one. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/gin/gin_harness.h"
#include "util/fd_count.h"

#define WIN_BYTES (1u << 20)
#define SRC_BYTES (1u << 20)
#define NSIGNALS  64
#define QDEPTH    64

typedef struct {
    void     *ctx, *coll;
    char     *win, *src;
    uint64_t *sig;
    void     *win_h, *src_h, *sig_h;
} rank_mem_t;

typedef struct {
    void *req[QDEPTH];
    int   head, tail;
} req_q_t;

/* Keeps at most QDEPTH requests outstanding, completing the oldest first. */
static int q_push(gt_t *t, void *coll, req_q_t *q, void *req)
{
    if (q->tail - q->head == QDEPTH) {
        if (gt_gin_wait(t, coll, &q->req[q->head % QDEPTH], 1, 20000) != 0) {
            return -1;
        }
        q->head++;
    }
    q->req[q->tail++ % QDEPTH] = req;
    return 0;
}

static int q_drain(gt_t *t, void *coll, req_q_t *q)
{
    while (q->head < q->tail) {
        if (gt_gin_wait(t, coll, &q->req[q->head % QDEPTH], 1, 20000) != 0) {
            return -1;
        }
        q->head++;
    }
    return 0;
}

static unsigned char src_byte(int rank, size_t k)
{
    return (unsigned char)(k * 13 + (size_t)rank * 59 + 7 + (k >> 8));
}

/* A comm and the three registrations every case uses (window, source, signals). */
static int mem_setup(gt_t *t, int slot, int with_ctx, rank_mem_t *m)
{
    size_t k;
    void  *gh;

    memset(m, 0, sizeof(*m));
    m->win = malloc(WIN_BYTES);
    m->src = malloc(SRC_BYTES);
    m->sig = calloc(NSIGNALS, sizeof(uint64_t));
    GT_CHECK(m->win != NULL && m->src != NULL && m->sig != NULL, "malloc");
    memset(m->win, 0xee, WIN_BYTES);
    for (k = 0; k < SRC_BYTES; k++) {
        m->src[k] = (char)src_byte(t->rank, k);
    }
    GT_CHECK(gt_gin_comm(t, slot, with_ctx ? &m->ctx : NULL, &m->coll) == 0, "comm");
    GT_CHECK(t->gin->reg_mr_sym(m->coll, m->win, WIN_BYTES, EEP_NCCL_PTR_HOST, 0, &m->win_h, &gh) ==
                     EEP_NCCL_SUCCESS &&
                 gh == m->win_h,
             "regMrSym window (mhandle == ginHandle)");
    GT_CHECK(t->gin->reg_mr_sym(m->coll, m->src, SRC_BYTES, EEP_NCCL_PTR_HOST, 0, &m->src_h, &gh) ==
                 EEP_NCCL_SUCCESS,
             "regMrSym source");
    GT_CHECK(t->gin->reg_mr_sym(m->coll, m->sig, NSIGNALS * sizeof(uint64_t), EEP_NCCL_PTR_HOST,
                                EEP_NCCL_MR_FLAG_FORCE_SO, &m->sig_h, &gh) == EEP_NCCL_SUCCESS,
             "regMrSym signals");
    t->progress_coll = m->coll;
    return 0;
}

static int mem_teardown(gt_t *t, rank_mem_t *m)
{
    int64_t start = gt_now_ms();

    t->progress_coll = NULL;
    GT_CHECK(t->gin->dereg_mr_sym(m->coll, m->sig_h) == EEP_NCCL_SUCCESS, "dereg");
    GT_CHECK(t->gin->dereg_mr_sym(m->coll, m->win_h) == EEP_NCCL_SUCCESS, "dereg");
    GT_CHECK(t->gin->dereg_mr_sym(m->coll, m->src_h) == EEP_NCCL_SUCCESS, "dereg");
    GT_CHECK(t->gin->close_coll(m->coll) == EEP_NCCL_SUCCESS, "closeColl");
    GT_CHECK(t->gin->finalize(m->ctx) == EEP_NCCL_SUCCESS, "finalize");
    GT_CHECK(gt_now_ms() - start < 1000, "teardown at once");
    free(m->win);
    free(m->src);
    free(m->sig);
    return 0;
}

/* Registration: three comms' worth of register / deregister in varied orders. */
static int case_register(gt_t *t)
{
    rank_mem_t m;
    void      *h[5], *gh;
    char      *bufs[5];
    int        i, round;

    if (mem_setup(t, 0, 1, &m) != 0) {
        return 1;
    }
    for (round = 0; round < 3; round++) {
        for (i = 0; i < 5; i++) {
            bufs[i] = malloc(4096u << i);
            GT_CHECK(t->gin->reg_mr_sym(m.coll, bufs[i], 4096u << i, EEP_NCCL_PTR_HOST, 0, &h[i],
                                        &gh) == EEP_NCCL_SUCCESS &&
                         h[i] == gh && h[i] != NULL,
                     "regMrSym %d", i);
        }
        for (i = 0; i < 5; i++) { /* local: every rank in its own order */
            int j = (i + t->rank + round) % 5;
            GT_CHECK(t->gin->dereg_mr_sym(m.coll, h[j]) == EEP_NCCL_SUCCESS, "deregMrSym");
            free(bufs[j]);
        }
    }
    GT_CHECK(gt_barrier(t, 1, t->nranks, 20000) == 0, "barrier");
    return mem_teardown(t, &m);
}

typedef struct {
    uint64_t src_off, dst_off, size;
} put_t;

static put_t put_draw(uint64_t *s)
{
    put_t p;

    p.size    = gt_rand(s) % 3 == 0 ? gt_rand(s) % 64 + 1 : gt_rand(s) % 16384 + 1;
    p.src_off = gt_rand(s) % (SRC_BYTES - p.size);
    p.dst_off = gt_rand(s) % (WIN_BYTES - p.size);
    return p;
}

#define ORDER_PUTS 2000

/* Every rank puts ORDER_PUTS random, overlapping pieces to the next rank, then one piece with a
 * signal; the next rank replays the same draws and checks all of its window (last writer wins,
 * so any reordering shows). */
static int case_put_order(gt_t *t)
{
    rank_mem_t m;
    req_q_t    q  = { 0 };
    int        to = (t->rank + 1) % t->nranks, from = (t->rank + t->nranks - 1) % t->nranks;
    uint64_t   s = 0x1234567ull + (uint64_t)t->rank * 7777;
    char      *expect;
    void      *req;
    put_t      p;
    size_t     k;
    int        i;

    if (mem_setup(t, 0, 1, &m) != 0) {
        return 1;
    }
    for (i = 0; i <= ORDER_PUTS; i++) {
        p = put_draw(&s);
        if (i < ORDER_PUTS) {
            GT_CHECK(t->gin->iput(m.coll, p.src_off, m.src_h, p.size, p.dst_off, m.win_h,
                                  (uint32_t)to, &req) == EEP_NCCL_SUCCESS,
                     "iput %d", i);
        } else {
            GT_CHECK(t->gin->iput_signal(m.coll, p.src_off, m.src_h, p.size, p.dst_off, m.win_h,
                                         (uint32_t)to, 8 * 3, m.sig_h, 1, EEP_NCCL_SIGNAL_OP_ADD,
                                         &req) == EEP_NCCL_SUCCESS,
                     "iputSignal");
        }
        GT_CHECK(q_push(t, m.coll, &q, req) == 0, "put %d completes", i);
    }
    GT_CHECK(q_drain(t, m.coll, &q) == 0, "puts complete");
    GT_CHECK(gt_gin_wait_word(t, m.coll, &m.sig[3], 1, 20000) == 0, "signal arrives");
    expect = malloc(WIN_BYTES);
    GT_CHECK(expect != NULL, "malloc");
    memset(expect, 0xee, WIN_BYTES);
    s = 0x1234567ull + (uint64_t)from * 7777;
    for (i = 0; i <= ORDER_PUTS; i++) {
        p = put_draw(&s);
        for (k = 0; k < p.size; k++) {
            expect[p.dst_off + k] = (char)src_byte(from, p.src_off + k);
        }
    }
    for (k = 0; k < WIN_BYTES; k++) {
        GT_CHECK(m.win[k] == expect[k], "byte %zu: 0x%02x, want 0x%02x", k, (unsigned char)m.win[k],
                 (unsigned char)expect[k]);
    }
    free(expect);
    GT_CHECK(gt_barrier(t, 1, t->nranks, 20000) == 0, "barrier");
    return mem_teardown(t, &m);
}

#define SUM_SIGNALS 500

/* Every rank (rank 0 itself included) sends rank 0 SUM_SIGNALS bare ADDs on signal 0 and as many
 * bare INCs on signal 1; plus puts with ADD on signal 2.  Rank 0's sums are exact. */
static int case_signal_sum(gt_t *t)
{
    rank_mem_t m;
    req_q_t    q = { 0 };
    void      *req;
    uint64_t   want_add = 0, want_put = 0;
    int        i, r;

    if (mem_setup(t, 0, 1, &m) != 0) {
        return 1;
    }
    for (i = 0; i < SUM_SIGNALS; i++) {
        uint64_t v = (uint64_t)t->rank * 100000 + (uint64_t)i + 1;

        GT_CHECK(t->gin->iput_signal(m.coll, 0, NULL, 0, 0, NULL, 0, 0, m.sig_h, v,
                                     EEP_NCCL_SIGNAL_OP_ADD, &req) == EEP_NCCL_SUCCESS,
                 "bare add");
        GT_CHECK(q_push(t, m.coll, &q, req) == 0, "add completes");
        GT_CHECK(t->gin->iput_signal(m.coll, 0, NULL, 0, 0, NULL, 0, 8, m.sig_h, 12345,
                                     EEP_NCCL_SIGNAL_OP_INC, &req) == EEP_NCCL_SUCCESS,
                 "bare inc");
        GT_CHECK(q_push(t, m.coll, &q, req) == 0, "inc completes");
        if (i % 10 == 0) {
            GT_CHECK(t->gin->iput_signal(m.coll, 0, m.src_h, 256, (uint64_t)t->rank * 256, m.win_h,
                                         0, 16, m.sig_h, 3, EEP_NCCL_SIGNAL_OP_ADD,
                                         &req) == EEP_NCCL_SUCCESS,
                     "put + add");
            GT_CHECK(q_push(t, m.coll, &q, req) == 0, "put + add completes");
        }
    }
    GT_CHECK(q_drain(t, m.coll, &q) == 0, "signals complete");
    if (t->rank == 0) {
        for (r = 0; r < t->nranks; r++) {
            for (i = 0; i < SUM_SIGNALS; i++) {
                want_add += (uint64_t)r * 100000 + (uint64_t)i + 1;
            }
            want_put += 3 * ((SUM_SIGNALS + 9) / 10);
        }
        GT_CHECK(gt_gin_wait_word(t, m.coll, &m.sig[0], want_add, 20000) == 0, "add sum");
        GT_CHECK(gt_gin_wait_word(t, m.coll, &m.sig[1], (uint64_t)t->nranks * SUM_SIGNALS, 20000) ==
                     0,
                 "inc count");
        GT_CHECK(gt_gin_wait_word(t, m.coll, &m.sig[2], want_put, 20000) == 0, "put-add sum");
        for (r = 0; r < t->nranks; r++) {
            for (i = 0; i < 256; i++) {
                GT_CHECK((unsigned char)m.win[r * 256 + i] == src_byte(r, (size_t)i),
                         "rank %d's piece byte %d", r, i);
            }
        }
    }
    GT_CHECK(gt_barrier(t, 1, t->nranks, 20000) == 0, "barrier");
    GT_CHECK(m.sig[0] == (t->rank == 0 ? want_add : 0) && m.sig[3] == 0, "nothing more arrived");
    return mem_teardown(t, &m);
}

/* Puts to oneself, ordered with a signal to oneself; no peer involved. */
static int case_self_put(gt_t *t)
{
    rank_mem_t m;
    req_q_t    q = { 0 };
    void      *req;
    int        i;
    size_t     k;

    if (mem_setup(t, 0, 1, &m) != 0) {
        return 1;
    }
    for (i = 0; i < 100; i++) {
        GT_CHECK(t->gin->iput(m.coll, (uint64_t)i * 1000, m.src_h, 5000, (uint64_t)i * 5000,
                              m.win_h, (uint32_t)t->rank, &req) == EEP_NCCL_SUCCESS,
                 "self iput");
        GT_CHECK(q_push(t, m.coll, &q, req) == 0, "self put completes");
    }
    GT_CHECK(t->gin->iput_signal(m.coll, 0, NULL, 0, 0, NULL, (uint32_t)t->rank, 8 * 5, m.sig_h, 1,
                                 EEP_NCCL_SIGNAL_OP_INC, &req) == EEP_NCCL_SUCCESS,
             "self signal");
    GT_CHECK(q_push(t, m.coll, &q, req) == 0 && q_drain(t, m.coll, &q) == 0, "complete");
    GT_CHECK(gt_gin_wait_word(t, m.coll, &m.sig[5], 1, 5000) == 0, "self signal applied");
    for (i = 0; i < 100; i++) {
        for (k = 0; k < 5000; k++) {
            GT_CHECK((unsigned char)m.win[(size_t)i * 5000 + k] ==
                         src_byte(t->rank, (size_t)i * 1000 + k),
                     "self put %d byte %zu", i, k);
        }
    }
    GT_CHECK(gt_barrier(t, 1, t->nranks, 20000) == 0, "barrier");
    return mem_teardown(t, &m);
}

/* Inline values as NCCL's proxy sends them: a host slot written just before iput, 1 to 8 bytes,
 * rewritten as soon as iput returns (the plugin keeps its own copy of 8 bytes or fewer). */
static int case_inline(gt_t *t)
{
    rank_mem_t m;
    req_q_t    q     = { 0 };
    uint64_t  *slots = calloc(64, sizeof(uint64_t)), v;
    void      *slots_h, *gh, *req;
    int        to = 1 - t->rank, i;
    size_t     sz;

    GT_CHECK(slots != NULL, "calloc");
    if (mem_setup(t, 0, 1, &m) != 0) {
        return 1;
    }
    GT_CHECK(t->gin->reg_mr_sym(m.coll, slots, 64 * sizeof(uint64_t), EEP_NCCL_PTR_HOST, 0,
                                &slots_h, &gh) == EEP_NCCL_SUCCESS,
             "regMrSym inline slots");
    for (i = 0; i < 1000; i++) {
        sz       = (size_t)1 << (i % 4);
        v        = 0x0102030405060708ull * (uint64_t)(i + 1);
        slots[0] = v;
        GT_CHECK(t->gin->iput(m.coll, 0, slots_h, sz, (uint64_t)(i % 100) * 8, m.win_h,
                              (uint32_t)to, &req) == EEP_NCCL_SUCCESS,
                 "inline iput");
        slots[0] = ~0ull; /* NCCL would not, before done; we may */
        GT_CHECK(q_push(t, m.coll, &q, req) == 0, "inline completes");
    }
    { /* a stray source where nothing is mapped: refused, never a fault in the plugin */
        char    *hole = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        uint64_t off  = (uint64_t)((uintptr_t)hole - (uintptr_t)slots);

        GT_CHECK(hole != MAP_FAILED, "mmap");
        GT_CHECK(t->gin->iput(m.coll, off, slots_h, 8, 16, m.win_h, (uint32_t)to, &req) ==
                     EEP_NCCL_INVALID_ARGUMENT,
                 "an unreadable stray inline source is refused");
        munmap(hole, 4096);
    }
    GT_CHECK(t->gin->iput_signal(m.coll, 0, NULL, 0, 0, NULL, (uint32_t)to, 0, m.sig_h, 1,
                                 EEP_NCCL_SIGNAL_OP_INC, &req) == EEP_NCCL_SUCCESS,
             "signal");
    GT_CHECK(q_push(t, m.coll, &q, req) == 0 && q_drain(t, m.coll, &q) == 0, "complete");
    GT_CHECK(gt_gin_wait_word(t, m.coll, &m.sig[0], 1, 5000) == 0, "signal");
    for (i = 900; i < 1000; i++) { /* the last write of each of the 100 words */
        unsigned char want[8], got[8];

        sz = (size_t)1 << (i % 4);
        v  = 0x0102030405060708ull * (uint64_t)(i + 1);
        memcpy(want, &v, 8);
        memcpy(got, m.win + (size_t)(i % 100) * 8, 8);
        GT_CHECK(memcmp(want, got, sz) == 0, "inline value %d (%zu bytes)", i, sz);
    }
    GT_CHECK(gt_barrier(t, 1, t->nranks, 20000) == 0, "barrier");
    GT_CHECK(t->gin->dereg_mr_sym(m.coll, slots_h) == EEP_NCCL_SUCCESS, "dereg");
    free(slots);
    return mem_teardown(t, &m);
}

/* Inline values as NCCL 2.28.9's proxy really sends them: it computes the slot from its stack
 * copy of the descriptor (gin_host_proxy.cc:233), so the value lies outside the inline buffer,
 * below or above it, and srcOff (wrapping) names where.  The plugin reads it there; refusing it
 * stopped NCCL's progress thread and hung every later flush (the first GPU round's putValue). */
static int case_inline_stray(gt_t *t)
{
    rank_mem_t m;
    req_q_t    q     = { 0 };
    char      *arena = calloc(3, 4096), *slots = arena + 4096;
    void      *slots_h, *gh, *req;
    int        to = 1 - t->rank, i;
    uint64_t   v, got;

    GT_CHECK(arena != NULL, "calloc");
    if (mem_setup(t, 0, 1, &m) != 0) {
        return 1;
    }
    GT_CHECK(t->gin->reg_mr_sym(m.coll, slots, 64 * sizeof(uint64_t), EEP_NCCL_PTR_HOST, 0,
                                &slots_h, &gh) == EEP_NCCL_SUCCESS,
             "regMrSym inline slots");
    for (i = 0; i < 2; i++) {
        char    *at  = i == 0 ? arena + 16 : slots + 64 * sizeof(uint64_t) + 800;
        uint64_t off = (uint64_t)((uintptr_t)at - (uintptr_t)slots); /* wraps below */

        v = 0xC0FFEE0000000000ull + (uint64_t)(t->rank * 10 + i);
        memcpy(at, &v, sizeof(v));
        GT_CHECK(t->gin->iput(m.coll, off, slots_h, sizeof(v), (uint64_t)i * 8, m.win_h,
                              (uint32_t)to, &req) == EEP_NCCL_SUCCESS,
                 "stray inline iput %s the buffer", i == 0 ? "below" : "above");
        GT_CHECK(q_push(t, m.coll, &q, req) == 0, "stray inline completes");
    }
    GT_CHECK(t->gin->iput_signal(m.coll, 0, NULL, 0, 0, NULL, (uint32_t)to, 0, m.sig_h, 1,
                                 EEP_NCCL_SIGNAL_OP_INC, &req) == EEP_NCCL_SUCCESS,
             "signal");
    GT_CHECK(q_push(t, m.coll, &q, req) == 0 && q_drain(t, m.coll, &q) == 0, "complete");
    GT_CHECK(gt_gin_wait_word(t, m.coll, &m.sig[0], 1, 5000) == 0, "signal");
    for (i = 0; i < 2; i++) {
        memcpy(&got, m.win + (size_t)i * 8, sizeof(got));
        v = 0xC0FFEE0000000000ull + (uint64_t)(to * 10 + i);
        GT_CHECK(got == v, "stray inline value %d: %#llx, want %#llx", i, (unsigned long long)got,
                 (unsigned long long)v);
    }
    GT_CHECK(gt_barrier(t, 1, t->nranks, 20000) == 0, "barrier");
    GT_CHECK(t->gin->dereg_mr_sym(m.coll, slots_h) == EEP_NCCL_SUCCESS, "dereg");
    free(arena);
    return mem_teardown(t, &m);
}

/* Two comms live at once in each process (an old and a new one during a shrink or grow), the
 * second connected with a NULL context; the first closes while the second keeps working. */
static int case_two_comms(gt_t *t)
{
    rank_mem_t a, b;
    void      *req[2];
    int        to = (t->rank + 1) % t->nranks, round;

    if (mem_setup(t, 0, 1, &a) != 0 || mem_setup(t, 2, 0, &b) != 0) {
        return 1;
    }
    t->progress_coll = NULL;
    for (round = 1; round <= 20; round++) {
        GT_CHECK(t->gin->iput_signal(a.coll, 0, a.src_h, 4096, 0, a.win_h, (uint32_t)to, 0, a.sig_h,
                                     1, EEP_NCCL_SIGNAL_OP_INC, &req[0]) == EEP_NCCL_SUCCESS,
                 "put on A");
        GT_CHECK(t->gin->iput_signal(b.coll, 4096, b.src_h, 4096, 0, b.win_h, (uint32_t)to, 0,
                                     b.sig_h, 2, EEP_NCCL_SIGNAL_OP_ADD,
                                     &req[1]) == EEP_NCCL_SUCCESS,
                 "put on B");
        GT_CHECK(gt_gin_wait(t, a.coll, &req[0], 1, 20000) == 0, "A completes");
        GT_CHECK(gt_gin_wait(t, b.coll, &req[1], 1, 20000) == 0, "B completes");
        t->gin->gin_progress(a.coll);
        t->gin->gin_progress(b.coll);
    }
    GT_CHECK(gt_gin_wait_word(t, a.coll, &a.sig[0], 20, 20000) == 0, "A's signal");
    GT_CHECK(gt_gin_wait_word(t, b.coll, &b.sig[0], 40, 20000) == 0, "B's signal");
    GT_CHECK(a.win[5] == (char)src_byte((t->rank + t->nranks - 1) % t->nranks, 5) &&
                 b.win[5] == (char)src_byte((t->rank + t->nranks - 1) % t->nranks, 4096 + 5),
             "each comm's data in its own window");
    t->progress_coll = a.coll;
    GT_CHECK(gt_barrier(t, 1, t->nranks, 20000) == 0, "barrier");
    if (mem_teardown(t, &a) != 0) {
        return 1;
    }
    GT_CHECK(t->gin->iput_signal(b.coll, 0, NULL, 0, 0, NULL, (uint32_t)to, 8, b.sig_h, 1,
                                 EEP_NCCL_SIGNAL_OP_INC, &req[1]) == EEP_NCCL_SUCCESS,
             "B after A closed");
    GT_CHECK(gt_gin_wait(t, b.coll, &req[1], 1, 20000) == 0, "B completes");
    GT_CHECK(gt_gin_wait_word(t, b.coll, &b.sig[1], 1, 20000) == 0, "B signal after A closed");
    t->progress_coll = b.coll;
    GT_CHECK(gt_barrier(t, 1, t->nranks, 20000) == 0, "barrier");
    return mem_teardown(t, &b);
}

/* 5000 bare signals each way between two ranks, INC and ADD mixed on the same signal, posted
 * while the other side's arrive: every value the receiver sees must be a prefix sum of what was
 * sent (no record lost, doubled or reordered), the last the whole sum. */
#define NSTREAM 5000
static uint64_t stream_arg(int k)
{
    return k % 3 == 0 ? 1 : (uint64_t)(k % 7) + 2; /* k % 3 == 0: INC (adds 1) */
}

static int case_signal_stream(gt_t *t)
{
    rank_mem_t m;
    req_q_t    q    = { 0 };
    uint64_t   want = 0, total = 0, seen = 0, v;
    int        sent = 0, matched = 0, peer = 1 - t->rank, k;
    int64_t    deadline;
    void      *req;

    for (k = 0; k < NSTREAM; k++) {
        total += stream_arg(k);
    }
    if (mem_setup(t, 0, 1, &m) != 0) {
        return 1;
    }
    deadline = gt_now_ms() + 40000;
    while ((sent < NSTREAM || seen != total) && gt_now_ms() < deadline) {
        if (sent < NSTREAM) {
            uint32_t op = sent % 3 == 0 ? EEP_NCCL_SIGNAL_OP_INC : EEP_NCCL_SIGNAL_OP_ADD;

            GT_CHECK(t->gin->iput_signal(m.coll, 0, NULL, 0, 0, NULL, (uint32_t)peer,
                                         8 * (size_t)(2 + t->rank), m.sig_h, stream_arg(sent), op,
                                         &req) == EEP_NCCL_SUCCESS,
                     "signal %d", sent);
            GT_CHECK(q_push(t, m.coll, &q, req) == 0, "signal %d completes", sent);
            sent++;
        }
        t->gin->gin_progress(m.coll);
        v = __atomic_load_n(&m.sig[2 + peer], __ATOMIC_ACQUIRE);
        while (want < v && matched < NSTREAM) {
            want += stream_arg(matched++);
        }
        GT_CHECK(want == v, "signal value %llu is no prefix sum (next %llu after %d records)",
                 (unsigned long long)v, (unsigned long long)want, matched);
        seen = v;
    }
    GT_CHECK(q_drain(t, m.coll, &q) == 0, "every signal completes");
    GT_CHECK(seen == total && matched == NSTREAM, "all %d records applied: %llu of %llu", NSTREAM,
             (unsigned long long)seen, (unsigned long long)total);
    GT_CHECK(gt_barrier(t, 1, 2, 20000) == 0, "barrier");
    return mem_teardown(t, &m);
}

/* The plugin's death report, eep_gin_peers_lost (gin_mesh.c), from the library already loaded. */
static uint64_t peers_lost(void)
{
    uint64_t (*fn)(void) = (uint64_t(*)(void))gt_plugin_sym("eep_gin_peers_lost");

    return fn != NULL ? fn() : ~0ull;
}

/* Rank 2 dies (SIGKILL) while ranks 0 and 1 stream puts to it and to each other.  Survivors:
 * nothing fails (NCCL 2.28.9 makes a comm with an async error unshrinkable, so the plugin
 * never reports one): requests to the dead rank complete as dropped, those to the live peer
 * keep landing, and eep_gin_peers_lost reports the death within 5 s; teardown returns at once
 * and a new comm of the two works. */
static int case_peer_killed(gt_t *t)
{
    rank_mem_t m, n;
    req_q_t    q = { 0 };
    void      *req;
    int64_t    died_at = 0, seen_at = 0;
    uint64_t   lost0 = peers_lost(), to_live = 0;
    int        i, failed = 0, got = 0, res, fds0 = eep_open_fds(), fds1;

    GT_CHECK(lost0 != ~0ull, "eep_gin_peers_lost is exported");
    if (mem_setup(t, 0, 1, &m) != 0) {
        return 1;
    }
    if (t->rank == 2) { /* receive for a while, then die in the middle of it */
        while (m.sig[0] < 20) {
            t->gin->gin_progress(m.coll);
        }
        __atomic_store_n(&t->board->word[0][0], (uint64_t)gt_now_ms(), __ATOMIC_RELEASE);
        raise(SIGKILL);
    }
    for (i = 0; i < 1000000 && !failed; i++) {
        uint32_t to = i % 2 == 0 ? 2u : (uint32_t)(1 - t->rank);

        res = t->gin->iput_signal(m.coll, 0, m.src_h, 65536, 0, m.win_h, to, 0, m.sig_h, 1,
                                  EEP_NCCL_SIGNAL_OP_INC, &req);
        if (res != EEP_NCCL_SUCCESS) {
            failed = 1;
            break;
        }
        to_live += to != 2u;
        q.req[q.tail++ % QDEPTH] = req;
        while (q.tail - q.head >= (i < 40 ? 1 : 16) && !failed) {
            got    = gt_gin_wait(t, m.coll, &q.req[q.head % QDEPTH], 1, 10000);
            failed = got != 0;
            q.head += !failed;
        }
        if (seen_at == 0 && peers_lost() > lost0) {
            seen_at = gt_now_ms();
        }
        died_at = (int64_t)__atomic_load_n(&t->board->word[0][0], __ATOMIC_ACQUIRE);
        if (died_at != 0 && seen_at != 0 && gt_now_ms() - seen_at > 200) {
            break; /* streamed past the death for a while */
        }
        if (died_at != 0 && gt_now_ms() - died_at > 10000) {
            break;
        }
    }
    GT_CHECK(!failed, "no request fails after rank 2's death (iput %d, wait %d, put %d)", res, got,
             i);
    GT_CHECK(q_drain(t, m.coll, &q) == 0, "every request completes, the dropped ones too");
    died_at = (int64_t)__atomic_load_n(&t->board->word[0][0], __ATOMIC_ACQUIRE);
    GT_CHECK(died_at != 0 && seen_at != 0 && seen_at - died_at < 5000,
             "eep_gin_peers_lost reports it %lld ms after the death",
             (long long)(seen_at - died_at));
    /* the live peer received every put + signal sent to it, before and after the death */
    __atomic_store_n(&t->board->word[1][t->rank], to_live, __ATOMIC_RELEASE);
    t->progress_coll = m.coll;
    GT_CHECK(gt_barrier(t, 1, 2, 20000) == 0, "barrier of the survivors");
    to_live = __atomic_load_n(&t->board->word[1][1 - t->rank], __ATOMIC_ACQUIRE);
    GT_CHECK(gt_gin_wait_word(t, m.coll, &m.sig[0], to_live, 20000) == 0,
             "the live peer's %llu signals", (unsigned long long)to_live);
    GT_CHECK(t->gin->iput(m.coll, 0, m.src_h, 64, 0, m.win_h, 2u, &req) == EEP_NCCL_SUCCESS &&
                 gt_gin_wait(t, m.coll, &req, 1, 10000) == 0,
             "a put to the dead rank completes as dropped");
    GT_CHECK(gt_barrier(t, 1, 2, 20000) == 0, "barrier of the survivors");
    if (mem_teardown(t, &m) != 0) {
        return 1;
    }
    /* a comm that lost a peer gives back every fd it held (the elastic GPU run saw survivors'
       fds creep, ~1 every two views) */
    fds1 = eep_open_fds();
    fprintf(stderr, "rank %d: open fds %d before the comm, %d after its teardown\n", t->rank, fds0,
            fds1);
    GT_CHECK(fds1 <= fds0, "the comm that lost rank 2 gave its fds back (%d -> %d)", fds0, fds1);
    /* the shrunk comm: ranks 0 and 1 */
    t->nranks = 2;
    if (mem_setup(t, 3, 1, &n) != 0) {
        return 1;
    }
    GT_CHECK(t->gin->iput_signal(n.coll, 0, n.src_h, 100000, 0, n.win_h, (uint32_t)(1 - t->rank), 0,
                                 n.sig_h, 1, EEP_NCCL_SIGNAL_OP_INC, &req) == EEP_NCCL_SUCCESS,
             "put on the new comm");
    GT_CHECK(gt_gin_wait(t, n.coll, &req, 1, 20000) == 0, "completes");
    GT_CHECK(gt_gin_wait_word(t, n.coll, &n.sig[0], 1, 20000) == 0, "signal on the new comm");
    GT_CHECK((unsigned char)n.win[99999] == src_byte(1 - t->rank, 99999), "data on the new comm");
    GT_CHECK(gt_barrier(t, 1, 2, 20000) == 0, "barrier");
    if (mem_teardown(t, &n) != 0) {
        return 1;
    }
    GT_CHECK(eep_open_fds() <= fds0, "and the shrunk one too (%d -> %d)", fds0, eep_open_fds());
    return 0;
}

int main(void)
{
    static const gt_case_t cases[] = {
        { "gin_register", 3, case_register, 0, 60 },
        { "gin_put_order_2", 2, case_put_order, 0, 90 },
        { "gin_put_order_4", 4, case_put_order, 0, 90 },
        { "gin_signal_sum_4", 4, case_signal_sum, 0, 90 },
        { "gin_signal_stream_5000", 2, case_signal_stream, 0, 60 },
        { "gin_self_put", 2, case_self_put, 0, 60 },
        { "gin_inline_values", 2, case_inline, 0, 60 },
        { "gin_inline_stray_2289", 2, case_inline_stray, 0, 60 },
        { "gin_two_comms", 3, case_two_comms, 0, 60 },
        { "gin_peer_killed", 3, case_peer_killed, 1u << 2, 60 },
    };

    return gt_main(cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
