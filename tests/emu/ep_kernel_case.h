/*
 * ep_kernel_case.h - one case of the real dispatch and combine kernels on the CPU, for
 * tests/emu/test_ep_kernels_emu.cc (which holds the cases and main()): run_case lays out every
 * rank's window and buffers in one shared mapping (shm_alloc), launches the kernels with every
 * block of every rank a process (launch, timing tests/emu/emu_launch.h's launch_once; with
 * EEP_EMU_LSA a network process per rank beside them, tests/emu/gin_model.h), runs its
 * dispatch+combine pairs and checks every output element by element against the CPU reference
 * (tests/common/ep_reference.c), the fault page, the dropped report and the wait counters
 * (check_waits).  The build's shape comes in as macros
 * (EEP_EPK_FIXED_W/K, EEP_EMU_LSA); what a family of cases varies (g_dead, g_place, g_experts,
 * g_rank_major, g_copy_engine, eep_shim_slow_rank) are globals the cases set around their
 * run_case calls.  Test code only, for the one translation unit that includes it.
 */
#ifndef EEP_TESTS_EMU_EP_KERNEL_CASE_H
#define EEP_TESTS_EMU_EP_KERNEL_CASE_H

#include "tests/emu/ep_kernel_shim.h"

/* EEP_EMU_LSA (the hybrid builds): ranks in nodes of EEP_EMU_LSA GPUs, peers of another node
   reached over the GIN model (tests/emu/gin_model.h) by the kernels' EEP_EPK_GIN variants. */
#ifdef EEP_EMU_LSA
#define EEP_EPK_GIN 1
#include "tests/emu/gin_model.h"
#endif

/* the host compiles the combine's one-row path in for rank-major handles (and unweighted
   combines): the emulated kernel follows the case's layout the same way */
static int g_rank_major; /* 1: the cases run with rank-major outputs (EEP_EP_LAYOUT_RANK_MAJOR) */
#define EEP_EPK_ONE_ROW g_rank_major
#include "kernels/ep/combine.cuh"
#include "kernels/ep/dispatch.cuh"
#include "tests/common/ep_reference.h"

#include "elastic/ep/ep_layout.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

/* Ranks and top-k as compiled in (tests/module.mk: 2/2, 3/8, 8/8, 1/8); 4 experts per rank
   (2 K at one rank; 72 in three cases, enough to stage the senders' ids in three more). */
#if !defined(EEP_EPK_FIXED_W) || !defined(EEP_EPK_FIXED_K)
#error "build with -DEEP_EPK_FIXED_W and -DEEP_EPK_FIXED_K, as elastic/ep/ep.c compiles the kernels"
#endif
#define W EEP_EPK_FIXED_W
#ifndef LIMIT_S
#define LIMIT_S 240 /* s, for the whole grid of one launch, every rank */
#endif

#ifdef EEP_EMU_LSA
#define L   EEP_EMU_LSA
#define LSA EEP_EMU_LSA
#else
#define LSA 1 /* direct mode: no forwarding */
#endif
#ifdef EEP_EMU_LSA
static_assert(W % L == 0 && W / L >= 2, "a hybrid build has at least two nodes");
#endif

/* what this harness shares with test_ep_training_emu.cc: the shared mapping (shm_alloc), g_dead,
   the block and network processes of a launch (launch_once), check */
#include "tests/emu/emu_launch.h"

/* argv[1]: run only the cases whose name holds it (the others are not counted) */
static const char *g_only;

/* Wall time of the case's launches so far (ns; run_case resets it): no count of seconds waited
   can exceed it. */
static unsigned long long g_launch_ns;

static unsigned long long wall_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

/* A launch on the first @p nranks ranks: every block of every rank a process (launch_once,
   tests/emu/emu_launch.h), its wall time added to g_launch_ns; false on a hang or a crash. */
static bool launch(body_fn fn, eep_epk_params_t *p, unsigned G, size_t dyn, const char *what,
                   int nranks = W)
{
    const unsigned long long t0 = wall_ns();
    const bool               ok = launch_once(fn, p, G, dyn, what, nranks);

    g_launch_ns += wall_ns() - t0;
    return ok;
}

enum { FAULT_NONE, FAULT_SILENT_PEER, FAULT_BAD_ID, FAULT_DUP_ID, SKIP_PADDING_X };
#define BAD_ID 4099 /* an expert id past every build's experts */

/* Gating beyond the balanced default (the edge cases, as make gpu-check has them). */
enum {
    GATING_BALANCED,
    GATING_MASKED,
    GATING_HOTSPOT,
    GATING_SILENT_RANK,
    GATING_MASKED_RANK,
    GATING_DROPPED /* every 5th token to no expert: received nowhere, the later rows shift */
};

static int g_cases;   /* run_case calls that ran */
static int g_skipped; /* and those that cannot run in this build */
/* 1: as eep_dispatch does at one rank (EEP_EP_COPY_ENGINE), the "copy engine" (a memcpy here)
   fills recv_x with x when every token is received, before the copy launch; 2: it fills it with
   a sentinel instead, and the copy blocks must leave it there (they write metadata only); 3: the
   overlapped way, started before the counts were known: x into recv_x row for row for every
   token, received or not, and the copy blocks must rewrite each row that is not its token's. */
static int g_copy_engine;
/* One rank, rank-major: the dispatch takes the path without records (kernels/ep/
   dispatch_solo.cuh) as eep_dispatch does (EEP_EP_SOLO).  1: its routing launch writes the
   outputs (the caller's buffers); 2: they are written after the counts (CPU_SYNC with the alloc
   hook: phase 3); 3: as 1, but the first pair runs the general kernel, whose handle arrays every
   later pair must give again.  With g_copy_engine 3 the copy engine's x -> recv_x goes first
   (the overlapped way) and the rows after a token not received are the fix-up launch's. */
static int g_solo;

/* The expected outputs of every rank in the layout under test. */
static bool reference(const eep_ep_shape_t &s, const eep_ref_input_t *in, eep_ref_recv_t *rr)
{
    if (eep_ref_dispatch(&s, in, rr, NULL, NULL) != EEP_OK) {
        return false;
    }
    for (int r = 0; g_rank_major && r < s.world; r++) {
        eep_ref_recv_t rm;

        if (eep_ref_rank_major(&s, in, r, &rm) != EEP_OK) {
            return false;
        }
        eep_ref_recv_free(&rr[r]);
        rr[r] = rm;
    }
    return true;
}

