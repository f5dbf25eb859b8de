/*
 * test_ep_reference.c - the CPU reference of dispatch/combine checks its own invariants, on the
 * cases issue 4 names (bf16 and fp8, -1 entries, a hotspot expert, a rank that sends nothing,
 * T = 1, T = max, H in {2048, 4096, 7168}, K in {1, 6, 8}, 256 experts), and its number formats
 * against known values.  The invariants are checked from the inputs by a route other than the
 * reference's own loops (per token, not per expert), so a bug in one shows in the other.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ep_reference.h"

/* ---------------------------------------------------------------------------------------- */
/* Number formats                                                                             */

static void test_bf16_known_values(void **state)
{
    (void)state;
    assert_int_equal(eep_ref_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(eep_ref_f32_to_bf16(-2.0f), 0xc000);
    assert_int_equal(eep_ref_f32_to_bf16(0.0f), 0x0000);
    assert_int_equal(eep_ref_f32_to_bf16(-0.0f), 0x8000);
    /* 1 + 2^-8 is halfway between 0x3f80 and 0x3f81: to even. */
    assert_int_equal(eep_ref_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    /* 1 + 3 * 2^-8 is halfway between 0x3f81 and 0x3f82: to even. */
    assert_int_equal(eep_ref_f32_to_bf16(1.0f + 0x3p-8f), 0x3f82);
    /* Just above half rounds up. */
    assert_int_equal(eep_ref_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    /* pi = 0x40490fdb -> 0x4049 */
    assert_int_equal(eep_ref_f32_to_bf16(3.14159265f), 0x4049);
    /* Overflow to infinity; infinities and NaN. */
    assert_int_equal(eep_ref_f32_to_bf16(3.4028235e38f), 0x7f80);
    assert_int_equal(eep_ref_f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(eep_ref_f32_to_bf16(-INFINITY), 0xff80);
    assert_int_equal(eep_ref_f32_to_bf16(NAN), 0x7fff);
    /* Smallest subnormal bf16. */
    assert_int_equal(eep_ref_f32_to_bf16(0x1p-133f), 0x0001);
    assert_true(eep_ref_bf16_to_f32(0x3f80) == 1.0f);
    assert_true(eep_ref_bf16_to_f32(0xc0a0) == -5.0f);
}

static void test_bf16_round_trip_every_code(void **state)
{
    uint32_t b;

    (void)state;
    for (b = 0; b < 0x10000; b++) {
        float f = eep_ref_bf16_to_f32((uint16_t)b);

        if (isnan(f)) {
            continue;
        }
        assert_int_equal(eep_ref_f32_to_bf16(f), b);
    }
}

static void test_e4m3_known_values(void **state)
{
    (void)state;
    assert_int_equal(eep_ref_f32_to_e4m3(1.0f), 0x38);
    assert_int_equal(eep_ref_f32_to_e4m3(-2.0f), 0xc0);
    assert_int_equal(eep_ref_f32_to_e4m3(448.0f), 0x7e);
    assert_int_equal(eep_ref_f32_to_e4m3(-448.0f), 0xfe);
    assert_int_equal(eep_ref_f32_to_e4m3(0.0f), 0x00);
    assert_int_equal(eep_ref_f32_to_e4m3(-0.0f), 0x80);
    assert_int_equal(eep_ref_f32_to_e4m3(0x1p-6f), 0x08);        /* smallest normal */
    assert_int_equal(eep_ref_f32_to_e4m3(0x1p-9f), 0x01);        /* smallest subnormal */
    assert_int_equal(eep_ref_f32_to_e4m3(0x7p-9f), 0x07);        /* largest subnormal */
    assert_int_equal(eep_ref_f32_to_e4m3(0.5f * 0x1p-9f), 0x00); /* tie -> even (0) */
    assert_int_equal(eep_ref_f32_to_e4m3(1.5f * 0x1p-9f), 0x02); /* tie -> even (2) */
    assert_int_equal(eep_ref_f32_to_e4m3(1.0625f), 0x38);        /* tie between 1 and 1.125 */
    assert_int_equal(eep_ref_f32_to_e4m3(1.1875f), 0x3a);        /* tie between 1.125 and 1.25 */
    assert_int_equal(eep_ref_f32_to_e4m3(15.5f), 0x58);  /* tie 15 (0x57) / 16 (0x58): even */
    assert_int_equal(eep_ref_f32_to_e4m3(0.1f), 0x1d);   /* 0.1015625 */
    assert_int_equal(eep_ref_f32_to_e4m3(464.0f), 0x7e); /* saturating, never NaN */
    assert_int_equal(eep_ref_f32_to_e4m3(1e6f), 0x7e);
    assert_int_equal(eep_ref_f32_to_e4m3(INFINITY), 0x7e);
    assert_int_equal(eep_ref_f32_to_e4m3(-INFINITY), 0xfe);
    assert_int_equal(eep_ref_f32_to_e4m3(NAN), 0x7f);
    assert_true(eep_ref_e4m3_to_f32(0x7e) == 448.0f);
    assert_true(eep_ref_e4m3_to_f32(0x01) == 0x1p-9f);
    assert_true(eep_ref_e4m3_to_f32(0xb8) == -1.0f);
    assert_true(isnan(eep_ref_e4m3_to_f32(0x7f)));
    assert_true(isnan(eep_ref_e4m3_to_f32(0xff)));
}

static void test_e4m3_round_trip_every_code(void **state)
{
    int   b;
    float prev = -1.0f;

    (void)state;
    for (b = 0; b < 256; b++) {
        float f = eep_ref_e4m3_to_f32((uint8_t)b);

        if (isnan(f)) {
            continue;
        }
        assert_int_equal(eep_ref_f32_to_e4m3(f), b);
        /* Positive codes are increasing; midpoints round to the even neighbour. */
        if (b > 0 && b < 0x7f) {
            float mid = 0.5f * (prev + f);

            assert_true(f > prev);
            assert_int_equal(eep_ref_f32_to_e4m3(mid), (b - 1) % 2 == 0 ? b - 1 : b);
        }
        if (b < 0x7f) {
            prev = f;
        }
    }
}

static void test_quantize_row(void **state)
{
    uint16_t x[256];
    uint8_t  q[256];
    float    sc[2];
    int      i;

    (void)state;
    for (i = 0; i < 128; i++) {
        x[i]       = eep_ref_f32_to_bf16((float)(i - 64) / 16.0f); /* amax 4 */
        x[128 + i] = 0;
    }
    eep_ref_quantize_row(x, 256, q, sc);
    assert_true(sc[0] == 4.0f / 448.0f);
    assert_true(sc[1] == 1.0f);
    assert_int_equal(q[0], 0xfe); /* -4 / scale = -448 */
    for (i = 0; i < 128; i++) {
        float back = eep_ref_e4m3_to_f32(q[i]) * sc[0];
        float want = eep_ref_bf16_to_f32(x[i]);

        assert_true(fabsf(back - want) <= fabsf(want) * 0.0625f + 1e-6f);
        assert_int_equal(q[128 + i], 0);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Dispatch / combine invariants                                                              */

typedef struct {
    const char *name;
    int         world, T, H, K, E, align;
    eep_dtype_t dtype;
    double      masked;
    int         hotspot, hotspot_only, silent, masked_rank, tokens_mode, num_tokens;
} ep_case_t;

static const ep_case_t cases[] = {
    { "bf16 H2048 K8", 4, 48, 2048, 8, 256, 128, EEP_DTYPE_BF16, 0, -1, 0, -1, -1, 1, 0 },
    { "fp8 H7168 K6 masked", 4, 24, 7168, 6, 256, 32, EEP_DTYPE_FP8_E4M3, 0.25, -1, 0, -1, -1, 0,
      0 },
    { "bf16 H4096 K1", 8, 32, 4096, 1, 256, 1, EEP_DTYPE_BF16, 0, -1, 0, -1, -1, 0, 0 },
    { "hotspot only", 4, 40, 2048, 8, 256, 16, EEP_DTYPE_BF16, 0, 77, 1, -1, -1, 0, 0 },
    { "hotspot + random", 8, 16, 2048, 6, 256, 8, EEP_DTYPE_FP8_E4M3, 0, 3, 0, -1, -1, 0, 0 },
    { "silent rank", 4, 32, 4096, 8, 256, 4, EEP_DTYPE_BF16, 0, -1, 0, 2, -1, 0, 0 },
    { "all -1 rank", 4, 32, 2048, 6, 256, 4, EEP_DTYPE_FP8_E4M3, 0, -1, 0, -1, 1, 0, 0 },
    { "T = 1", 8, 64, 7168, 8, 256, 128, EEP_DTYPE_BF16, 0, -1, 0, -1, -1, 0, 1 },
    { "T = max fp8", 2, 256, 2048, 8, 256, 64, EEP_DTYPE_FP8_E4M3, 0.1, -1, 0, -1, -1, 0, 0 },
    { "K > El", 8, 16, 2048, 8, 16, 2, EEP_DTYPE_BF16, 0, -1, 0, -1, -1, 0, 0 },
};

#define N_CASES (sizeof(cases) / sizeof(cases[0]))

typedef struct {
    eep_ep_shape_t   s;
    eep_ref_input_t *in;
    eep_ref_recv_t  *recv;
} ep_world_t;

static void world_make(const ep_case_t *c, uint64_t seed, ep_world_t *w)
{
    eep_ref_gen_t gen;
    int           r;

    w->s = (eep_ep_shape_t){ .world       = c->world,
                             .max_tokens  = c->T,
                             .hidden      = c->H,
                             .num_topk    = c->K,
                             .num_experts = c->E,
                             .alignment   = c->align,
                             .dtype       = c->dtype };
    eep_ref_gen_init(&gen, seed);
    gen.masked_fraction = c->masked;
    gen.hotspot_expert  = c->hotspot;
    gen.hotspot_only    = c->hotspot_only;
    gen.silent_rank     = c->silent;
    gen.masked_rank     = c->masked_rank;
    gen.tokens_mode     = c->tokens_mode;
    gen.num_tokens      = c->num_tokens;
    w->in               = calloc((size_t)c->world, sizeof(*w->in));
    w->recv             = calloc((size_t)c->world, sizeof(*w->recv));
    assert_non_null(w->in);
    assert_non_null(w->recv);
    for (r = 0; r < c->world; r++) {
        assert_int_equal(eep_ref_input_generate(&w->s, &gen, r, &w->in[r]), EEP_OK);
    }
    assert_int_equal(eep_ref_dispatch(&w->s, w->in, w->recv, NULL, NULL), EEP_OK);
}

static void world_free(ep_world_t *w)
{
    int r;

    for (r = 0; r < w->s.world; r++) {
        eep_ref_input_free(&w->in[r]);
        eep_ref_recv_free(&w->recv[r]);
    }
    free(w->in);
    free(w->recv);
}

/* Check rank dst's received layout against the inputs, token by token. */
static void check_recv(const ep_world_t *w, int dst)
{
    const eep_ep_shape_t *s  = &w->s;
    const eep_ref_recv_t *r  = &w->recv[dst];
    int                   El = eep_ep_local_experts(s), K = s->num_topk, e, src, t, k;
    size_t                row_bytes = (size_t)s->hidden * eep_ep_elem_bytes(s->dtype);
    size_t                nsc       = s->dtype == EEP_DTYPE_FP8_E4M3 ? (size_t)s->hidden / 128 : 0;
    int64_t               row, total = 0, seen_rows = 0;
    int64_t               pairs_expected = 0;
    int32_t              *seen;

    assert_true(r->num_rows <= eep_ep_rows_max(s));
    assert_int_equal(r->expert_offsets[0], 0);
    for (e = 0; e < El; e++) {
        int64_t span = r->expert_offsets[e + 1] - r->expert_offsets[e];

        assert_int_equal(r->expert_offsets[e] % s->alignment, 0);
        assert_true(span >= r->expert_counts[e]);
        assert_true(span < r->expert_counts[e] + s->alignment);
        total += r->expert_counts[e];
        /* Rows of the group: sources in (rank, token) order, then padding. */
        for (row = r->expert_offsets[e]; row < r->expert_offsets[e + 1]; row++) {
            int real = row < r->expert_offsets[e] + r->expert_counts[e];

            if (!real) {
                size_t i;

                assert_int_equal(r->src_rank[row], -1);
                for (i = 0; i < row_bytes; i++) {
                    assert_int_equal(r->x[(size_t)row * row_bytes + i], 0);
                }
                for (k = 0; k < K; k++) {
                    assert_int_equal(r->topk_idx[row * K + k], -1);
                    assert_true(r->topk_weights[row * K + k] == 0.0f);
                }
                continue;
            }
            if (row > r->expert_offsets[e]) {
                int64_t prev = (int64_t)r->src_rank[row - 1] * s->max_tokens +
                               r->src_token[row - 1];
                int64_t cur = (int64_t)r->src_rank[row] * s->max_tokens + r->src_token[row];

                assert_true(cur > prev);
            }
            src = r->src_rank[row];
            t   = r->src_token[row];
            assert_in_range(src, 0, s->world - 1);
            assert_in_range(t, 0, w->in[src].num_tokens - 1);
            /* The row's own expert is at its lane, and is local expert e. */
            assert_int_equal(w->in[src].topk_idx[(size_t)t * K + r->src_lane[row]],
                             (int64_t)dst * El + e);
            assert_int_equal(r->topk_idx[row * K + r->src_lane[row]], e);
            assert_memory_equal(r->x + (size_t)row * row_bytes,
                                w->in[src].x + (size_t)t * row_bytes, row_bytes);
            if (nsc) {
                assert_memory_equal(r->x_scales + (size_t)row * nsc,
                                    w->in[src].x_scales + (size_t)t * nsc, nsc * sizeof(float));
            }
            for (k = 0; k < K; k++) {
                int64_t g     = w->in[src].topk_idx[(size_t)t * K + k];
                int     local = g >= (int64_t)dst * El && g < (int64_t)(dst + 1) * El;

                assert_int_equal(r->topk_idx[row * K + k], local ? (int)(g - dst * El) : -1);
                assert_true(r->topk_weights[row * K + k] ==
                            (local ? w->in[src].topk_weights[(size_t)t * K + k] : 0.0f));
            }
            seen_rows++;
        }
    }
    assert_int_equal(r->num_rows, r->expert_offsets[El]);
    assert_int_equal(total, seen_rows);

    /* From the inputs' side: every (token, local expert) pair appears exactly once, and every
       token that hits this rank is counted once in tokens_from. */
    seen = calloc((size_t)s->world * (size_t)s->max_tokens * (size_t)K, sizeof(int32_t));
    assert_non_null(seen);
    for (row = 0; row < r->num_rows; row++) {
        if (r->src_rank[row] >= 0) {
            seen[((size_t)r->src_rank[row] * (size_t)s->max_tokens + (size_t)r->src_token[row]) *
                     (size_t)K +
                 (size_t)r->src_lane[row]]++;
        }
    }
    for (src = 0; src < s->world; src++) {
        int tokens = 0;

        for (t = 0; t < w->in[src].num_tokens; t++) {
            int hit = 0;

            for (k = 0; k < K; k++) {
                int64_t g    = w->in[src].topk_idx[(size_t)t * K + k];
                int     mine = g >= (int64_t)dst * El && g < (int64_t)(dst + 1) * El;
                int32_t n =
                    seen[((size_t)src * (size_t)s->max_tokens + (size_t)t) * (size_t)K + (size_t)k];

                assert_int_equal(n, mine ? 1 : 0);
                pairs_expected += mine;
                hit |= mine;
            }
            tokens += hit;
        }
        assert_int_equal(r->tokens_from[src], tokens);
    }
    assert_int_equal(pairs_expected, total);
    free(seen);
}

static void test_dispatch_invariants(void **state)
{
    size_t c;
    int    r;

    (void)state;
    for (c = 0; c < N_CASES; c++) {
        ep_world_t w;
        int64_t    sent = 0, received = 0;

        world_make(&cases[c], 1000 + c, &w);
        for (r = 0; r < w.s.world; r++) {
            check_recv(&w, r);
            received += w.recv[r].num_rows;
        }
        /* Counts sum to the non-masked (token, expert) pairs of the whole world. */
        received = 0;
        for (r = 0; r < w.s.world; r++) {
            int e, t, k;

            for (e = 0; e < w.recv[r].num_local; e++) {
                received += w.recv[r].expert_counts[e];
            }
            for (t = 0; t < w.in[r].num_tokens; t++) {
                for (k = 0; k < w.s.num_topk; k++) {
                    sent += w.in[r].topk_idx[(size_t)t * (size_t)w.s.num_topk + (size_t)k] >= 0;
                }
            }
        }
        assert_int_equal(sent, received);
        printf("%-22s world %d: %lld (token, expert) pairs, rank 0 gets %lld rows\n", cases[c].name,
               w.s.world, (long long)sent, (long long)w.recv[0].num_rows);
        world_free(&w);
    }
}

static void test_special_cases(void **state)
{
    ep_world_t w;
    int        r, e;

    (void)state;
    /* Hotspot only: one expert gets every token of every rank, nobody else gets anything. */
    world_make(&cases[3], 7, &w);
    for (r = 0; r < w.s.world; r++) {
        for (e = 0; e < w.recv[r].num_local; e++) {
            int gid = r * w.recv[r].num_local + e;

            assert_int_equal(w.recv[r].expert_counts[e],
                             gid == 77 ? w.s.world * w.s.max_tokens : 0);
        }
    }
    world_free(&w);
    /* Silent rank: sends nothing, still receives. */
    world_make(&cases[5], 8, &w);
    assert_int_equal(w.in[2].num_tokens, 0);
    for (r = 0; r < w.s.world; r++) {
        assert_int_equal(w.recv[r].tokens_from[2], 0);
    }
    assert_true(w.recv[2].num_rows > 0);
    world_free(&w);
    /* All -1 rank: sends nothing although it has tokens. */
    world_make(&cases[6], 9, &w);
    assert_true(w.in[1].num_tokens > 0);
    for (r = 0; r < w.s.world; r++) {
        assert_int_equal(w.recv[r].tokens_from[1], 0);
    }
    world_free(&w);
    /* T = 1 */
    world_make(&cases[7], 10, &w);
    for (r = 0; r < w.s.world; r++) {
        assert_int_equal(w.in[r].num_tokens, 1);
    }
    world_free(&w);
}

static void test_generator_is_deterministic(void **state)
{
    eep_ep_shape_t  s = { 4, 32, 2048, 8, 256, 16, EEP_DTYPE_FP8_E4M3, 0, NULL };
    eep_ref_gen_t   gen;
    eep_ref_input_t a, b, c;

    (void)state;
    eep_ref_gen_init(&gen, 42);
    gen.masked_fraction = 0.2;
    assert_int_equal(eep_ref_input_generate(&s, &gen, 1, &a), EEP_OK);
    assert_int_equal(eep_ref_input_generate(&s, &gen, 1, &b), EEP_OK);
    assert_int_equal(eep_ref_input_generate(&s, &gen, 2, &c), EEP_OK);
    assert_memory_equal(a.x, b.x, 32 * 2048);
    assert_memory_equal(a.topk_idx, b.topk_idx, 32 * 8 * sizeof(int64_t));
    assert_memory_equal(a.x_scales, b.x_scales, 32 * 16 * sizeof(float));
    assert_memory_not_equal(a.x, c.x, 32 * 2048);
    eep_ref_input_free(&a);
    eep_ref_input_free(&b);
    eep_ref_input_free(&c);
}

static void test_bad_expert_ids(void **state)
{
    eep_ep_shape_t  s = { 2, 8, 2048, 4, 16, 4, EEP_DTYPE_BF16, 0, NULL };
    eep_ref_gen_t   gen;
    eep_ref_input_t in[2];
    eep_ref_recv_t  recv[2];
    int             bad_rank = -1, bad_token = -1;

    (void)state;
    eep_ref_gen_init(&gen, 5);
    assert_int_equal(eep_ref_input_generate(&s, &gen, 0, &in[0]), EEP_OK);
    assert_int_equal(eep_ref_input_generate(&s, &gen, 1, &in[1]), EEP_OK);
    in[1].topk_idx[5 * 4 + 2] = 16; /* == num_experts */
    assert_int_equal(eep_ref_dispatch(&s, in, recv, &bad_rank, &bad_token), EEP_ERR_INVALID_ARG);
    assert_int_equal(bad_rank, 1);
    assert_int_equal(bad_token, 5);
    in[1].topk_idx[5 * 4 + 2] = -2;
    assert_int_equal(eep_ref_dispatch(&s, in, recv, &bad_rank, &bad_token), EEP_ERR_INVALID_ARG);
    in[1].topk_idx[5 * 4 + 2] = -1;
    in[0].topk_idx[3 * 4 + 1] = in[0].topk_idx[3 * 4 + 3] = 9;  /* twice in one token */
    in[0].topk_idx[3 * 4 + 0] = in[0].topk_idx[3 * 4 + 2] = -1; /* -1 twice is fine */
    assert_int_equal(eep_ref_dispatch(&s, in, recv, &bad_rank, &bad_token), EEP_ERR_INVALID_ARG);
    assert_int_equal(bad_rank, 0);
    assert_int_equal(bad_token, 3);
    in[0].topk_idx[3 * 4 + 3] = -1;
    assert_int_equal(eep_ref_dispatch(&s, in, recv, NULL, NULL), EEP_OK);
    eep_ref_recv_free(&recv[0]);
    eep_ref_recv_free(&recv[1]);
    eep_ref_input_free(&in[0]);
    eep_ref_input_free(&in[1]);
}

/* Degraded mode (eep_ref_degrade): a dead rank has no tokens, a live rank's lanes on the dead
   rank's experts become -1 (weights kept) and are reported; its dispatch then receives nothing
   from the dead rank; the ids are checked as given. */
static void test_degrade(void **state)
{
    eep_ep_shape_t  s = { 3, 8, 64, 4, 12, 4, EEP_DTYPE_BF16, 0, NULL }; /* 4 experts a rank */
    eep_ref_gen_t   gen;
    eep_ref_input_t in[3], din[3];
    eep_ref_recv_t  recv[3];
    uint8_t         drop[3][8 * 4 + 1];
    uint8_t        *bufs[3] = { drop[0], drop[1], drop[2] };
    int32_t         n[3]    = { -1, -1, -1 };
    int             r, i, total = 0;
    int64_t         row;

    (void)state;
    eep_ref_gen_init(&gen, 11);
    for (r = 0; r < 3; r++) {
        assert_int_equal(eep_ref_input_generate(&s, &gen, r, &in[r]), EEP_OK);
    }
    memset(drop, 0x5a, sizeof(drop));
    assert_int_equal(eep_ref_degrade(&s, in, 1u << 1, din, bufs, n), EEP_OK);
    assert_int_equal(din[1].num_tokens, 0);
    assert_int_equal(n[1], 0);
    assert_int_equal(drop[1][0], 0x5a); /* a dead rank's report is left alone */
    for (r = 0; r < 3; r += 2) {
        int mine = 0;

        assert_int_equal(din[r].num_tokens, in[r].num_tokens);
        assert_memory_equal(din[r].x, in[r].x, (size_t)in[r].num_tokens * 64 * 2);
        for (i = 0; i < in[r].num_tokens * 4; i++) {
            const int on_dead = in[r].topk_idx[i] >= 4 && in[r].topk_idx[i] < 8;

            assert_int_equal(drop[r][i], on_dead);
            assert_int_equal(din[r].topk_idx[i], on_dead ? -1 : in[r].topk_idx[i]);
            assert_true(din[r].topk_weights[i] == in[r].topk_weights[i]);
            mine += on_dead;
        }
        assert_int_equal(n[r], mine);
        total += mine;
    }
    assert_true(total > 0);
    assert_int_equal(eep_ref_dispatch(&s, din, recv, NULL, NULL), EEP_OK);
    for (r = 0; r < 3; r += 2) {
        assert_int_equal(recv[r].tokens_from[1], 0);
        for (row = 0; row < recv[r].num_rows; row++) {
            assert_int_not_equal(recv[r].src_rank[row], 1);
        }
    }
    for (r = 0; r < 3; r++) {
        eep_ref_recv_free(&recv[r]);
        eep_ref_input_free(&din[r]);
    }
    /* no report wanted; a mask past the world; every rank dead */
    assert_int_equal(eep_ref_degrade(&s, in, 1u, din, NULL, NULL), EEP_OK);
    for (r = 0; r < 3; r++) {
        eep_ref_input_free(&din[r]);
    }
    assert_int_equal(eep_ref_degrade(&s, in, 1u << 3, din, NULL, NULL), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_ref_degrade(&s, in, 7u, din, NULL, NULL), EEP_ERR_INVALID_ARG);
    /* the same dead expert twice in a token is still a bad token */
    in[0].topk_idx[0] = in[0].topk_idx[1] = 5;
    assert_int_equal(eep_ref_degrade(&s, in, 1u << 1, din, NULL, NULL), EEP_ERR_INVALID_ARG);
    for (r = 0; r < 3; r++) {
        eep_ref_input_free(&in[r]);
    }
}

/* eep_ref_degrade_lsa: 2 nodes of 2 GPUs, rank 3 dead.  Rank 1 crosses to node 1 through 3,
   so its lanes on ranks 2 and 3 are dropped; ranks 0 and 2 lose only rank 3's lanes.  An LSA
   size that does not divide the world is refused. */
static void test_degrade_forwarding(void **state)
{
    eep_ep_shape_t  s = { 4, 8, 64, 4, 16, 4, EEP_DTYPE_BF16, 0, NULL }; /* 4 experts a rank */
    eep_ref_gen_t   gen;
    eep_ref_input_t in[4], din[4];
    int32_t         n[4];
    int             r, i, cut = 0;

    (void)state;
    eep_ref_gen_init(&gen, 13);
    for (r = 0; r < 4; r++) {
        assert_int_equal(eep_ref_input_generate(&s, &gen, r, &in[r]), EEP_OK);
    }
    assert_int_equal(eep_ref_degrade_lsa(&s, in, 1u << 3, 2, din, NULL, n), EEP_OK);
    for (r = 0; r < 3; r++) {
        int mine = 0;

        for (i = 0; i < in[r].num_tokens * 4; i++) {
            const int64_t g    = in[r].topk_idx[i];
            const int     rank = g >= 0 ? (int)(g / 4) : -1;
            const int     drop = rank == 3 || (r == 1 && rank == 2);

            assert_int_equal(din[r].topk_idx[i], drop ? -1 : g);
            mine += drop;
            cut += r == 1 && rank == 2;
        }
        assert_int_equal(n[r], mine);
    }
    assert_true(cut > 0); /* rank 1 had lanes on rank 2, all cut */
    assert_int_equal(din[3].num_tokens, 0);
    for (r = 0; r < 4; r++) {
        eep_ref_input_free(&din[r]);
    }
    assert_int_equal(eep_ref_degrade_lsa(&s, in, 1u << 3, 3, din, NULL, NULL), EEP_ERR_INVALID_ARG);
    for (r = 0; r < 4; r++) {
        eep_ref_input_free(&in[r]);
    }
}

/* Expert outputs: y = c (a constant) on every real row, poison on padding rows. */
static uint16_t **make_y(const ep_world_t *w, uint16_t value)
{
    uint16_t **y = calloc((size_t)w->s.world, sizeof(*y));
    int        r;
    int64_t    row;
    int        h;

    assert_non_null(y);
    for (r = 0; r < w->s.world; r++) {
        y[r] = malloc(((size_t)w->recv[r].num_rows + 1) * (size_t)w->s.hidden * sizeof(uint16_t));
        assert_non_null(y[r]);
        for (row = 0; row < w->recv[r].num_rows; row++) {
            for (h = 0; h < w->s.hidden; h++) {
                y[r][row * w->s.hidden + h] = w->recv[r].src_rank[row] >= 0 ? value : 0x7fc0;
            }
        }
    }
    return y;
}

static uint16_t **make_out(const ep_world_t *w)
{
    uint16_t **out = calloc((size_t)w->s.world, sizeof(*out));
    int        r;

    assert_non_null(out);
    for (r = 0; r < w->s.world; r++) {
        size_t n = (size_t)w->in[r].num_tokens * (size_t)w->s.hidden;

        out[r] = malloc((n + 1) * sizeof(uint16_t));
        assert_non_null(out[r]);
        memset(out[r], 0xa5, (n + 1) * sizeof(uint16_t)); /* poison */
    }
    return out;
}

static void free_rows(uint16_t **p, int n)
{
    int r;

    for (r = 0; r < n; r++) {
        free(p[r]);
    }
    free(p);
}

/* The expected result of combine with a constant y, from the inputs alone. */
static uint16_t expected_const(const ep_world_t *w, int src, int t, float c)
{
    int   El = eep_ep_local_experts(&w->s), K = w->s.num_topk, r, k;
    float total = 0.0f;

    for (r = 0; r < w->s.world; r++) {
        float partial = 0.0f;
        int   hit     = 0;

        for (k = 0; k < K; k++) {
            int64_t g = w->in[src].topk_idx[(size_t)t * K + k];

            if (g >= (int64_t)r * El && g < (int64_t)(r + 1) * El) {
                partial = fmaf(w->in[src].topk_weights[(size_t)t * K + k], c, partial);
                hit     = 1;
            }
        }
        if (hit) {
            total += eep_ref_bf16_to_f32(eep_ref_f32_to_bf16(partial));
        }
    }
    return eep_ref_f32_to_bf16(total);
}

static void test_combine_constant_outputs(void **state)
{
    size_t c;

    (void)state;
    for (c = 0; c < N_CASES; c++) {
        ep_world_t w;
        uint16_t **y, **out;
        int        r, t, h;

        world_make(&cases[c], 2000 + c, &w);
        y   = make_y(&w, eep_ref_f32_to_bf16(1.0f));
        out = make_out(&w);
        assert_int_equal(eep_ref_combine(&w.s, w.in, w.recv, (const uint16_t *const *)y, out),
                         EEP_OK);
        for (r = 0; r < w.s.world; r++) {
            for (t = 0; t < w.in[r].num_tokens; t++) {
                uint16_t want = expected_const(&w, r, t, 1.0f);

                for (h = 0; h < w.s.hidden; h++) {
                    assert_int_equal(out[r][(size_t)t * w.s.hidden + h], want);
                }
            }
            /* Nothing past the output. */
            assert_int_equal(out[r][(size_t)w.in[r].num_tokens * w.s.hidden], 0xa5a5);
        }
        free_rows(y, w.s.world);
        free_rows(out, w.s.world);
        world_free(&w);
    }
}

/* combine(dispatch(x)) with identity experts (y = x) gives x times the sum of its weights, up to
   bf16 rounding; and twice the same call gives the same bits. */
static void test_combine_identity_experts(void **state)
{
    const ep_case_t *c = &cases[0]; /* bf16 */
    ep_world_t       w;
    uint16_t       **y, **out, **out2;
    int              r, t, h, k;
    int64_t          row;

    (void)state;
    world_make(c, 3000, &w);
    y = make_y(&w, 0);
    for (r = 0; r < w.s.world; r++) {
        for (row = 0; row < w.recv[r].num_rows; row++) {
            if (w.recv[r].src_rank[row] >= 0) {
                memcpy(y[r] + row * w.s.hidden, w.recv[r].x + (size_t)row * w.s.hidden * 2,
                       (size_t)w.s.hidden * 2);
            }
        }
    }
    out  = make_out(&w);
    out2 = make_out(&w);
    assert_int_equal(eep_ref_combine(&w.s, w.in, w.recv, (const uint16_t *const *)y, out), EEP_OK);
    assert_int_equal(eep_ref_combine(&w.s, w.in, w.recv, (const uint16_t *const *)y, out2), EEP_OK);
    for (r = 0; r < w.s.world; r++) {
        assert_memory_equal(out[r], out2[r],
                            (size_t)w.in[r].num_tokens * (size_t)w.s.hidden * sizeof(uint16_t));
        for (t = 0; t < w.in[r].num_tokens; t++) {
            double wsum = 0.0;

            for (k = 0; k < w.s.num_topk; k++) {
                if (w.in[r].topk_idx[(size_t)t * w.s.num_topk + k] >= 0) {
                    wsum += w.in[r].topk_weights[(size_t)t * w.s.num_topk + k];
                }
            }
            for (h = 0; h < w.s.hidden; h++) {
                const uint16_t *xs  = (const uint16_t *)w.in[r].x;
                double          x   = eep_ref_bf16_to_f32(xs[(size_t)t * w.s.hidden + h]);
                double          got = eep_ref_bf16_to_f32(out[r][(size_t)t * w.s.hidden + h]);

                /* Up to K + 1 bf16 roundings of magnitude <= |x| * wsum. */
                assert_true(fabs(got - x * wsum) <= fabs(x) * wsum * (w.s.num_topk + 1) * 0x1p-8);
            }
        }
    }
    free_rows(y, w.s.world);
    free_rows(out, w.s.world);
    free_rows(out2, w.s.world);
    world_free(&w);
}

/* Order matters: a partial of +big, +1, -big must be summed in lane order, giving 0 in fp32
   with bf16 partials; any other order gives a different bf16 result. */
static void test_combine_order_is_lane_then_rank(void **state)
{
    eep_ep_shape_t  s     = { 2, 1, 8, 3, 4, 1, EEP_DTYPE_BF16, 0, NULL };
    eep_ref_input_t in[2] = { { 0 }, { 0 } };
    eep_ref_recv_t  recv[2];
    uint16_t        x[8] = { 0 }, y0[16], y1[16], o0[8], o1[1];
    uint16_t       *y[2] = { y0, y1 }, *out[2] = { o0, o1 };
    int64_t         idx[3] = { 0, 1, 2 }; /* experts 0, 1 on rank 0; 2 on rank 1 */
    float           wts[3] = { 1.0f, 1.0f, 1.0f };
    int             h;

    (void)state;
    in[0].num_tokens   = 1;
    in[0].x            = (uint8_t *)x;
    in[0].topk_idx     = idx;
    in[0].topk_weights = wts;
    assert_int_equal(eep_ref_dispatch(&s, in, recv, NULL, NULL), EEP_OK);
    assert_int_equal(recv[0].num_rows, 2);
    assert_int_equal(recv[1].num_rows, 1);
    for (h = 0; h < 8; h++) {
        y0[h]     = eep_ref_f32_to_bf16(256.0f); /* expert 0 */
        y0[8 + h] = eep_ref_f32_to_bf16(1.0f);   /* expert 1: lost in a bf16 partial of 257 */
        y1[h]     = eep_ref_f32_to_bf16(-256.0f);
    }
    assert_int_equal(eep_ref_combine(&s, in, recv, (const uint16_t *const *)y, out), EEP_OK);
    /* Rank 0's partial 257 rounds to 256 in bf16; total 256 - 256 = 0. */
    for (h = 0; h < 8; h++) {
        assert_int_equal(o0[h], 0x0000);
    }
    eep_ref_recv_free(&recv[0]);
    eep_ref_recv_free(&recv[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_known_values),
        cmocka_unit_test(test_bf16_round_trip_every_code),
        cmocka_unit_test(test_e4m3_known_values),
        cmocka_unit_test(test_e4m3_round_trip_every_code),
        cmocka_unit_test(test_quantize_row),
        cmocka_unit_test(test_generator_is_deterministic),
        cmocka_unit_test(test_dispatch_invariants),
        cmocka_unit_test(test_special_cases),
        cmocka_unit_test(test_bad_expert_ids),
        cmocka_unit_test(test_degrade),
        cmocka_unit_test(test_degrade_forwarding),
        cmocka_unit_test(test_combine_constant_outputs),
        cmocka_unit_test(test_combine_identity_experts),
        cmocka_unit_test(test_combine_order_is_lane_then_rank),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
