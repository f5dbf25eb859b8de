/*
 * gin_model.h - NCCL's GIN device API (put, signal, counters, readSignal/readCounter), on the
 * CPU, for the hybrid kernels run by tests/emu/ep_kernel_shim.h: a model of the network with the
 * device API's ordering rules, so that what the kernels may rely on is all they get.
 *
 * Every rank has one queue (its GIN context 0) in the shared mapping, filled by any block of the
 * rank (a ticket, then the entry, then its ready word), and a network process of its own
 * (eep_gin_model_network, forked by the test beside the blocks) that delivers the entries no
 * earlier than EEP_GIN_MODEL_DELAY_NS after they were posted, in batches that end at a signal:
 *   - the batch's payloads land in reverse order (puts with no signal between them are not
 *     ordered), each in two passes (odd 8-byte words, a pause, even ones), so that a reader that
 *     waits for a tag, a line's flag or a count word instead of the signal sees a torn or an
 *     old record;
 *   - then the batch's signal is added (release): visible only after its put's payload and every
 *     earlier put of the queue (= same context) landed;
 *   - and the counters of the source are bumped (local action: the source was consumed).
 * Nothing else is promised: a payload is not visible before its signal in any sense a kernel
 * could use, and no two queues are ordered.  A rank whose blocks never run (a silent peer) posts
 * nothing; its network process idles.  Test code only; include after ep_kernel_shim.h and
 * before the kernel headers, with EEP_EPK_GIN 1.
 */
#ifndef EEP_TESTS_EMU_GIN_MODEL_H
#define EEP_TESTS_EMU_GIN_MODEL_H

#include <cstdint>
#include <cstring>

#include "kernels/ep/ep_params.h" /* eep_epk_params_t, eep_epk_gin_t */

#ifndef EEP_EPK_EMULATION
#error "include tests/emu/ep_kernel_shim.h first"
#endif

#define EEP_GIN_MODEL_RANKS    32
#define EEP_GIN_MODEL_SIGNALS  128
#define EEP_GIN_MODEL_COUNTERS 8
#define EEP_GIN_MODEL_QUEUE    256 /* entries per queue, as NCCL's proxy queue: a full one waits */
#ifndef EEP_GIN_MODEL_DELAY_NS
#define EEP_GIN_MODEL_DELAY_NS 2000000ull /* 2 ms: every payload lands late */
#endif

typedef int ncclGinSignal_t;
typedef int ncclGinCounter_t;

struct ncclGin_None {
};
struct ncclGin_SignalInc {
    ncclGinSignal_t signal;
};
struct ncclGin_SignalAdd {
    ncclGinSignal_t    signal;
    unsigned long long value;
};
struct ncclGin_CounterInc {
    ncclGinCounter_t counter;
};
struct ncclCoopThread {
};

struct eep_gin_entry {
    unsigned long long ready; /* ticket + 1 once the entry is filled */
    unsigned long long posted_ns;
    int                peer, signal, counter, pad;
    unsigned long long dst_off, src_off, bytes, add;
};

struct eep_gin_queue {
    unsigned long long tail; /* tickets handed out */
    unsigned long long head; /* entries the network finished */
    eep_gin_entry      e[EEP_GIN_MODEL_QUEUE];
};

/* The whole network, in the shared mapping. */
struct eep_gin_model {
    int                nranks;
    volatile int       stop; /* the test's: the launch is over, drain and leave */
    unsigned char     *base[EEP_GIN_MODEL_RANKS]; /* every rank's window */
    unsigned long long signals[EEP_GIN_MODEL_RANKS][EEP_GIN_MODEL_SIGNALS];
    unsigned long long counters[EEP_GIN_MODEL_RANKS][EEP_GIN_MODEL_COUNTERS];
    unsigned long long puts[EEP_GIN_MODEL_RANKS], signals_only[EEP_GIN_MODEL_RANKS];
    eep_gin_queue      q[EEP_GIN_MODEL_RANKS];
};

/* The emulated device communicator (it lives in the kernels' eep_devcomm_blob_t). */
struct ncclDevComm {
    int            rank, nRanks, lsaRank, lsaSize, ginContextCount, pad;
    eep_gin_model *net;
};
static_assert(sizeof(ncclDevComm) <= 200, "the emulated dev comm fits NCCL's blob");

struct ncclTeam {
    int nRanks, rank, stride;
};

inline ncclTeam ncclTeamWorld(const ncclDevComm &dc)
{
    return ncclTeam{ dc.nRanks, dc.rank, 1 };
}