/* The expert placement of the cases (issue 24): the default policy (contiguous blocks, as even
   as possible: uneven when the experts do not divide among the ranks), a permuted one (the
   default's counts, experts and slots shuffled: nothing contiguous), and one where the last rank
   holds no expert (the others round-robin).  g_experts > 0: the cases' expert count. */
enum { PLACE_DEFAULT, PLACE_PERMUTED, PLACE_EMPTY_RANK };
static int g_place;
static int g_experts;
static int g_table_cases; /* cases whose kernels read the placement table (not the even path) */

static void make_placement(int kind, int E, std::vector<eep_expert_place_t> &pl)
{
    pl.resize((size_t)E);
    if (kind == PLACE_EMPTY_RANK) {
        const int held = W > 1 ? W - 1 : 1; /* the ranks that hold experts (a W 1 build skips) */

        for (int e = 0; e < E; e++) {
            pl[(size_t)e].rank = e % held;
            pl[(size_t)e].slot = e / held;
        }
        return;
    }
    std::vector<eep_expert_place_t> def((size_t)E);
    std::vector<int>                perm((size_t)E);
    uint64_t                        st = 12345;

    eep_placement_default(E, W, def.data());
    for (int e = 0; e < E; e++) {
        perm[(size_t)e] = e;
    }
    for (int e = E - 1; e > 0; e--) { /* Fisher-Yates, the reference's generator */
        std::swap(perm[(size_t)e], perm[(size_t)(eep_ref_rand(&st) % (uint64_t)(e + 1))]);
    }
    for (int e = 0; e < E; e++) {
        pl[(size_t)perm[(size_t)e]] = def[(size_t)e];
    }
}

/* A case this build cannot run, and why. */
/* The CPU_SYNC host mirror of one rank against the reference: words [0, El] are the counts and
   the rows, each tagged with the low half of the call's sequence (word El + 1), as
   eep_ep_wait_counts reads them (a word with another call's tag is one the host waits on). */
static bool mirror_ok(const uint64_t *m, int El, int64_t rows, const int32_t *counts)
{
    const uint32_t tag = (uint32_t)m[El + 1];

    for (int e = 0; e <= El; e++) {
        const int64_t want = e < El ? (int64_t)counts[e] : rows;

        if ((uint32_t)(m[e] >> 32) != tag || (int64_t)(uint32_t)m[e] != want) {
            fprintf(stderr, "host mirror word %d: %#llx, want tag %#x value %lld\n", e,
                    (unsigned long long)m[e], tag, (long long)want);
            return false;
        }
    }
    return true;
}

static void skip_case(const char *name, const char *why)
{
    printf("SKIP %s: %s\n", name, why);
    g_skipped++;
}

/*
 * Wait accounting (issue 28): with a slow sender, every other rank's dispatch waits summed for
 * that peer (count slot and records) are the largest of its peers', and at least a good part of
 * the delay; every rank's counters stay within its peers.  A case without a slow rank checks
 * only that nothing was counted for a rank outside the world, and so does CPU_SYNC: its copy
 * launch starts here once every block of the first launch has ended (launch() waits for all of
 * them), so the slow senders' delay is spent before anything waits for their data.
 */
static void check_waits(const eep_epk_params_t *p, const char *name, int mode)
{
    const int slow = eep_shim_slow_rank;

    for (int r = 0; r < W; r++) {
        const unsigned long long *ns      = (const unsigned long long *)p[r].wait_stats;
        unsigned long long        outside = 0, best = 0;
        int                       best_peer = -1;

        for (int ph = 0; ph < EEP_WAIT_STAT_PHASES; ph++) {
            for (int peer = W; peer < EEP_MAX_RANKS; peer++) {
                outside += ns[ph * EEP_MAX_RANKS + peer];
            }
        }
        check(outside == 0, "no wait counted for a rank outside the world", r, (long long)outside);
        /* seconds, not block- or thread-seconds: no (phase, peer) count above the launches'
           wall time (12 blocks each adding the same wait counted 12x, issue 28's eepctl top) */
        for (int ph = 0; ph < EEP_WAIT_STAT_PHASES; ph++) {
            for (int peer = 0; peer < W; peer++) {
                check(ns[ph * EEP_MAX_RANKS + peer] <= g_launch_ns,
                      "the waits counted for a peer fit in the launches' wall time (ns)",
                      (int)(g_launch_ns / 1000000), (long long)ns[ph * EEP_MAX_RANKS + peer]);
            }
        }
        for (int ph = 0; g_dead != 0 && !is_dead(r) && ph < EEP_WAIT_STAT_PHASES; ph++) {
            for (int peer = 0; peer < W; peer++) {
                check(!is_dead(peer) || ns[ph * EEP_MAX_RANKS + peer] == 0,
                      "no wait counted for a dead rank", r, peer);
            }
        }
        /* a rank that holds no expert receives no record: it never waits for the slow
           senders' data (its count words come from their counter blocks, which are not slow) */
        if (slow < 0 || W < 2 || r == slow || mode == EEP_EPK_CPU_SYNC || p[r].num_local == 0) {
            continue;
        }
        for (int peer = 0; peer < W; peer++) {
            if (peer == r) {
                continue; /* its own blocks' routing chunks (dispatch_route.cuh), not a peer */
            }
            const unsigned long long d = ns[EEP_WAIT_STAT_DISPATCH_COUNTS * EEP_MAX_RANKS + peer] +
                                         ns[EEP_WAIT_STAT_DISPATCH_DATA * EEP_MAX_RANKS + peer];

            if (d > best) {
                best      = d;
                best_peer = peer;
            }
        }
        printf("  %s: rank %d waited %.3f s in dispatch, most for rank %d\n", name, r,
               (double)best / 1e9, best_peer);
        if (getenv("EMU_WAITS_DEBUG") != NULL) {
            for (int peer = 0; peer < W; peer++) {
                printf("    peer %d: counts %.3f data %.3f\n", peer,
                       ns[EEP_WAIT_STAT_DISPATCH_COUNTS * EEP_MAX_RANKS + peer] / 1e9,
                       ns[EEP_WAIT_STAT_DISPATCH_DATA * EEP_MAX_RANKS + peer] / 1e9);
            }
        }
        /* with forwarding (hybrid, L > 1) the records of a source of the slow rank's local
           index reach another node through that node's rank of the same index, a rail peer of
           the slow rank, which forwards nothing before the slow rank's signal: the waits name
           that source (the slow rank's own node: the slow rank forwards them itself) */
        bool named = best_peer == slow;
#if defined(EEP_EMU_LSA) && EEP_EMU_LSA > 1
        named = named || best_peer % L == slow % L; /* its forwarder waited for the slow one */
#endif
        check(named, "the dispatch waits name the slow rank (or a source it forwards)", r,
              best_peer);
        check(best >= 50000000ull, "the waits for the slow rank hold its delay (ns)", r,
              (long long)best);
    }
}

