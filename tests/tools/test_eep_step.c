/*
 * test_eep_step.c - the checker of eep-rank's MoE step (tools/eep_step.c) on the CPU: the shape
 * checks, bf16 rounding, the seeded routing (distinct, in range, reproducible, changing per step),
 * conservation of rows over the world, and the expected combine output against a whole step
 * simulated here (every rank's expected receive layout, the stand-in expert on it, rows routed
 * back to their sources and summed in eep/ep.h's order), for 4 and 3 ranks (a shrink) and 12
 * experts, and (issue 24: placement as data) 5 and 7 ranks with 12 and 256 experts under the
 * default policy and a permuted placement; a single corrupted value is found at its index.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tools/eep_step.h"
#include "util/log.h"

static eep_step_shape_t shape(int world, int rank, uint64_t step)
{
    eep_step_shape_t s;

    memset(&s, 0, sizeof(s));
    s.world   = world;
    s.rank    = rank;
    s.tokens  = 24;
    s.hidden  = 16;
    s.topk    = 3;
    s.experts = 12;
    s.seed    = 42;
    s.step    = step;
    return s;
}

static void test_shape_check(void **state)
{
    eep_step_shape_t s = shape(4, 0, 1);

    (void)state;
    assert_int_equal(eep_step_shape_check(&s), EEP_OK);
    assert_int_equal(eep_step_shape_check(NULL), EEP_ERR_INVALID_ARG);
    s.experts = 10; /* not a multiple of 4: the default's 3, 3, 2, 2 */
    assert_int_equal(eep_step_shape_check(&s), EEP_OK);
    s.experts = 0;
    assert_int_equal(eep_step_shape_check(&s), EEP_ERR_INVALID_ARG);
    {
        eep_expert_place_t pl[12];

        s = shape(4, 0, 1);
        assert_int_equal(eep_placement_default(12, 4, pl), EEP_OK);
        s.placement = pl;
        assert_int_equal(eep_step_shape_check(&s), EEP_OK);
        pl[3].slot = 0; /* expert 3 in expert 0's slot */
        pl[3].rank = 0;
        assert_int_equal(eep_step_shape_check(&s), EEP_ERR_INVALID_ARG);
    }
    s = shape(4, 4, 1);
    assert_int_equal(eep_step_shape_check(&s), EEP_ERR_INVALID_ARG);
    s      = shape(4, 0, 1);
    s.topk = 13;
    assert_int_equal(eep_step_shape_check(&s), EEP_ERR_INVALID_ARG);
    s        = shape(4, 0, 1);
    s.hidden = 12;
    assert_int_equal(eep_step_shape_check(&s), EEP_ERR_INVALID_ARG);
}

/* eep-rank sizes its buffers once for every world a view can have (the old sizing asked for world
   8, which 12 experts do not divide, and eep-rank exited at start). */
static void test_rows_max(void **state)
{
    int w, r;

    (void)state;
    assert_int_equal(eep_step_rows_max(64, 2, 12, 6), 6 * 64 * 2); /* world 6, 2 experts each */
    assert_int_equal(eep_step_rows_max(24, 3, 12, 4), 4 * 24 * 3);
    assert_int_equal(eep_step_rows_max(24, 3, 7, 8), 6 * 24 * 2); /* world 6: 2, 1, 1, 1, 1, 1 */
    /* every world now (issue 24): 12 experts on 5 ranks are 3, 3, 2, 2, 2: 5 ranks' tokens x 3 */
    assert_int_equal(eep_step_rows_max(24, 3, 12, 5), 5 * 24 * 3);
    assert_int_equal(eep_step_rows_max(64, 2, 12, 8), 8 * 64 * 2);
    assert_int_equal(eep_step_rows_max(0, 3, 12, 8), -1);
    assert_int_equal(eep_step_rows_max(24, 3, 12, 0), -1);
    for (w = 1; w <= 8; w++) {
        for (r = 0; r < w; r++) {
            eep_step_shape_t s = shape(w, r, 3);
            int32_t          c[12];

            assert_true(eep_step_expected_recv(&s, c, NULL) <= eep_step_rows_max(24, 3, 12, 8));
        }
    }
}