inline void eep_gin_model_fatal(const char *what)
{
    fprintf(stderr, "gin model: %s\n", what);
    _exit(6);
}

struct ncclGin {
    const ncclDevComm &comm;

    ncclGin(const ncclDevComm &dc, int context) : comm(dc)
    {
        if (dc.ginContextCount <= 0 || dc.net == nullptr) {
            eep_gin_model_fatal("ncclGin on a dev comm without GIN contexts (undefined in NCCL)");
        }
        (void)context; /* one context: index modulo the count, as NCCL does */
    }

    void post(int peer, unsigned long long dst, unsigned long long src, unsigned long long bytes,
              int signal, unsigned long long add, int counter) const
    {
        eep_gin_queue &q = comm.net->q[comm.rank];

        if (peer < 0 || peer >= comm.nRanks) {
            eep_gin_model_fatal("peer outside the team");
        }
        if (signal >= EEP_GIN_MODEL_SIGNALS || counter >= EEP_GIN_MODEL_COUNTERS) {
            eep_gin_model_fatal("signal or counter id past the dev comm's");
        }
        const unsigned long long t = __atomic_fetch_add(&q.tail, 1ull, __ATOMIC_ACQ_REL);
        while (t - __atomic_load_n(&q.head, __ATOMIC_ACQUIRE) >= EEP_GIN_MODEL_QUEUE) {
            eep_shim_give_way(); /* a full queue: the put waits, as NCCL's proxy put does */
        }
        eep_gin_entry &e = q.e[t % EEP_GIN_MODEL_QUEUE];
        e.posted_ns      = eep_shim_clock_ns();
        e.peer           = peer;
        e.signal         = signal;
        e.counter        = counter;
        e.dst_off        = dst;
        e.src_off        = src;
        e.bytes          = bytes;
        e.add            = add;
        /* the payload as the poster wrote it before the put (release: NCCL's put releases) */
        __atomic_store_n(&e.ready, t + 1, __ATOMIC_RELEASE);
    }

    static int sig_of(ncclGin_None)
    {
        return -1;
    }
    static int sig_of(ncclGin_SignalInc a)
    {
        return a.signal;
    }
    static int sig_of(ncclGin_SignalAdd a)
    {
        return a.signal;
    }
    static unsigned long long add_of(ncclGin_None)
    {
        return 0;
    }
    static unsigned long long add_of(ncclGin_SignalInc)
    {
        return 1;
    }
    static unsigned long long add_of(ncclGin_SignalAdd a)
    {
        return a.value;
    }
    static int ctr_of(ncclGin_None)
    {
        return -1;
    }
    static int ctr_of(ncclGin_CounterInc c)
    {
        return c.counter;
    }

    template <typename Remote = ncclGin_None, typename Local = ncclGin_None,
              typename Coop = ncclCoopThread>
    void put(ncclTeam team, int peer, ncclWindow_t, size_t dst_off, ncclWindow_t, size_t src_off,
             size_t bytes, Remote remote = Remote{}, Local local = Local{}, Coop = Coop{}) const
    {
        (void)team;
        post(peer, dst_off, src_off, bytes, sig_of(remote), add_of(remote), ctr_of(local));
    }

    template <typename Remote, typename Coop = ncclCoopThread>
    void signal(ncclTeam, int peer, Remote remote, Coop = Coop{}) const
    {
        post(peer, 0, 0, 0, sig_of(remote), add_of(remote), -1);
    }

    unsigned long long readSignal(ncclGinSignal_t s) const
    {
        return __atomic_load_n(&comm.net->signals[comm.rank][s], __ATOMIC_ACQUIRE);
    }

    unsigned long long readCounter(ncclGinCounter_t c) const
    {
        return __atomic_load_n(&comm.net->counters[comm.rank][c], __ATOMIC_ACQUIRE) &
               ((1ull << 56) - 1);
    }
};

/* One payload into the target's window in two passes with a pause between: first its odd 8-byte
   words, then its even ones, each pass from the last word to the first.  A record's tag and a
   flagged line's flag (the last 8 bytes of each 128-byte line: an odd word) land before the data
   they guard, so a reader that waits for them instead of the signal reads a torn record. */