static int run_case(const char *name, int mode, eep_dtype_t dtype, int tokens, int pairs,
                    int fault = FAULT_NONE, int gating = GATING_BALANCED, int max_tokens = 8,
                    int experts_per_rank = 4, int hidden = 0, int alignment = 4)
{
    if (g_only != NULL && strstr(name, g_only) == NULL) {
        return 0;
    }
    g_launch_ns                      = 0;
    const unsigned long long case_t0 = wall_ns();
    if (W == 1 && (fault == FAULT_SILENT_PEER || gating == GATING_SILENT_RANK)) {
        skip_case(name, "needs a second rank (one-rank build)");
        return 0;
    }
    if (EEP_EPK_FIXED_K == 1 && fault == FAULT_DUP_ID) {
        skip_case(name, "a token of one id cannot name an expert twice (top-k 1 build)");
        return 0;
    }
    if (g_dead != 0 && (W == 1 || fault != FAULT_NONE)) {
        skip_case(name, "degraded mode needs a second rank and no other fault");
        return 0;
    }
    if (g_place == PLACE_EMPTY_RANK && W == 1) {
        skip_case(name, "a rank without experts needs a second rank (one-rank build)");
        return 0;
    }
    if (experts_per_rank * W < EEP_EPK_FIXED_K) {   /* one rank, K 8: 4 experts cannot hold */
        experts_per_rank = 2 * EEP_EPK_FIXED_K / W; /* a token's ids */
    }
    std::vector<eep_expert_place_t> placement;
    g_cases++;
    eep_ep_shape_t s;
    memset(&s, 0, sizeof(s));
    s.world       = W;
    s.max_tokens  = max_tokens;
    s.hidden      = hidden > 0                    ? hidden
                    : dtype == EEP_DTYPE_FP8_E4M3 ? 128
                                                  : 64; /* 8 vectors of 16 bytes either way */
    s.num_topk    = EEP_EPK_FIXED_K;
    s.num_experts = g_experts > 0 ? g_experts : experts_per_rank * W;
    s.alignment   = alignment;
    s.dtype       = dtype;
    if (g_place != PLACE_DEFAULT) {
        make_placement(g_place, s.num_experts, placement);
        if (eep_ep_shape_place(&s, placement.data()) != EEP_OK || s.placement == NULL) {
            printf("%s: the case's placement is refused, or is the default\n", name);
            return 1;
        }
    }

    const int     El = eep_ep_local_experts(&s), K = s.num_topk, H = s.hidden, T = s.max_tokens;
    const int     NC = s.num_experts + W, S = 2, X = 1, G = S + X;
    const int64_t rows = eep_ep_rows_max(&s);
    eep_ep_buffer_sizes_t z;
    eep_ep_wire_t         wire;
    eep_ref_gen_t         gen;
    eep_ref_input_t       in[W];
    eep_ref_input_t       din[W]; /* degraded mode: the inputs as the live kernels see them */
    eep_ref_recv_t        rr[W];
    eep_epk_params_t      p[W];
    const int             before = g_errors;

    eep_ep_buffer_sizes(&s, &z);
    eep_ep_wire_layout(&s, &wire);
    eep_ref_gen_init(&gen, 7);
    gen.num_tokens = tokens; /* 0: max_tokens on every rank */
    if (gating == GATING_MASKED) {
        gen.masked_fraction = 0.3; /* -1 entries: no expert for that lane */
    } else if (gating == GATING_HOTSPOT) {
        gen.hotspot_expert = 0; /* every token to expert 0 only (rank 0), the other lanes -1 */
        gen.hotspot_only   = 1;
    } else if (gating == GATING_MASKED_RANK) {
        gen.masked_rank = 0; /* rank 0's tokens have only -1 entries: nothing is received */
    } else if (gating == GATING_SILENT_RANK) {
        gen.silent_rank = 1; /* rank 1 has no tokens: it sends nothing, still receives */
    } else if (gating == GATING_DROPPED) {
        gen.drop_every = 5;
    }
    for (int r = 0; r < W; r++) {
        eep_ref_input_generate(&s, &gen, r, &in[r]);
    }
    /* degraded mode: the reference of what the live ranks see, and the expected drop report */
    std::vector<std::vector<uint8_t>> drop_ref(W);
    int32_t                           ndrop_ref[W];
    const eep_ref_input_t            *ref_in  = g_dead != 0 ? din : in;
    auto                              degrade = [&]() {
        uint8_t *bufs[W];

        for (int r = 0; r < W; r++) {
            drop_ref[r].assign((size_t)in[r].num_tokens * K + 1, 0);
            bufs[r] = drop_ref[r].data();
        }
        return g_dead == 0 ||
               eep_ref_degrade_lsa(&s, in, g_dead, LSA, din, bufs, ndrop_ref) == EEP_OK;
    };
    if (!degrade() || !reference(s, ref_in, rr)) {
        printf("%s: the CPU reference failed\n", name);
        return 1;
    }
    g_used = 0;
    memset(g_mem, 0, g_high); /* what earlier cases wrote (pages past it are still zero) */
    eep_shim_window *win = (eep_shim_window *)shm_alloc(sizeof(eep_shim_window));
#ifdef EEP_EMU_LSA
    /* each rank's window past the direct layout: the GIN send staging (kernels/ep/ep_gin.cuh) */
    const size_t stage = eep_ep_gin_stage_bytes(&s, L);
    g_net              = (eep_gin_model *)shm_alloc(sizeof(eep_gin_model));
    g_net->nranks      = W;
    eep_shim_window *node_win[W / L];
    for (int n = 0; n < W / L; n++) {
        node_win[n] = (eep_shim_window *)shm_alloc(sizeof(eep_shim_window));
    }
    for (int r = 0; r < W; r++) {
        win->base[r]                 = (unsigned char *)shm_alloc(z.total_bytes + stage);
        g_net->base[r]               = win->base[r];
        node_win[r / L]->base[r % L] = win->base[r]; /* LSA index = local index */
    }
#else
    for (int r = 0; r < W; r++) {
        win->base[r] = (unsigned char *)shm_alloc(z.total_bytes);
    }
#endif
    const int    sw  = 2; /* order-mask warps: a small budget, like a large E would give */
    const size_t dyn = (size_t)(1 + 2 * sw) * NC * 4;
    std::vector<uint16_t *> out(W), out_ref(W), y(W);
    for (int r = 0; r < W; r++) {
        eep_epk_params_t &q   = p[r];
        const int         n   = in[r].num_tokens;
        int32_t          *ids = (int32_t *)shm_alloc((size_t)T * K * 4 + 4);

        eep_ref_topk_to_i32(&in[r], K, ids);
        if (fault == FAULT_BAD_ID && r == 0) {
            ids[3 * K + K - 1] = BAD_ID; /* token 3, its last lane: out of range */
        }
        if (fault == FAULT_DUP_ID && r == 0) {
            ids[3 * K] = ids[3 * K + 1] = 1; /* token 3: expert 1 twice */
        }
        /* the layout fields as eep_dispatch fills them; the dispatch area starts the window */
        if (eep_ep_params_layout(&s, r, 0, win->base[r], &q) != EEP_OK) {
            printf("%s: eep_ep_params_layout failed\n", name);
            return 1;
        }
        if (!q.place_even) { /* the placement table, as eep_dispatch uploads it */
            uint32_t *table = (uint32_t *)shm_alloc((size_t)s.num_experts * 4);

            eep_ep_place_table(&s, table);
            q.place = U(table);
            g_table_cases += r == 0;
        }
        check(q.num_local == rr[r].num_local, "the rank's local experts", r, q.num_local);
        q.num_tokens = n;
        q.scan_warps = sw;
        q.window     = win;
#ifdef EEP_EMU_LSA
        eep_gin_model_rank_params(q, (eep_epk_gin_t *)shm_alloc(sizeof(eep_epk_gin_t)), g_net, r, W,
                                  L, node_win[r / L], z.total_bytes);
#endif
        q.fault       = (eep_fault_page_t *)shm_alloc(sizeof(eep_fault_page_t));
        q.fault_claim = (unsigned int *)shm_alloc(4);
        q.wait_stats  = U(shm_alloc((size_t)EEP_WAIT_STAT_WORDS * 8));
        /* degraded mode: a wait for the dead rank would end at 20 s with a fault, which fails */
        q.timeout_ns = (fault == FAULT_SILENT_PEER || fault == FAULT_DUP_ID ? 2ull
                        : g_dead != 0                                       ? 20ull
                                                                            : 200ull) *
                       1000000000ull;
        q.dead_mask = g_dead;
        /* the reach masks as eep_dispatch derives them (elastic/ep/ep.c): with forwarding, the
           ranks behind a dead forwarder, each way */
        q.drop_mask = q.mute_mask = g_dead;
        for (int o = 0; LSA > 1 && o < W; o++) {
            if (o / LSA != r / LSA && ((g_dead >> ((o / LSA) * LSA + r % LSA)) & 1u)) {
                q.drop_mask |= 1u << o;
            }
            if (o / LSA != r / LSA && ((g_dead >> ((r / LSA) * LSA + o % LSA)) & 1u)) {
                q.mute_mask |= 1u << o;
            }
        }
        q.dropped_topk = g_dead != 0 || r == 0 ? U(shm_alloc((size_t)T * K + 16)) : 0;
        q.num_dropped  = g_dead != 0 || r == 0 ? U(shm_alloc(16)) : 0;
        q.send_blocks  = S;
        q.skip_pad_x   = fault == SKIP_PADDING_X;
        q.rank_major   = g_rank_major;
        q.x            = U(shm_alloc(wire.hidden_bytes * T));
        memcpy((void *)q.x, in[r].x, wire.hidden_bytes * n);
        if (wire.scale_bytes != 0) {
            q.x_scales = U(shm_alloc(wire.scale_bytes * T));
            memcpy((void *)q.x_scales, in[r].x_scales, wire.scale_bytes * n);
            q.recv_x_scales = U(shm_alloc(wire.scale_bytes * rows));
        }
        q.host_mirror  = U(shm_alloc((size_t)(El + 2) * 8));
        q.topk_idx     = U(ids);
        q.topk_weights = U(shm_alloc((size_t)T * K * 4));
        memcpy((void *)q.topk_weights, in[r].topk_weights, (size_t)n * K * 4);
        q.recv_x            = U(shm_alloc(wire.hidden_bytes * rows));
        q.recv_topk_idx     = U(shm_alloc((size_t)rows * K * 4));
        q.recv_topk_weights = U(shm_alloc((size_t)rows * K * 4));
        q.recv_counts       = U(shm_alloc((size_t)El * 4));
        q.recv_offsets      = U(shm_alloc((size_t)(std::max(El, W) + 1) * 4));
        q.h_counts          = U(shm_alloc((size_t)El * 4));
        q.h_offsets         = U(shm_alloc((size_t)(El + 1) * 8));
        q.h_send_slot       = U(shm_alloc((size_t)T * W * 4));
        q.h_recv_n          = U(shm_alloc((size_t)W * 4));
        q.h_recv_tok        = U(shm_alloc((size_t)W * T * 4));
        q.h_recv_ord        = U(shm_alloc((size_t)W * T * 4));
        q.h_recv_rows       = U(shm_alloc((size_t)W * T * K * 4));
        q.h_recv_w          = U(shm_alloc((size_t)W * T * K * 4));
        q.h_fwd_n           = U(shm_alloc((size_t)W * 4));
        q.h_fwd_tok         = U(shm_alloc((size_t)W * T * 4));
        q.h_fwd_dm          = U(shm_alloc((size_t)W * T * 4));
        q.chunk_totals      = U(shm_alloc((size_t)EEP_EPK_MAX_SEND_BLOCKS * NC * 4));
        q.chunk_flags       = U(shm_alloc((size_t)EEP_EPK_MAX_SEND_BLOCKS * 16));
        y[r]                = (uint16_t *)shm_alloc((size_t)rows * H * 2);
        q.y                 = U(y[r]);
        out[r]              = (uint16_t *)shm_alloc((size_t)T * H * 2);
        q.out               = U(out[r]);
        out_ref[r]          = (uint16_t *)calloc((size_t)T * H, 2);
    }
    /* combine: y from (rank, row, channel, pair), so that a combine that read an earlier pair's
       partials (a sequence or parity that did not advance) gives wrong sums; padding rows NaN
       (they must not be read); one channel in 61 a value whose rounding is special (-0, a NaN
       with sign and payload, +-inf, subnormals: the one-row path works on bits and must give
       what the float path gives) */
    static const uint16_t special[6] = { 0x8000, 0xff81, 0x7f80, 0xff80, 0x0001, 0x8003 };
    auto                  set_y      = [&](int pair) {
        for (int r = 0; r < W; r++) {
            for (int64_t row = 0; row < rows; row++) {
                for (int h = 0; h < H; h++) {
                    float v = (float)((r * 131 + row * 17 + h * 7 + pair * 29) % 97) / 32.0f - 1.5f;
                    const int64_t sp = (row * H + h + pair) % 61;
                    y[r][row * H + h] = !(row < rr[r].num_rows && rr[r].src_rank[row] >= 0)
                                                                  ? (uint16_t)0x7fc0
                                                              : sp < 6 ? special[sp]
                                                                       : eep_ref_f32_to_bf16(v);
                }
            }
        }
        return (g_rank_major ? eep_ref_combine_rank_major(&s, ref_in, rr, y.data(), out_ref.data())
                                                   : eep_ref_combine(&s, ref_in, rr, y.data(), out_ref.data())) == EEP_OK;
    };
    if (!set_y(0)) {
        printf("%s: the CPU combine reference failed\n", name);
        return 1;
    }

    /* the one-rank path's launches for dispatch mode @p dm (g_solo) */
    const size_t solo_dyn = EEP_EPK_SOLO_SMEM(K, El);
    auto         solo     = [&](int dm, const char *what) {
        eep_epk_params_t &q  = p[0];
        const size_t      n  = (size_t)in[0].num_tokens;
        const bool        ce = g_copy_engine == 3;

        /* as ep_solo.c: beside a routing launch the copy engine moves x and its scales; beside
           a cached launch x only, that launch writing the scale rows */
        const int sc = wire.scale_bytes != 0 ? EEP_EPK_SOLO_SCALES : 0;

        if (ce) { /* the copy engine: every token's row */
            memcpy((void *)q.recv_x, (const void *)q.x, wire.hidden_bytes * n);
            if (sc != 0 && dm != EEP_EPK_CACHED) {
                memcpy((void *)q.recv_x_scales, (const void *)q.x_scales, wire.scale_bytes * n);
            }
        }
        q.ce_copied = ce;
        if (dm == EEP_EPK_CACHED) {
            /* every token received: the copy beside a launch of ids, weights and scales */
            const bool all = rr[0].num_rows == (int64_t)n;

            q.solo = EEP_EPK_SOLO_META | sc | (ce && all ? 0 : EEP_EPK_SOLO_ROWS);
            return launch(eep_ep_dispatch_body<32, EEP_EPK_CACHED, 3>, p, G, solo_dyn, what);
        }
        q.solo = g_solo == 2 ? 0 : EEP_EPK_SOLO_META | (ce ? 0 : EEP_EPK_SOLO_ROWS | sc);
        if (!launch(dm == EEP_EPK_CPU_SYNC ? eep_ep_dispatch_body<32, EEP_EPK_CPU_SYNC, 2>
                                                       : eep_ep_dispatch_body<32, EEP_EPK_NO_CPU_SYNC, 2>,
                    p, G, solo_dyn, what)) {
            return false;
        }
        if (dm == EEP_EPK_CPU_SYNC) {
            const uint64_t *m = (const uint64_t *)q.host_mirror;

            check(m[El + 1] != 0, "host mirror sequence", 0, El + 1);
            check(mirror_ok(m, El, rr[0].num_rows, rr[0].expert_counts), "host mirror words", 0,
                              El);
        }
        /* the alloc hook's outputs, or the rows the copy engine could not place */
        if (g_solo == 2 || ce) {
            /* after the copy engine: the launch ends at once when every token was received */
            q.solo      = (g_solo == 2 ? EEP_EPK_SOLO_META : 0) | EEP_EPK_SOLO_ROWS | sc;
            q.ce_copied = ce;
            if (!launch(dm == EEP_EPK_CPU_SYNC ? eep_ep_dispatch_body<32, EEP_EPK_CPU_SYNC, 3>
                                                           : eep_ep_dispatch_body<32, EEP_EPK_NO_CPU_SYNC, 3>,
                        p, G, solo_dyn, what)) {
                return false;
            }
        }
        q.ce_copied = 0;
        q.solo      = 0;
        return true;
    };
    /* the handle's arrays of the first dispatch: every later one (the same routing) gives them */
    std::vector<std::vector<uint8_t>> handle0;
    const struct {
        unsigned long long p;
        size_t             bytes;
    } handle_arrays[] = {
        { p[0].h_send_slot, (size_t)T * W * 4 },     { p[0].h_recv_n, (size_t)W * 4 },
        { p[0].h_recv_tok, (size_t)W * T * 4 },      { p[0].h_recv_ord, (size_t)W * T * 4 },
        { p[0].h_recv_rows, (size_t)W * T * K * 4 }, { p[0].h_recv_w, (size_t)W * T * K * 4 },
        { p[0].h_counts, (size_t)El * 4 },           { p[0].h_offsets, (size_t)(El + 1) * 8 },
    };
    if (fault == FAULT_SILENT_PEER || fault == FAULT_BAD_ID || fault == FAULT_DUP_ID) {
        /* One dispatch: rank 1 never runs (silent peer: every wait of rank 0 must give up at
           its 2 s deadline, recording peer 1), or both run with a bad id on rank 0 (the token is
           dropped and recorded; nothing hangs). */
        const int                nr = fault == FAULT_SILENT_PEER ? 1 : W;
        const eep_fault_page_t  *f  = p[0].fault;
        const unsigned long long t0 = eep_shim_now_ns();
        bool                     ok;

        if (mode == EEP_EPK_CACHED) {
            /* a cached dispatch whose peer is silent: the handle from a dispatch of every rank
               first (a cached copy takes its layout from the handle and, at decode size, copies
               the records before the padding rows: a copy warp that gives up there must not
               hang the block) */
            ok = launch(eep_ep_dispatch_body<32, EEP_EPK_NO_CPU_SYNC, 0>, p, G, dyn, name, W);
            check(ok && f->abort_flag == 0, "the handle's dispatch ends, no fault", 0,
                  f->abort_flag);
            ok = launch(eep_ep_dispatch_body<32, EEP_EPK_CACHED, 0>, p, G, dyn, name, nr);
        } else if (g_solo != 0) {
            ok = solo(EEP_EPK_NO_CPU_SYNC, name);
        } else {
            ok = launch(eep_ep_dispatch_body<32, EEP_EPK_NO_CPU_SYNC, 0>, p, G, dyn, name, nr);
        }
        check(ok, "the launch ends", 0, -1);
        if (fault == FAULT_SILENT_PEER) {
            const double s_waited = (double)(eep_shim_now_ns() - t0) / 1e9;

            check(f->abort_flag == EEP_ABORT_TIMEOUT, "abort flag: timeout", 0, f->abort_flag);
            check(f->nrecords >= 1 && f->records[0].valid, "a fault record", 0, f->nrecords);
            check(f->records[0].phase == EEP_PHASE_EP_DISPATCH, "record phase", 0,
                  f->records[0].phase);
            check(f->records[0].peer >= 1 && f->records[0].peer < W, "record names a silent peer",
                  0, f->records[0].peer);
            check(s_waited < 30.0, "gave up near the deadline", 0, (long long)s_waited);
        } else {
            check(f->abort_flag == EEP_ABORT_FAULT, "abort flag: fault", 0, f->abort_flag);
            check(f->nrecords >= 1 && f->records[0].phase == EEP_PHASE_EP_BAD_EXPERT,
                  "bad-expert record", 0, f->nrecords);
            check(f->records[0].expected == 3 &&
                      f->records[0].observed == (fault == FAULT_DUP_ID ? 1 : BAD_ID),
                  "record names token 3 and its bad id", 0, (long long)f->records[0].expected);
            /* every block drops the token alike (senders, the counter's count, the copy
               blocks' layout): nothing waits for a record that never comes */
            check(f->nrecords == 1, "one fault record, no timeout", 0, f->nrecords);
        }
        printf("%s %s (%.1f s)\n", g_errors == before ? "PASS" : "FAIL", name,
               (double)(wall_ns() - case_t0) * 1e-9);
        for (int r = 0; r < W; r++) {
            eep_ref_input_free(&in[r]);
            eep_ref_recv_free(&rr[r]);
            free(out_ref[r]);
        }
        return g_errors == before ? 0 : 1;
    }
    for (int pair = 0; pair < pairs; pair++) {
        const int dmode = mode == EEP_EPK_CPU_SYNC             ? EEP_EPK_CPU_SYNC
                          : pair > 0 && mode == EEP_EPK_CACHED ? EEP_EPK_CACHED
                                                               : EEP_EPK_NO_CPU_SYNC;
        char      what[96];

        /* x, its scales and the top-k weights change with every pair (the routing does not, so
           cached calls stay valid), and the reference with them: a dispatch that placed an
           earlier pair's record (staging read before it landed), or read a record's metadata
           before its tag, fails */
        for (int r = 0; pair > 0 && r < W; r++) {
            uint8_t *x = (uint8_t *)in[r].x, *sc = (uint8_t *)in[r].x_scales;

            for (size_t i = 0; i < (size_t)in[r].num_tokens * K; i++) {
                in[r].topk_weights[i] += 0.125f * (float)((i + pair) % 5 + 1);
            }
            memcpy((void *)p[r].topk_weights, in[r].topk_weights, (size_t)in[r].num_tokens * K * 4);

            for (size_t i = 0; i < wire.hidden_bytes * (size_t)in[r].num_tokens; i++) {
                x[i] = (uint8_t)(x[i] ^ (uint8_t)(0x5a + pair));
            }
            memcpy((void *)p[r].x, in[r].x, wire.hidden_bytes * in[r].num_tokens);
            for (size_t i = 0; sc != NULL && i < wire.scale_bytes * (size_t)in[r].num_tokens; i++) {
                sc[i] = (uint8_t)(sc[i] ^ (uint8_t)(0x21 + pair));
            }
            if (sc != NULL) {
                memcpy((void *)p[r].x_scales, in[r].x_scales, wire.scale_bytes * in[r].num_tokens);
            }
            eep_ref_recv_free(&rr[r]);
            if (g_dead != 0) {
                eep_ref_input_free(&din[r]);
            }
        }
        if (pair > 0 && (!degrade() || !reference(s, ref_in, rr))) {
            printf("%s: the CPU reference failed\n", name);
            return 1;
        }

        for (int r = 0; r < W; r++) { /* poison every output */
            memset((void *)p[r].recv_x, 0xa5, wire.hidden_bytes * rows);
            if (wire.scale_bytes != 0) {
                memset((void *)p[r].recv_x_scales, 0xa5, wire.scale_bytes * rows);
            }
            memset((void *)p[r].recv_topk_idx, 0xa5, (size_t)rows * K * 4);
            memset((void *)p[r].recv_topk_weights, 0xa5, (size_t)rows * K * 4);
            memset((void *)p[r].recv_counts, 0xa5, (size_t)El * 4);
            memset((void *)p[r].recv_offsets, 0xa5, (size_t)(std::max(El, W) + 1) * 4);
            memset(out[r], 0xa5, (size_t)T * H * 2);
            if (p[r].dropped_topk != 0) {
                memset((void *)p[r].dropped_topk, 0xa5, (size_t)T * K);
                memset((void *)p[r].num_dropped, 0xa5, 4);
            }
        }
        snprintf(what, sizeof(what), "%s pair %d dispatch", name, pair);
        if (g_solo != 0 && (g_solo != 3 || pair > 0)) {
            if (!solo(dmode, what)) {
                return 1;
            }
        } else if (dmode == EEP_EPK_CPU_SYNC) {
            /* senders + counter; the counts in the host mirror (its last word = the call's
               sequence); then the copy launch on the copy blocks */
            if (!launch(eep_ep_dispatch_body<32, EEP_EPK_CPU_SYNC, 0>, p, S + 1, dyn, what)) {
                return 1;
            }
            for (int r = 0; r < W; r++) {
                const uint64_t *m  = (const uint64_t *)p[r].host_mirror;
                const int       Er = p[r].num_local;

                if (is_dead(r)) {
                    continue;
                }
                check(m[Er + 1] == (uint64_t)pair + 1, "host mirror sequence", r, Er + 1);
                check(mirror_ok(m, Er, rr[r].num_rows, rr[r].expert_counts), "host mirror words", r,
                      Er);
            }
            for (int r = 0; g_copy_engine && W == 1 && r < W; r++) {
                const uint64_t *m = (const uint64_t *)p[r].host_mirror;

                p[r].ce_copied = g_copy_engine == 3 ||
                                 (int64_t)(uint32_t)m[p[r].num_local] == (int64_t)in[r].num_tokens;
                if (p[r].ce_copied) {
                    const size_t n = (size_t)in[r].num_tokens;

                    if (g_copy_engine == 2) {
                        memset((void *)p[r].recv_x, 0x3c, wire.hidden_bytes * n);
                    } else {
                        memcpy((void *)p[r].recv_x, (const void *)p[r].x, wire.hidden_bytes * n);
                    }
                    if (wire.scale_bytes != 0) {
                        memcpy((void *)p[r].recv_x_scales, (const void *)p[r].x_scales,
                               wire.scale_bytes * n);
                    }
                }
            }
            if (!launch(eep_ep_dispatch_body<32, EEP_EPK_CPU_SYNC, 1>, p, X, dyn, what)) {
                return 1;
            }
            for (int r = 0; r < W; r++) {
                if (g_copy_engine == 2) {
                    check(p[r].ce_copied, "every token received (the case's premise)", r, 0);
                    for (size_t i = 0; i < wire.hidden_bytes * (size_t)in[r].num_tokens; i++) {
                        check(((const uint8_t *)p[r].recv_x)[i] == 0x3c,
                              "the copy engine's rows left alone", r, (long long)i);
                    }
                    /* the check below then compares the rows: put the real bytes in */
                    memcpy((void *)p[r].recv_x, (const void *)p[r].x,
                           wire.hidden_bytes * (size_t)in[r].num_tokens);
                }
                p[r].ce_copied = 0;
            }
        } else if (!launch(dmode == EEP_EPK_CACHED
                               ? eep_ep_dispatch_body<32, EEP_EPK_CACHED, 0>
                               : eep_ep_dispatch_body<32, EEP_EPK_NO_CPU_SYNC, 0>,
                           p, G, dyn, what)) {
            return 1;
        }
        for (size_t i = 0; g_solo != 0 && dmode != EEP_EPK_CACHED &&
                           i < sizeof(handle_arrays) / sizeof(handle_arrays[0]);
             i++) {
            const uint8_t *a = (const uint8_t *)handle_arrays[i].p;

            if (pair == 0) {
                handle0.emplace_back(a, a + handle_arrays[i].bytes);
            } else {
                check(memcmp(handle0[i].data(), a, handle_arrays[i].bytes) == 0,
                      "the handle's arrays as the first dispatch's", 0, (long long)i);
            }
        }
        for (int r = 0; r < W; r++) {
            const int32_t *cnt = (const int32_t *)p[r].recv_counts;
            const int32_t *off = (const int32_t *)p[r].recv_offsets;
            const uint8_t *rx  = (const uint8_t *)p[r].recv_x;
            const int32_t *ri  = (const int32_t *)p[r].recv_topk_idx;
            const float   *rw  = (const float *)p[r].recv_topk_weights;

            if (is_dead(r)) {
                continue;
            }
            check(p[r].fault->abort_flag == 0, "no fault raised", r, -1);
            /* the dropped report: exact, every lane of the call's tokens (zeros when no rank is
               dead), nothing past them */
            if (p[r].dropped_topk != 0) {
                const uint8_t *dt = (const uint8_t *)p[r].dropped_topk;
                const int32_t  nd = *(const int32_t *)p[r].num_dropped;
                const size_t   nk = (size_t)in[r].num_tokens * K;

                check(nd == (g_dead != 0 ? ndrop_ref[r] : 0), "num_dropped", r, nd);
                for (size_t i = 0; i < nk; i++) {
                    check(dt[i] == (g_dead != 0 ? drop_ref[r][i] : 0), "dropped_topk", r,
                          (long long)i);
                }
                for (size_t i = nk; i < (size_t)T * K; i++) {
                    check(dt[i] == 0xa5, "dropped_topk past the tokens untouched", r, (long long)i);
                }
            }
            for (int e = 0; e <= p[r].num_local; e++) {
                if (e < p[r].num_local) {
                    check(cnt[e] == rr[r].expert_counts[e], "expert count", r, e);
                }
                if (!g_rank_major) {
                    check(off[e] == rr[r].expert_offsets[e], "expert offset", r, e);
                }
            }
            for (int src = 0; g_rank_major && src <= W; src++) {
                check(off[src] == rr[r].expert_offsets[src], "rows before a source", r, src);
            }
            for (int64_t row = 0; row < rr[r].num_rows; row++) {
                if (fault == SKIP_PADDING_X && rr[r].src_rank[row] < 0) {
                    /* a padding row's x keeps the poison; its ids and weights are still set */
                    check(rx[row * wire.hidden_bytes] == 0xa5 &&
                              rx[(row + 1) * wire.hidden_bytes - 1] == 0xa5,
                          "padding x untouched", r, row);
                } else {
                    check(memcmp(rx + row * wire.hidden_bytes, rr[r].x + row * wire.hidden_bytes,
                                 wire.hidden_bytes) == 0,
                          "row bytes", r, row);
                }
                if (wire.scale_bytes != 0 &&
                    (fault != SKIP_PADDING_X || rr[r].src_rank[row] >= 0)) {
                    check(memcmp((const uint8_t *)p[r].recv_x_scales + row * wire.scale_bytes,
                                 (const uint8_t *)rr[r].x_scales + row * wire.scale_bytes,
                                 wire.scale_bytes) == 0,
                          "row scales", r, row);
                }
                for (int k = 0; k < K; k++) {
                    check(ri[row * K + k] == rr[r].topk_idx[row * K + k], "row ids", r, row);
                    check(rw[row * K + k] == rr[r].topk_weights[row * K + k], "row weights", r,
                          row);
                }
            }
            /* the overlapped copy engine writes x's rows up to T whatever the count (ep.h) */
            for (int64_t row = g_copy_engine == 3 ? in[r].num_tokens : rr[r].num_rows; row < rows;
                 row++) {
                check(rx[row * wire.hidden_bytes] == 0xa5, "rows past the end untouched", r, row);
            }
            /* the records are in the layout's format: each peer's first record carries the
               call's sequence in its tag and, as flagged lines, in its first line's flag (bytes
               120-127); a kernel that wrote plain records into a lines layout still places
               every row right, so only this says which format travelled */
            const int32_t *rn = (const int32_t *)p[r].h_recv_n;
            for (int src = 0; src < W; src++) {
                const uint64_t seq = (uint64_t)pair + 1;
                const uint8_t *rec = win->base[r] + p[r].drecv_off +
                                     ((seq & 1) * W + src) * p[r].drecv_region;
                uint64_t tag, flag;

                if (src == r || rn[src] == 0) {
                    continue; /* this rank's records are metadata only */
                }
                memcpy(&tag, rec + p[r].tag_off, 8);
                memcpy(&flag, rec + EEP_EP_COMBINE_LINE_BYTES - 8, 8);
                check(tag == seq, "record tag", r, src);
                if (p[r].lines & EEP_EPK_LINES_DISPATCH) {
                    check(flag == seq, "record line flag", r, src);
                }
            }
        }
        /* combine on G blocks (few records a block: warp groups split each record and
           token) and on one block (one warp a record, taken from the work counter) in turn */
        if (pair > 0 && !set_y(pair)) {
            printf("%s: the CPU combine reference failed\n", name);
            return 1;
        }
        snprintf(what, sizeof(what), "%s pair %d combine", name, pair);
        if (!launch(eep_ep_combine_body, p, pair % 2 == 0 ? G : 1, 0, what)) {
            return 1;
        }
        for (int r = 0; r < W; r++) {
            for (long long i = 0; i < (long long)in[r].num_tokens * H && !is_dead(r); i++) {
                check(out[r][i] == out_ref[r][i], "combine out (bitwise)", r, i);
            }
            check(is_dead(r) || p[r].fault->abort_flag == 0, "no fault raised (combine)", r, -1);
        }
        /* nothing was stored or put into a dead rank's window (it never ran: all zero) */
        for (int r = 0; g_dead != 0 && r < W; r++) {
            size_t nz = 0;

#ifdef EEP_EMU_LSA
            const size_t win_bytes = z.total_bytes + stage; /* with the GIN send staging */
#else
            const size_t win_bytes = z.total_bytes;
#endif
            for (size_t i = 0; is_dead(r) && i < win_bytes; i++) {
                nz += win->base[r][i] != 0;
            }
            check(nz == 0, "the dead rank's window untouched", r, (long long)nz);
        }
    }
#ifdef EEP_EMU_LSA
    /* with forwarding (L > 1) the last dispatch's forwarders remembered what they stored for
       each other node (the combine relays along it): some rank forwarded tokens */
    if (L > 1) {
        long long forwarded = 0;
        bool      crossing  = false; /* degraded: some live rank still reaches another node */

        for (int r = 0; r < W; r++) {
            const unsigned node = ((1u << L) - 1u) << (r / L * L);

            crossing = crossing || (!is_dead(r) && (~p[r].drop_mask & ~node & ((1u << W) - 1u)));
            for (int n = 0; n < W / L; n++) {
                forwarded += ((const int32_t *)p[r].h_fwd_n)[n];
            }
        }
        check(forwarded > 0 || gating == GATING_HOTSPOT || !crossing, "tokens forwarded", 0,
              forwarded);
    }
    /* the GIN legs ran: every rank put records, partials and count slots, and signalled */
    for (int r = 0; r < W; r++) {
        /* degraded: a dead rank puts nothing, the live ones signal the live GIN peers only
           (the ranks of the other nodes) */
        const unsigned node  = ((1u << L) - 1u) << (r / L * L);
        const int      peers = W - L - __builtin_popcount(g_dead & ~node);

        if (is_dead(r)) {
            check(g_net->puts[r] == 0 && g_net->signals_only[r] == 0, "a dead rank posts nothing",
                  r, (long long)g_net->puts[r]);
            continue;
        }
        /* degraded with forwarding: a rank whose every other node is behind a dead forwarder
           has nothing to put */
        const bool reach = (~p[r].drop_mask & ~node & ((1u << W) - 1u)) != 0;

        check(g_net->puts[r] > 0 || peers == 0 || !reach, "GIN puts of the rank", r,
              (long long)g_net->puts[r]);
        check(g_net->signals_only[r] >= (unsigned long long)pairs * peers,
              "GIN bare signals (combine) of the rank", r, (long long)g_net->signals_only[r]);
    }
#endif
    check_waits(p, name, mode);
    for (int r = 0; r < W; r++) {
        if (g_dead != 0) {
            eep_ref_input_free(&din[r]);
        }
        eep_ref_input_free(&in[r]);
        eep_ref_recv_free(&rr[r]);
        free(out_ref[r]);
    }
    printf("%s %s (%d dispatch+combine pairs, %d ranks x %d blocks x %d threads, %.1f s)\n",
           g_errors == before ? "PASS" : "FAIL", name, pairs, W, G, EEP_EPK_THREADS,
           (double)(wall_ns() - case_t0) * 1e-9);
    return g_errors == before ? 0 : 1;
}

#endif /* EEP_TESTS_EMU_EP_KERNEL_CASE_H */