static void test_bf16(void **state)
{
    (void)state;
    assert_int_equal(eep_step_bf16(1.0f), 0x3f80);
    assert_int_equal(eep_step_bf16(-0.5f), 0xbf00);
    /* 1 + 2^-8 is a tie: to even (0x3f80); 1 + 3 * 2^-8 rounds up to 0x3f82 */
    assert_int_equal(eep_step_bf16(1.00390625f), 0x3f80);
    assert_int_equal(eep_step_bf16(1.01171875f), 0x3f82);
    assert_true(eep_step_f32(eep_step_bf16(0.375f)) == 0.375f);
}

static void test_routing(void **state)
{
    eep_step_shape_t s = shape(4, 0, 7);
    int64_t          a[24 * 3], b[24 * 3];
    float            wa[24 * 3], wb[24 * 3];
    int              t, k, j, differ = 0;

    (void)state;
    eep_step_routing(&s, 2, a, wa);
    eep_step_routing(&s, 2, b, wb);
    assert_memory_equal(a, b, sizeof(a));
    for (t = 0; t < 24; t++) {
        for (k = 0; k < 3; k++) {
            assert_true(a[t * 3 + k] >= 0 && a[t * 3 + k] < 12);
            assert_true(wa[t * 3 + k] >= 0.25f && wa[t * 3 + k] <= 1.0f);
            for (j = 0; j < k; j++) {
                assert_true(a[t * 3 + j] != a[t * 3 + k]);
            }
        }
    }
    s.step = 8;
    eep_step_routing(&s, 2, b, wb);
    for (t = 0; t < 24 * 3; t++) {
        differ += a[t] != b[t];
    }
    assert_true(differ > 10);
}

/* A whole step simulated on the CPU for @p world ranks and @p E experts placed by @p pl (NULL:
   the default): compare with eep_step_expected_out. */