inline void eep_gin_model_copy(eep_gin_model *net, int r, const eep_gin_entry &e)
{
    unsigned char       *dst = net->base[e.peer] + e.dst_off;
    const unsigned char *src = net->base[r] + e.src_off;
    const size_t         n   = (size_t)e.bytes / 8;

    if (e.bytes % 8 != 0) {
        eep_gin_model_fatal("a put of a size that is not a multiple of 8 bytes");
    }
    for (int pass = 1; pass >= 0; pass--) {
        for (size_t i = n; i-- > 0;) {
            unsigned long long v;

            if ((i & 1u) != (size_t)pass) {
                continue;
            }
            memcpy(&v, src + 8 * i, 8);
            __atomic_store_n((unsigned long long *)(dst + 8 * i), v, __ATOMIC_RELAXED);
        }
        if (pass == 1) {
            usleep(200);
        }
    }
}

/*
 * The network process of rank @p r: deliver its queue until the test says stop and the queue is
 * empty.  It takes a batch: the due entries up to the first that carries a signal (at most 64),
 * lands their payloads in the reverse of their order (puts without a signal between them are not
 * ordered), then applies the batch's signal (after every payload of the batch and of the earlier
 * batches: the device API's rule) and counters, in order.
 */
inline void eep_gin_model_network(eep_gin_model *net, int r)
{
    eep_gin_queue &q = net->q[r];

    for (;;) {
        const unsigned long long h = __atomic_load_n(&q.head, __ATOMIC_ACQUIRE);
        const unsigned long long t = __atomic_load_n(&q.tail, __ATOMIC_ACQUIRE);

        if (h == t) {
            if (net->stop) {
                return;
            }
            usleep(100);
            continue;
        }
        unsigned long long n = 0; /* the batch: entries h .. h + n - 1 */
        while (h + n < t && n < 64) {
            const eep_gin_entry &e = q.e[(h + n) % EEP_GIN_MODEL_QUEUE];

            if (__atomic_load_n(&e.ready, __ATOMIC_ACQUIRE) != h + n + 1) {
                break; /* still being filled */
            }
            n++;
            if (e.signal >= 0) {
                break;
            }
        }
        if (n == 0) {
            sched_yield();
            continue;
        }
        const eep_gin_entry &last = q.e[(h + n - 1) % EEP_GIN_MODEL_QUEUE];
        while (eep_shim_clock_ns() < last.posted_ns + EEP_GIN_MODEL_DELAY_NS) {
            usleep(100);
        }
        for (unsigned long long i = n; i-- > 0;) {
            const eep_gin_entry &e = q.e[(h + i) % EEP_GIN_MODEL_QUEUE];

            if (e.bytes != 0) {
                eep_gin_model_copy(net, r, e);
                net->puts[r]++;
            } else {
                net->signals_only[r]++;
            }
        }
        for (unsigned long long i = 0; i < n; i++) {
            const eep_gin_entry &e = q.e[(h + i) % EEP_GIN_MODEL_QUEUE];

            if (e.signal >= 0) {
                __atomic_fetch_add(&net->signals[e.peer][e.signal], e.add, __ATOMIC_RELEASE);
            }
            if (e.counter >= 0) {
                __atomic_fetch_add(&net->counters[r][e.counter], 1ull, __ATOMIC_RELEASE);
            }
        }
        __atomic_store_n(&q.head, h + n, __ATOMIC_RELEASE);
    }
}

/*
 * Rank @p r's hybrid fields of @p q as eep_dispatch fills them, @p W ranks in nodes of @p L GPUs:
 * its GIN parameters in @p g (in the shared mapping; a dev comm over @p net, signal and counter
 * bases not 0: the kernels must add them), its node's LSA window set, the GIN peers' mask (every
 * rank off its node) and the staging offset.
 */
inline void eep_gin_model_rank_params(eep_epk_params_t &q, eep_epk_gin_t *g, eep_gin_model *net,
                                      int r, int W, int L, eep_shim_window *node_window,
                                      unsigned long long gstage_off)
{
    ncclDevComm dc = { r, W, r % L, L, 1, 0, net };

    memcpy(&g->devcomm, &dc, sizeof(dc));
    g->sig0      = 5;
    g->ctr0      = 3;
    g->lsa_size  = L;
    g->nodes     = W / L;
    q.window     = node_window;
    q.lsa_base   = r / L * L;
    q.gin_mask   = (W == 32 ? ~0u : (1u << W) - 1u) & ~(((1u << L) - 1u) << q.lsa_base);
    q.gin        = (unsigned long long)(uintptr_t)g;
    q.gstage_off = gstage_off;
}

#endif /* EEP_TESTS_EMU_GIN_MODEL_H */