static void simulate_placed(int world, uint64_t step, int E, const eep_expert_place_t *pl)
{
    const int H = 16, T = 24, K = 3;
    int32_t  *counts = malloc(sizeof(int32_t) * (size_t)E), *ids = malloc(sizeof(int32_t) * E);
    uint16_t *rows[8], *y[8], *want, *x;
    int64_t   total[8], n_all = 0, *idx;
    float    *w, *partial;
    int       r, src, t, k, h, e, el, held = 0;

    idx     = malloc(sizeof(int64_t) * T * K);
    w       = malloc(sizeof(float) * T * K);
    x       = malloc(2 * T * H);
    want    = malloc(2 * T * H);
    partial = malloc(sizeof(float) * (size_t)world * T * H);
    for (r = 0; r < world; r++) {
        eep_step_shape_t s = shape(world, r, step);

        s.experts   = E;
        s.placement = pl;
        assert_int_equal(eep_step_shape_check(&s), EEP_OK);
        held += eep_step_local_experts(&s, NULL);
        rows[r]  = malloc(2 * (size_t)world * T * K * H);
        y[r]     = malloc(2 * (size_t)world * T * K * H);
        total[r] = eep_step_expected_recv(&s, counts, rows[r]);
        assert_true(total[r] >= 0);
        eep_step_expert_apply(&s, counts, rows[r], y[r]);
        n_all += total[r];
    }
    assert_int_equal(n_all, (int64_t)world * T * K); /* every lane lands exactly once */
    assert_int_equal(held, E);                       /* every expert held once */
    for (src = 0; src < world; src++) {
        eep_step_shape_t s = shape(world, src, step);

        s.experts   = E;
        s.placement = pl;
        memset(partial, 0, sizeof(float) * (size_t)world * T * H);
        eep_step_routing(&s, src, idx, w);
        /* Walk every destination's layout in order to find the row of (src, t, expert). */
        for (r = 0; r < world; r++) {
            int64_t          row = 0;
            eep_step_shape_t d   = shape(world, r, step);

            d.experts   = E;
            d.placement = pl;
            el          = eep_step_local_experts(&d, ids);
            for (e = 0; e < el; e++) {
                for (int s2 = 0; s2 < world; s2++) {
                    eep_step_shape_t o = shape(world, s2, step);
                    int64_t          oi[24 * 3];
                    float            ow[24 * 3];

                    o.experts   = E;
                    o.placement = pl;
                    eep_step_routing(&o, s2, oi, ow);
                    for (t = 0; t < T; t++) {
                        for (k = 0; k < K; k++) {
                            if (oi[t * K + k] != ids[e]) {
                                continue;
                            }
                            if (s2 == src) {
                                for (h = 0; h < H; h++) {
                                    float *p = &partial[((size_t)r * T + t) * H + h];

                                    *p = w[t * K + k] * eep_step_f32(y[r][(size_t)row * H + h]) +
                                         *p;
                                }
                            }
                            row++;
                        }
                    }
                }
            }
            assert_int_equal(row, total[r]);
        }
        for (t = 0; t < T; t++) {
            for (h = 0; h < H; h++) {
                float sum = 0.0f;

                for (r = 0; r < world; r++) {
                    sum += eep_step_f32(eep_step_bf16(partial[((size_t)r * T + t) * H + h]));
                }
                x[t * H + h] = eep_step_bf16(sum);
            }
        }
        assert_int_equal(eep_step_expected_out(&s, want), EEP_OK);
        assert_int_equal(eep_step_compare(x, want, (int64_t)T * H), -1);
        /* the checker has teeth: one value off is found where it is */
        x[5 * H + 3] ^= 1;
        assert_int_equal(eep_step_compare(x, want, (int64_t)T * H), 5 * H + 3);
    }
    for (r = 0; r < world; r++) {
        free(rows[r]);
        free(y[r]);
    }
    free(idx);
    free(w);
    free(x);
    free(want);
    free(partial);
    free(counts);
    free(ids);
}

static void simulate(int world, uint64_t step)
{
    simulate_placed(world, step, 12, NULL);
}

static void test_step_four_ranks(void **state)
{
    (void)state;
    simulate(4, 1);
    simulate(4, 2);
}

static void test_step_three_ranks(void **state)
{
    (void)state;
    simulate(3, 9);
}

/* Issue 24: the worlds a shrink from 8 makes, where the experts do not divide (12 on 5: 3, 3, 2,
   2, 2; 256 on 7: 37/36), a permuted placement, and the local experts a view reports checked
   slot by slot. */
static void test_step_uneven(void **state)
{
    eep_expert_place_t pl[256];
    eep_step_shape_t   s;
    int32_t            ids[256];
    uint64_t           st = 7;
    int                e;

    (void)state;
    simulate_placed(5, 4, 12, NULL);
    simulate_placed(7, 5, 12, NULL);
    simulate_placed(7, 6, 256, NULL);
    simulate_placed(5, 7, 256, NULL);
    /* the default's counts, experts shuffled */
    assert_int_equal(eep_placement_default(256, 7, pl), EEP_OK);
    for (e = 255; e > 0; e--) {
        int j = (int)((st = st * 6364136223846793005ull + 1442695040888963407ull) >> 33) % (e + 1);
        eep_expert_place_t tmp = pl[e];

        pl[e] = pl[j];
        pl[j] = tmp;
    }
    simulate_placed(7, 8, 256, pl);
    s           = shape(7, 3, 1);
    s.experts   = 256;
    s.placement = NULL;
    assert_int_equal(eep_step_local_experts(&s, ids), 37); /* rank 3: experts 110..146 */
    assert_int_equal(ids[0], 110);
    assert_true(eep_step_local_match(&s, ids, 37));
    assert_false(eep_step_local_match(&s, ids, 36));
    ids[5]++;
    assert_false(eep_step_local_match(&s, ids, 37));
    s.placement = pl;
    assert_int_equal(eep_step_local_experts(&s, ids), 37);
    assert_true(eep_step_local_match(&s, ids, 37));
    s.placement = NULL; /* the view's (permuted) experts are not the default's */
    assert_false(eep_step_local_match(&s, ids, 37));
}

/*
 * Rank-major (eep-rank --layout rank): every rank's expected rows (one per received token, sources
 * then tokens, local slots and weights beside), the caller's sum over its local experts on them,
 * and the combine that adds one row a rank (sources' tokens found through src_rows) give
 * eep_step_expected_out bit for bit, as the expert-major step does; the counts are expert-major's;
 * data_salt changes the data, not the routing; a slot this rank does not hold poisons y.
 */
/* The rank of expert @p e: the placement's, else the default policy's block (eep_step.c). */
static int owner(int world, int E, const eep_expert_place_t *pl, int64_t e)
{
    return pl != NULL ? pl[e].rank : (int)((e * world) / E);
}

static void simulate_ranked(int world, uint64_t step, int E, const eep_expert_place_t *pl)
{
    const int T = 24, H = 16, K    = 3;
    uint16_t *rows[8], *y[8], *got = malloc(2 * (size_t)T * H), *want = malloc(2 * (size_t)T * H);
    int32_t  *ridx[8], src_rows[8][9], counts[256], counts_em[256];
    float    *rw[8];
    int64_t   total[8], idx[24 * 3];
    float     w[24 * 3];
    int       r, src, t, h, k;

    assert_true(world <= 8);
    for (r = 0; r < world; r++) {
        eep_step_shape_t s        = shape(world, r, step);
        int64_t          n_tokens = 0;

        s.experts   = E;
        s.placement = pl;
        rows[r]     = malloc(2 * (size_t)world * T * H);
        y[r]        = malloc(2 * (size_t)world * T * H);
        ridx[r]     = malloc(4 * (size_t)world * T * K);
        rw[r]       = malloc(4 * (size_t)world * T * K);
        total[r] = eep_step_expected_recv_ranked(&s, counts, src_rows[r], rows[r], ridx[r], rw[r]);
        assert_true(total[r] >= 0);
        /* without rows: the same count; the counts are expert-major's (alignment 1) */
        assert_int_equal(eep_step_expected_recv_ranked(&s, counts_em, NULL, NULL, NULL, NULL),
                         total[r]);
        assert_true(eep_step_expected_recv(&s, counts_em, NULL) >= total[r]);
        assert_memory_equal(counts, counts_em, sizeof(int32_t) * eep_step_local_experts(&s, NULL));
        /* one row per (source, token) with a lane here */
        for (src = 0; src < world; src++) {
            eep_step_routing(&s, src, idx, w);
            assert_int_equal(src_rows[r][src], n_tokens);
            for (t = 0; t < T; t++) {
                int here = 0;

                for (k = 0; k < K; k++) {
                    here |= owner(world, E, pl, idx[t * K + k]) == r;
                }
                n_tokens += here;
            }
        }
        assert_int_equal(src_rows[r][world], n_tokens);
        assert_int_equal(total[r], n_tokens);
        eep_step_expert_apply_ranked(&s, total[r], ridx[r], rw[r], rows[r], y[r]);
    }
    for (src = 0; src < world; src++) {
        eep_step_shape_t s = shape(world, src, step);
        int64_t          next[8];

        s.experts   = E;
        s.placement = pl;
        eep_step_routing(&s, src, idx, w);
        for (r = 0; r < world; r++) {
            next[r] = src_rows[r][src];
        }
        for (t = 0; t < T; t++) {
            int64_t row[8];

            for (r = 0; r < world; r++) { /* rank r received t when one of its lanes is there */
                int here = 0;

                for (k = 0; k < K; k++) {
                    here |= owner(world, E, pl, idx[t * K + k]) == r;
                }
                row[r] = here ? next[r]++ : -1;
            }
            for (h = 0; h < H; h++) {
                float sum = 0.0f;

                for (r = 0; r < world; r++) {
                    if (row[r] >= 0) {
                        sum += eep_step_f32(y[r][(size_t)row[r] * H + h]);
                    }
                }
                got[t * H + h] = eep_step_bf16(sum);
            }
        }
        for (r = 0; r < world; r++) {
            assert_int_equal(next[r], src_rows[r][src + 1]);
        }
        assert_int_equal(eep_step_expected_out(&s, want), EEP_OK);
        assert_int_equal(eep_step_compare(got, want, (int64_t)T * H), -1);
    }
    for (r = 0; r < world; r++) {
        free(rows[r]);
        free(y[r]);
        free(ridx[r]);
        free(rw[r]);
    }
    free(got);
    free(want);
}

static void test_step_rank_major(void **state)
{
    eep_expert_place_t pl[12];
    eep_step_shape_t   s = shape(3, 1, 4), o;
    uint16_t          *a = malloc(2 * 3 * 24 * 16), *b = malloc(2 * 3 * 24 * 16), y[16];
    int32_t           *ia = malloc(4 * 3 * 24 * 3), *ib = malloc(4 * 3 * 24 * 3), counts[12];
    float             *wa = malloc(4 * 3 * 24 * 3), *wb = malloc(4 * 3 * 24 * 3);
    int64_t            n;
    int                e;

    (void)state;
    simulate_ranked(4, 1, 12, NULL);
    simulate_ranked(3, 2, 12, NULL);
    simulate_ranked(1, 3, 12, NULL); /* a survivor alone: every token, every lane here */
    simulate_ranked(5, 4, 12, NULL);
    assert_int_equal(eep_placement_default(12, 4, pl), EEP_OK);
    for (e = 0; e < 12; e++) { /* experts dealt round-robin: rank e % 4, slot e / 4 */
        pl[e].rank = e % 4;
        pl[e].slot = e / 4;
    }
    simulate_ranked(4, 5, 12, pl);
    /* data_salt: the same rows, lanes and weights, other data */
    n           = eep_step_expected_recv_ranked(&s, counts, NULL, a, ia, wa);
    o           = s;
    o.data_salt = 1;
    assert_int_equal(eep_step_expected_recv_ranked(&o, counts, NULL, b, ib, wb), n);
    assert_true(n > 0);
    assert_memory_equal(ia, ib, 4 * (size_t)n * 3);
    assert_memory_equal(wa, wb, 4 * (size_t)n * 3);
    assert_true(eep_step_compare(a, b, n * 16) >= 0);
    /* a slot past this rank's experts: the row is poisoned, not summed */
    ia[0] = 4;
    eep_step_expert_apply_ranked(&s, 1, ia, wa, a, y);
    assert_int_equal(y[0], 0x7fc0);
    free(a);
    free(b);
    free(ia);
    free(ib);
    free(wa);
    free(wb);
}

static void test_expected_out_nonzero(void **state)
{
    eep_step_shape_t s = shape(4, 1, 3);
    uint16_t         out[24 * 16];
    int              i, nonzero = 0;

    (void)state;
    assert_int_equal(eep_step_expected_out(&s, out), EEP_OK);
    for (i = 0; i < 24 * 16; i++) {
        nonzero += out[i] != 0 && out[i] != 0x8000;
    }
    assert_true(nonzero > 24 * 16 / 2); /* never tested on zeros */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shape_check),     cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_rows_max),        cmocka_unit_test(test_routing),
        cmocka_unit_test(test_step_four_ranks), cmocka_unit_test(test_step_three_ranks),
        cmocka_unit_test(test_step_uneven),     cmocka_unit_test(test_expected_out_nonzero),
        cmocka_unit_test(test_step_rank_major),
    };

    eep_log_set_level(EEP_LOG_LEVEL_NONE);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
