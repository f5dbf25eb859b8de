/*
 * test_ep_layout.c - layout arithmetic of dispatch/combine: shape rules, wire record, worst-case
 * rows (reached exactly by a constructed input), buffer sizes and the SM model.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "elastic/ep/ep_knobs.h"
#include "elastic/ep/ep_kernels.h"
#include "elastic/ep/ep_layout.h"
#include "elastic/ep/ep_sm_model.h"
#include "kernels/ep/ep_params.h"
#include "tests/common/ep_reference.h"

static eep_ep_shape_t shape(int world, int T, int H, int K, int E, int align, eep_dtype_t dt)
{
    eep_ep_shape_t s = {
        .world       = world,
        .max_tokens  = T,
        .hidden      = H,
        .num_topk    = K,
        .num_experts = E,
        .alignment   = align,
        .dtype       = dt,
    };

    return s;
}

/* The product's shape is valid at every rank count a shrink of 8 leaves with 256 experts, and is
   the one RESULTS.md's tables name. */
static void test_product_shape(void **state)
{
    const char *why = NULL;

    (void)state;
    for (int w = 1; w <= 8; w *= 2) {
        const eep_ep_shape_t s = eep_ep_shape_product(w);

        assert_int_equal(s.world, w);
        assert_int_equal(s.max_tokens, 4096);
        assert_int_equal(s.hidden, 7168);
        assert_int_equal(s.num_topk, 8);
        assert_int_equal(s.num_experts, 256);
        assert_int_equal(s.alignment, 128);
        assert_int_equal(s.dtype, EEP_DTYPE_BF16);
        assert_int_equal(eep_ep_shape_check(&s, &why), EEP_OK);
    }
}

static void test_shape_check(void **state)
{
    static const struct {
        eep_ep_shape_t s;
        const char    *why;
    } bad[] = {
        { { 0, 16, 2048, 8, 256, 128, EEP_DTYPE_BF16, 0, NULL }, "world" },
        { { 8, 0, 2048, 8, 256, 128, EEP_DTYPE_BF16, 0, NULL }, "max_tokens_per_rank" },
        { { 8, 16, 100, 8, 256, 128, EEP_DTYPE_BF16, 0, NULL }, "hidden" },
        { { 8, 16, 2064, 8, 256, 128, EEP_DTYPE_FP8_E4M3, 0, NULL }, "hidden" },
        { { 8, 16, 2048, 0, 256, 128, EEP_DTYPE_BF16, 0, NULL }, "num_topk" },
        { { 8, 16, 2048, 33, 256, 128, EEP_DTYPE_BF16, 0, NULL }, "num_topk" },
        { { 8, 16, 2048, 8, 2049, 128, EEP_DTYPE_BF16, 0, NULL }, "num_experts" },
        { { 8, 16, 2048, 8, 7, 128, EEP_DTYPE_BF16, 0, NULL }, "num_experts" },   /* K > E */
        { { 1, 16, 2048, 8, 512, 128, EEP_DTYPE_BF16, 0, NULL }, "num_experts" }, /* El > 256 */
        { { 8, 16, 2048, 8, 256, 0, EEP_DTYPE_BF16, 0, NULL }, "expert_alignment" },
        { { 8, 16, 2048, 8, 256, 48, EEP_DTYPE_BF16, 0, NULL }, "expert_alignment" },
        { { 8, 16, 2048, 8, 256, 128, (eep_dtype_t)5, 0, NULL }, "dtype" },
        { { 1024, 1 << 20, 2048, 8, 2048, 1, EEP_DTYPE_BF16, 0, NULL }, "max_tokens_per_rank" },
    };
    size_t         i;
    eep_ep_shape_t ok = shape(8, 4096, 7168, 8, 256, 128, EEP_DTYPE_FP8_E4M3);
    const char    *why;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why = NULL;
        assert_int_equal(eep_ep_shape_check(&bad[i].s, &why), EEP_ERR_INVALID_ARG);
        assert_non_null(why);
        assert_string_equal(why, bad[i].why);
    }
    assert_int_equal(eep_ep_shape_check(&ok, NULL), EEP_OK);
}

static void test_wire_layout(void **state)
{
    eep_ep_shape_t s = shape(8, 4096, 7168, 8, 256, 128, EEP_DTYPE_BF16);
    eep_ep_wire_t  w;

    (void)state;
    eep_ep_wire_layout(&s, &w);
    assert_int_equal(w.hidden_bytes, 14336);
    assert_int_equal(w.scale_bytes, 0);
    assert_int_equal(w.scale_off, 14336);
    assert_int_equal(w.meta_off, 14336);
    assert_int_equal(w.meta_bytes, 8 * 12 + 4 + 4 + 8);
    assert_int_equal(w.tag_off, 14336 + 104);
    assert_int_equal(w.tag_off % 8, 0);
    assert_int_equal(w.token_bytes, 14336 + 128);
    s.dtype = EEP_DTYPE_FP8_E4M3;
    eep_ep_wire_layout(&s, &w);
    assert_int_equal(w.hidden_bytes, 7168);
    assert_int_equal(w.scale_bytes, 56 * 4);
    assert_int_equal(w.meta_off, 7168 + 224);
    assert_int_equal(w.token_bytes, 7168 + 224 + 128);
    assert_int_equal(w.token_bytes % EEP_EP_WIRE_ALIGN, 0);
    s = shape(2, 1, 2056, 1, 2, 1, EEP_DTYPE_BF16); /* 4112 hidden bytes: padded to 4128 */
    eep_ep_wire_layout(&s, &w);
    assert_int_equal(w.meta_off, 4128);
    assert_int_equal(w.token_bytes, 4128 + 32);
}

static void test_offsets(void **state)
{
    const int32_t counts[5] = { 0, 1, 128, 129, 7 };
    int64_t       off[6];

    (void)state;
    assert_int_equal(eep_ep_expert_offsets(counts, 5, 128, off), 0 + 128 + 128 + 256 + 128);
    assert_int_equal(off[0], 0);
    assert_int_equal(off[1], 0);
    assert_int_equal(off[2], 128);
    assert_int_equal(off[3], 256);
    assert_int_equal(off[4], 512);
    assert_int_equal(eep_ep_expert_offsets(counts, 5, 1, off), 265);
    assert_int_equal(eep_ep_align_up(0, 4), 0);
    assert_int_equal(eep_ep_align_up(5, 4), 8);
}

/* rows_max is an upper bound for any input and is reached by a constructed one. */
static void test_rows_max_is_tight(void **state)
{
    /* world 1, El = 4 = K, T = 5, alignment 4: every token hits every expert, 5 rows each, each
       padded to 8: 32 rows = (1 * 5 * 4 + 4 * 3) / 4 * 4. */
    eep_ep_shape_t  s = shape(1, 5, 64, 4, 4, 4, EEP_DTYPE_BF16);
    eep_ref_gen_t   gen;
    eep_ref_input_t in;
    eep_ref_recv_t  recv;
    int             t, k;

    (void)state;
    assert_int_equal(eep_ep_rows_max(&s), 32);
    assert_int_equal(eep_ep_recv_rows_max(1, 5, 4, 4, 4), 32);
    eep_ref_gen_init(&gen, 1);
    assert_int_equal(eep_ref_input_generate(&s, &gen, 0, &in), EEP_OK);
    for (t = 0; t < 5; t++) {
        for (k = 0; k < 4; k++) {
            in.topk_idx[t * 4 + k] = k;
        }
    }
    assert_int_equal(eep_ref_dispatch(&s, &in, &recv, NULL, NULL), EEP_OK);
    assert_int_equal(recv.num_rows, 32);
    eep_ref_recv_free(&recv);
    eep_ref_input_free(&in);
    /* 4 experts on 3 ranks (issue 24): the default's 2, 1, 1; rows of the rank with 2 */
    assert_int_equal(eep_ep_recv_rows_max(3, 5, 4, 4, 4), (3 * 5 * 2 + 2 * 3) / 4 * 4);
    /* Bad shapes. */
    assert_int_equal(eep_ep_recv_rows_max(3, 5, 4, 0, 4), -1);
    assert_int_equal(eep_ep_recv_rows_max(1, 5, 4, 4, 3), -1);
    /* K above El: a token can only hit El experts of one rank. */
    assert_int_equal(eep_ep_recv_rows_max(8, 10, 8, 16, 1), 8 * 10 * 2);
}

static void test_buffer_sizes(void **state)
{
    eep_ep_shape_t        s = shape(8, 4096, 7168, 8, 256, 128, EEP_DTYPE_BF16);
    eep_ep_buffer_sizes_t z;
    eep_ep_wire_t         w;

    (void)state;
    assert_int_equal(eep_ep_buffer_sizes(&s, &z), EEP_OK);
    eep_ep_wire_layout(&s, &w);
    /* (2 + 32) words of 8 bytes = 272, padded to 384. */
    assert_int_equal(z.count_slot_bytes, 384);
    assert_int_equal(z.counts_bytes, 8 * 2 * 384);
    assert_int_equal(z.dispatch_recv_bytes, (size_t)2 * 8 * 4096 * w.token_bytes);
    assert_int_equal(z.combine_recv_bytes, (size_t)2 * 8 * 4096 * (7168 * 2 + 16));
    assert_true(z.counts_off < z.allocator_off);
    assert_true(z.allocator_off < z.dispatch_recv_off);
    assert_true(z.dispatch_recv_off + z.dispatch_recv_bytes <= z.combine_recv_off);
    assert_true(z.combine_recv_off + z.combine_recv_bytes <= z.total_bytes);
    assert_int_equal(z.total_bytes % (2u << 20), 0);
    assert_int_equal(z.dispatch_recv_off % 256, 0);
    assert_int_equal(z.combine_recv_off % 256, 0);
    /* Fewer regions than ranks when K < world. */
    s.num_topk = 2;
    assert_int_equal(eep_ep_buffer_sizes(&s, &z), EEP_OK);
    assert_int_equal(z.combine_recv_bytes, (size_t)2 * 2 * 4096 * (7168 * 2 + 16));
    s.alignment = 3;
    assert_int_equal(eep_ep_buffer_sizes(&s, &z), EEP_ERR_INVALID_ARG);
}

/* Small buffers carry the combine's partials (up to EEP_EP_COMBINE_LINES_MAX_TOKENS) and the
   dispatch records' hidden bytes (up to EEP_EP_DISPATCH_LINES_MAX_TOKENS) as flagged 128-byte
   lines (7 x 16 bytes of data each), larger ones as plain rows with a 16-byte tag; the JIT
   compiles the ones in use. */
static void test_combine_lines(void **state)
{
    eep_ep_shape_t s = shape(2, EEP_EP_COMBINE_LINES_MAX_TOKENS, 7168, 8, 256, 1, EEP_DTYPE_BF16);
    eep_ep_buffer_sizes_t z;
    eep_ep_wire_t         w;
    eep_ep_kernel_names_t names;
    eep_jit_spec_t        spec;

    (void)state;
    assert_int_equal(eep_ep_lines(&s), EEP_EPK_LINES_DISPATCH | EEP_EPK_LINES_COMBINE);
    assert_int_equal(eep_ep_buffer_sizes(&s, &z), EEP_OK);
    assert_int_equal(z.combine_row_bytes, 128 * 128); /* 14336 bytes of data = 128 lines */
    /* the dispatch's records: hidden bytes as lines, the record whole lines; the wire layout
       (the NCCL baseline's) stays plain */
    eep_ep_record_layout(&s, &w);
    assert_int_equal(w.scale_off, 128 * 128);
    assert_int_equal(w.meta_off, 128 * 128);
    assert_int_equal(w.tag_off, 128 * 128 + 104);
    assert_int_equal(w.token_bytes, 129 * 128);
    assert_int_equal(z.dispatch_recv_bytes, (size_t)2 * 2 * s.max_tokens * w.token_bytes);
    eep_ep_wire_layout(&s, &w);
    assert_int_equal(w.scale_off, 14336);
    s.dtype = EEP_DTYPE_FP8_E4M3; /* 7168 bytes: 64 lines, then 224 bytes of scales */
    eep_ep_record_layout(&s, &w);
    assert_int_equal(w.scale_off, 64 * 128);
    assert_int_equal(w.meta_off, 64 * 128 + 224);
    assert_int_equal(w.token_bytes, 67 * 128);
    s.dtype = EEP_DTYPE_BF16;
    eep_ep_kernel_spec(1, 32, 0, 0, &s, &names, &spec);
    assert_non_null(strstr(spec.defines, "EEP_EPK_FIXED_LINES=3"));
    s.hidden = 2048; /* 4096 bytes: 36 lines and 64 bytes, so 37 */
    assert_int_equal(eep_ep_buffer_sizes(&s, &z), EEP_OK);
    assert_int_equal(z.combine_row_bytes, 37 * 128);
    /* past the combine's threshold: plain combine rows, dispatch records still lines */
    s.max_tokens = EEP_EP_COMBINE_LINES_MAX_TOKENS + 1;
    assert_int_equal(eep_ep_lines(&s), EEP_EPK_LINES_DISPATCH);
    assert_int_equal(eep_ep_buffer_sizes(&s, &z), EEP_OK);
    assert_int_equal(z.combine_row_bytes, 2048 * 2 + 16);
    eep_ep_record_layout(&s, &w);
    assert_int_equal(w.scale_off, 37 * 128);
    eep_ep_kernel_spec(1, 32, 0, 0, &s, &names, &spec);
    assert_non_null(strstr(spec.defines, "EEP_EPK_FIXED_LINES=1"));
    s.max_tokens = EEP_EP_DISPATCH_LINES_MAX_TOKENS;
    assert_int_equal(eep_ep_lines(&s), EEP_EPK_LINES_DISPATCH);
    /* past both: plain records and rows */
    s.max_tokens = EEP_EP_DISPATCH_LINES_MAX_TOKENS + 1;
    assert_int_equal(eep_ep_lines(&s), 0);
    eep_ep_record_layout(&s, &w);
    assert_int_equal(w.scale_off, 2048 * 2);
    eep_ep_kernel_spec(1, 32, 0, 0, &s, &names, &spec);
    assert_non_null(strstr(spec.defines, "EEP_EPK_FIXED_LINES=0"));
    /* the combine's one-row path: only in the variant asked for (rank-major, unweighted), never
       in the top-k gradient kernel nor the dispatch */
    assert_null(strstr(spec.defines, "EEP_EPK_ONE_ROW"));
    eep_ep_kernel_spec(EEP_EP_KERNEL_COMBINE, 32, EEP_EP_COMBINE_ONE_ROW, 0, &s, &names, &spec);
    assert_non_null(strstr(spec.defines, "EEP_EPK_ONE_ROW=1"));
    eep_ep_kernel_spec(EEP_EP_KERNEL_TOPK_GRAD, 32, EEP_EP_COMBINE_ONE_ROW, 0, &s, &names, &spec);
    assert_null(strstr(spec.defines, "EEP_EPK_ONE_ROW"));
    eep_ep_kernel_spec(EEP_EP_KERNEL_DISPATCH, 32, 1, 0, &s, &names, &spec);
    assert_null(strstr(spec.defines, "EEP_EPK_ONE_ROW"));
}

/* One runtime keeps one layout (elastic/ep/ep.c refuses a call whose layout differs): the same
   shape and a shape differing only in what the window does not hold (the alignment) share it;
   other token counts, widths, top-k, dtypes or the combine's row format do not. */
static void test_layout_equal(void **state)
{
    const eep_ep_shape_t s = shape(2, 128, 7168, 8, 256, 1, EEP_DTYPE_BF16);
    eep_ep_shape_t       t = s, other[6];
    size_t               i;

    (void)state;
    assert_int_equal(eep_ep_layout_equal(&s, &t), 1);
    t.alignment = 128;
    assert_int_equal(eep_ep_layout_equal(&s, &t), 1);
    for (i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
        other[i] = s;
    }
    other[0].max_tokens  = 4096;
    other[1].hidden      = 4096;
    other[2].num_topk    = 6;
    other[3].dtype       = EEP_DTYPE_FP8_E4M3;
    other[4].num_experts = 128; /* 64 local experts instead of 128: smaller count slots */
    other[5].hidden      = 0;   /* a bad shape never matches */
    for (i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
        assert_int_equal(eep_ep_layout_equal(&s, &other[i]), 0);
    }
}

static void test_expected_groups(void **state)
{
    (void)state;
    assert_true(fabs(eep_ep_expected_groups(256, 8, 1) - 1.0) < 1e-12);
    assert_true(fabs(eep_ep_expected_groups(256, 8, 256) - 8.0) < 1e-9);
    assert_true(fabs(eep_ep_expected_groups(256, 1, 8) - 1.0) < 1e-12);
    /* 8 ranks, K = 8 of 256: 8 * (1 - C(224, 8) / C(256, 8)) ~ 5.3 */
    assert_true(eep_ep_expected_groups(256, 8, 8) > 5.0);
    assert_true(eep_ep_expected_groups(256, 8, 8) < 5.6);
    /* All experts of one group hit when K exceeds the others. */
    assert_true(fabs(eep_ep_expected_groups(4, 4, 2) - 2.0) < 1e-12);
}

static void test_sm_model(void **state)
{
    eep_ep_sm_model_t    m;
    eep_ep_sm_estimate_t est;
    int                  n, n_more_link, n_small;

    (void)state;
    eep_ep_sm_model_init(&m, 8, 7168, EEP_DTYPE_BF16, 8, 256, 132);
    n = eep_ep_sm_model_run(&m, &est);
    printf("model: world 8 H 7168 bf16 K 8: %d SMs (t %.2f, write %.0f GB/s, per SM %.1f)\n", n,
           est.distinct_ranks, est.write_gbps, est.per_sm_write_gbps);
    assert_int_equal(n, est.num_sms);
    assert_int_equal(n % 2, 0);
    assert_in_range(n, 8, 24);
    /* 430 / (7/8) = 491 GB/s of writes; 14432 B tokens: 50 * 14432 / 15456 = 46.7 GB/s per SM;
       1.25 * 491 / 46.7 = 13.2 -> 14. */
    assert_int_equal(n, 14);
    m.link_gbps = 2 * EEP_EP_DEFAULT_LINK_GBPS;
    n_more_link = eep_ep_sm_model_run(&m, NULL);
    assert_true(n_more_link > n);
    /* Smaller tokens pay more per-token overhead: at least as many SMs. */
    eep_ep_sm_model_init(&m, 8, 2048, EEP_DTYPE_FP8_E4M3, 8, 256, 132);
    n_small = eep_ep_sm_model_run(&m, NULL);
    assert_true(n_small >= n);
    /* Two ranks: half the writes stay local, so the SMs must write twice the link. */
    eep_ep_sm_model_init(&m, 2, 7168, EEP_DTYPE_BF16, 8, 256, 132);
    assert_true(eep_ep_sm_model_run(&m, NULL) > n);
    /* Clamps: at most half the device (the copy blocks are the rest), at least min_sms. */
    m.device_sms = 6;
    assert_int_equal(eep_ep_sm_model_run(&m, NULL), 3);
    m.device_sms = 132;
    m.link_gbps  = 1.0;
    assert_int_equal(eep_ep_sm_model_run(&m, NULL), EEP_EP_MIN_SMS);
    /* One rank: the senders store metadata only; the copy blocks move every byte, so they get
       most of the device (all SMs as senders left one copy block: 13.6 ms at T 4096 on an H200,
       where 16 senders take 244 us). */
    eep_ep_sm_model_init(&m, 1, 7168, EEP_DTYPE_BF16, 8, 256, 132);
    assert_int_equal(eep_ep_sm_model_run(&m, NULL), 132 / EEP_EP_LOCAL_SEND_SHARE);
    assert_true(132 - eep_ep_sm_model_run(&m, NULL) >= 100);
    m.device_sms = 4;
    assert_int_equal(eep_ep_sm_model_run(&m, NULL), 1);
    m.device_sms = 132;
    m.margin     = 0.5;
    assert_int_equal(eep_ep_sm_model_run(&m, NULL), -1);
}

static void test_knobs_table(void **state)
{
    eep_ep_config_t cfg;

    (void)state;
    assert_int_equal(eep_config_load(&eep_ep_knob_table, &cfg), EEP_OK);
    /* The knob defaults equal the model's built-in constants. */
    assert_int_equal(cfg.num_sms, 0);
    assert_true(cfg.sm_read_gbps == EEP_EP_SM_READ_GBPS);
    assert_true(cfg.sm_write_gbps == EEP_EP_SM_WRITE_GBPS);
    assert_true(cfg.sm_margin == EEP_EP_SM_MARGIN);
    assert_true(cfg.token_overhead_bytes == EEP_EP_TOKEN_OVERHEAD_B);
    assert_int_equal(cfg.min_sms, EEP_EP_MIN_SMS);
    assert_int_equal(eep_config_set(&eep_ep_knob_table, &cfg, "EEP_EP_NUM_SMS", "24", 0), EEP_OK);
    assert_int_equal(cfg.num_sms, 24);
    assert_int_equal(eep_config_set(&eep_ep_knob_table, &cfg, "EEP_EP_NUM_SMS", "-1", 0),
                     EEP_ERR_INVALID_ARG);
}

static void test_pick_sms(void **state)
{
    eep_ep_shape_t  s = shape(8, 4096, 7168, 8, 256, 128, EEP_DTYPE_BF16);
    eep_ep_config_t cfg;

    (void)state;
    assert_int_equal(eep_config_load(&eep_ep_knob_table, &cfg), EEP_OK);
    /* Model with the default constants, with or without the knob table. */
    assert_int_equal(eep_ep_pick_sms(NULL, &s, 132, 0.0, 0), 14);
    assert_int_equal(eep_ep_pick_sms(&cfg, &s, 132, 0.0, 0), 14);
    /* The device's link speed feeds the model; the knob overrides it. */
    assert_true(eep_ep_pick_sms(&cfg, &s, 132, 860.0, 0) > 14);
    cfg.link_gbps = 215.0;
    assert_true(eep_ep_pick_sms(&cfg, &s, 132, 860.0, 0) < 14);
    cfg.link_gbps = 0.0;
    cfg.sm_margin = 2.5;
    assert_true(eep_ep_pick_sms(&cfg, &s, 132, 0.0, 0) > 14);
    /* The knob's fixed count beats the model; the call beats the knob; clamped to the device. */
    cfg.num_sms = 20;
    assert_int_equal(eep_ep_pick_sms(&cfg, &s, 132, 0.0, 0), 20);
    assert_int_equal(eep_ep_pick_sms(&cfg, &s, 132, 0.0, 32), 32);
    assert_int_equal(eep_ep_pick_sms(&cfg, &s, 16, 0.0, 32), 16);
    assert_int_equal(eep_ep_pick_sms(&cfg, &s, 0, 0.0, 32), -1);
    s.alignment = 0;
    assert_int_equal(eep_ep_pick_sms(&cfg, &s, 132, 0.0, 0), -1);
    /* One rank through the model: an eighth of the device sends, not all of it. */
    s = shape(1, 4096, 7168, 8, 256, 128, EEP_DTYPE_BF16);
    assert_int_equal(eep_ep_pick_sms(NULL, &s, 132, 0.0, 0), 16);
}

/* The SM budget of a call: send + copy never exceed it, the combine runs on it (issue 27). */
/* Issue 24: the placement of a shape.  The default (NULL) is eep_placement_default's blocks, even
   and arithmetic when the experts divide; eep_ep_shape_place checks a placement, finds its most
   experts a rank and stores the default's as NULL; the kernels' fields and table follow it;
   buffers are sized for the most a rank holds. */
static void test_placement(void **state)
{
    eep_ep_shape_t     s = shape(7, 128, 2048, 8, 256, 128, EEP_DTYPE_BF16);
    eep_expert_place_t pl[256], def[256];
    eep_epk_params_t   p;
    uint32_t           table[256];
    int32_t            ids[256];
    int                e, r, j, n, total = 0;
    static char        win[16]; /* the window address params take (never dereferenced) */

    (void)state;
    assert_int_equal(eep_ep_shape_check(&s, NULL), EEP_OK);
    assert_int_equal(eep_ep_local_experts(&s), 37);
    assert_false(eep_ep_place_even(&s));
    assert_int_equal(eep_placement_default(256, 7, def), EEP_OK);
    for (e = 0; e < 256; e++) {
        eep_ep_expert_place(&s, e, &r, &j);
        assert_int_equal(r, def[e].rank);
        assert_int_equal(j, def[e].slot);
    }
    for (r = 0; r < 7; r++) {
        n = eep_ep_rank_experts(&s, r, ids);
        assert_true(n == 36 || n == 37);
        for (j = 0; j < n; j++) {
            assert_int_equal(def[ids[j]].rank, r);
            assert_int_equal(def[ids[j]].slot, j);
        }
        total += n;
    }
    assert_int_equal(total, 256);
    assert_int_equal(eep_ep_rows_max(&s), eep_ep_recv_rows_max(7, 128, 8, 256, 128));
    assert_int_equal(eep_ep_rows_max(&s), (7 * 128 * 8 + 37 * 127) / 128 * 128);
    /* the default given as data is stored as NULL */
    assert_int_equal(eep_ep_shape_place(&s, def), EEP_OK);
    assert_null(s.placement);
    /* an even one: arithmetic */
    s.world = 8;
    assert_true(eep_ep_place_even(&s));
    assert_int_equal(eep_ep_params_layout(&s, 3, 0, win, &p), EEP_OK);
    assert_true(p.place_even);
    assert_int_equal(p.num_local, 32);
    /* 256 on 8 ranks, rank 5 holding 200 (reversed slots), the others 8 each */
    for (e = 0; e < 256; e++) {
        pl[e].rank = e < 200 ? 5 : (e - 200) / 8 + ((e - 200) / 8 >= 5);
        pl[e].slot = e < 200 ? 199 - e : (e - 200) % 8;
    }
    assert_int_equal(eep_ep_shape_place(&s, pl), EEP_OK);
    assert_ptr_equal(s.placement, pl);
    assert_int_equal(eep_ep_local_experts(&s), 200);
    assert_false(eep_ep_place_even(&s));
    assert_int_equal(eep_ep_shape_check(&s, NULL), EEP_OK);
    assert_int_equal(eep_ep_rows_max(&s), (8 * 128 * 8 + 200 * 127) / 128 * 128);
    assert_int_equal(eep_ep_recv_rows_max_placed(8, 128, 8, 256, 128, pl), eep_ep_rows_max(&s));
    assert_int_equal(eep_ep_rank_experts(&s, 5, ids), 200);
    assert_int_equal(ids[0], 199);
    assert_int_equal(eep_ep_rank_experts(&s, 0, NULL), 8);
    assert_int_equal(eep_ep_params_layout(&s, 5, 0, win, &p), EEP_OK);
    assert_false(p.place_even);
    assert_int_equal(p.num_local, 200);
    assert_int_equal(p.num_local_max, 200);
    {
        eep_ep_buffer_sizes_t z;

        assert_int_equal(eep_ep_buffer_sizes(&s, &z), EEP_OK); /* count slots for 200 */
        assert_int_equal(z.count_slot_bytes, (size_t)((3 + 200) * 8 + 127) / 128 * 128);
    }
    eep_ep_place_table(&s, table);
    assert_int_equal(table[0], (5u << 16) | 199u);
    assert_int_equal(table[255], (7u << 16) | 7u);
    /* a rank without experts: 4 experts on 8 ranks (the default) */
    s = shape(8, 128, 2048, 2, 4, 1, EEP_DTYPE_BF16);
    assert_int_equal(eep_ep_shape_check(&s, NULL), EEP_OK);
    assert_int_equal(eep_ep_rank_experts(&s, 1, NULL), 0);
    assert_int_equal(eep_ep_rank_experts(&s, 0, NULL), 1);
    assert_int_equal(eep_ep_params_layout(&s, 1, 0, win, &p), EEP_OK);
    assert_int_equal(p.num_local, 0);
    /* more than 256 on a rank, and a bad placement */
    s = shape(2, 128, 2048, 8, 300, 1, EEP_DTYPE_BF16);
    for (e = 0; e < 256; e++) {
        pl[e].rank = 0;
        pl[e].slot = e;
    }
    s.num_experts = 256;
    s.world       = 1;
    assert_int_equal(eep_ep_shape_place(&s, pl), EEP_OK);
    assert_null(s.placement); /* one rank: the default */
    s.world    = 2;
    pl[7].rank = 1; /* slot 7 of rank 1, which holds 1 expert */
    assert_int_equal(eep_ep_shape_place(&s, pl), EEP_ERR_INVALID_ARG);
    assert_null(s.placement);
    pl[7].slot = 0;
    assert_int_equal(eep_ep_shape_place(&s, pl), EEP_ERR_INVALID_ARG); /* rank 0: slot 7 missing */
    s.num_experts = 300;
    s.world       = 1;
    assert_int_equal(eep_ep_shape_check(&s, NULL), EEP_ERR_INVALID_ARG); /* 300 on one rank */
}

static void test_plan_sms(void **state)
{
    eep_ep_shape_t   s1 = shape(1, 4096, 7168, 8, 256, 128, EEP_DTYPE_BF16);
    eep_ep_shape_t   s8 = shape(8, 4096, 7168, 8, 256, 128, EEP_DTYPE_BF16);
    eep_ep_config_t  cfg;
    eep_ep_sm_plan_t pl;
    int              b, w;

    (void)state;
    assert_int_equal(eep_config_load(&eep_ep_knob_table, &cfg), EEP_OK);
    /* No budget: today's whole-device plan (the model's senders, the rest copying). */
    assert_int_equal(eep_ep_plan_sms(&cfg, &s1, 132, 0.0, 0, 0, 64, &pl), 0);
    assert_int_equal(pl.send, 16);
    assert_int_equal(pl.copy, 116);
    assert_int_equal(pl.combine, 132);
    assert_int_equal(pl.budget, 0);
    /* Every budget, both worlds, both launch shapes: within it, at least one of each role. */
    for (w = 0; w < 2; w++) {
        for (b = 2; b <= 140; b++) {
            const eep_ep_shape_t *s = w == 0 ? &s1 : &s8;
            int                   B = b > 132 ? 132 : b;

            assert_int_equal(eep_ep_plan_sms(&cfg, s, 132, 0.0, b, 0, 64, &pl), 0);
            assert_int_equal(pl.send + pl.copy, B);
            assert_true(pl.send >= 1 && pl.copy >= 1);
            assert_true(pl.send <= eep_ep_pick_sms(NULL, s, 132, 0.0, 0));
            assert_int_equal(pl.combine, B);
            assert_int_equal(eep_ep_plan_sms(&cfg, s, 132, 0.0, b, 1, 64, &pl), 0);
            assert_true(pl.send >= 1 && pl.send + 1 <= B); /* the senders and the counter */
            assert_true(pl.copy >= 1 && pl.copy <= B);     /* the copy launch, after them */
            assert_int_equal(pl.combine, B);
        }
    }
    /* Hybrid: the last EEP_EP_HYBRID_FREE_SMS SMs stay free at every budget (the transport's). */
    assert_int_equal(eep_ep_plan_sms(&cfg, &s8, 132, 0.0, 0, EEP_EP_PLAN_HYBRID, 64, &pl), 0);
    assert_int_equal(pl.combine, 132 - EEP_EP_HYBRID_FREE_SMS);
    assert_int_equal(pl.send + pl.copy, 132 - EEP_EP_HYBRID_FREE_SMS);
    assert_int_equal(eep_ep_plan_sms(&cfg, &s8, 132, 0.0, 200, EEP_EP_PLAN_HYBRID, 64, &pl), 0);
    assert_int_equal(pl.combine, 132 - EEP_EP_HYBRID_FREE_SMS);
    assert_int_equal(eep_ep_plan_sms(&cfg, &s8, 132, 0.0, 24, EEP_EP_PLAN_HYBRID, 64, &pl), 0);
    assert_int_equal(pl.combine, 24);
    assert_int_equal(eep_ep_usable_sms(132, 0), 132);
    assert_int_equal(eep_ep_usable_sms(4, 1), 4); /* too small a device to leave any */
    /* Rank-major outputs: a quarter of the budget sends (measured best at 24: 6 + 18). */
    assert_int_equal(eep_ep_plan_sms(&cfg, &s1, 132, 0.0, 24, EEP_EP_PLAN_RANK_MAJOR, 64, &pl), 0);
    assert_int_equal(pl.send, 6);
    assert_int_equal(pl.copy, 18);
    assert_int_equal(eep_ep_plan_sms(&cfg, &s1, 132, 0.0, 2, EEP_EP_PLAN_RANK_MAJOR, 64, &pl), 0);
    assert_int_equal(pl.send + pl.copy, 2);
    assert_int_equal(eep_ep_plan_sms(&cfg, &s1, 132, 0.0, 132, EEP_EP_PLAN_RANK_MAJOR, 64, &pl), 0);
    assert_int_equal(pl.send, 16); /* never more than the model's senders */
    /* The full-device split scaled down: one rank at 24 SMs sends on 3 (16/132 of 24). */
    assert_int_equal(eep_ep_plan_sms(&cfg, &s1, 132, 0.0, 24, 0, 64, &pl), 0);
    assert_int_equal(pl.send, 3);
    assert_int_equal(pl.copy, 21);
    /* The knob is the default budget; the call's budget beats it. */
    cfg.num_sms = 16;
    assert_int_equal(eep_ep_plan_sms(&cfg, &s1, 132, 0.0, 0, 0, 64, &pl), 0);
    assert_int_equal(pl.send + pl.copy, 16);
    assert_int_equal(eep_ep_plan_sms(&cfg, &s1, 132, 0.0, 32, 0, 64, &pl), 0);
    assert_int_equal(pl.send + pl.copy, 32);
    /* A knob budget of 1 is the fewest a dispatch runs on: 2. */
    cfg.num_sms = 1;
    assert_int_equal(eep_ep_plan_sms(&cfg, &s1, 132, 0.0, 0, 0, 64, &pl), 0);
    assert_int_equal(pl.send + pl.copy, 2);
    /* EEP_EP_COPY_SMS fixes the copiers inside the budget (at most B - 1). */
    cfg.num_sms  = 0;
    cfg.copy_sms = 8;
    assert_int_equal(eep_ep_plan_sms(&cfg, &s1, 132, 0.0, 24, 0, 64, &pl), 0);
    assert_int_equal(pl.copy, 8);
    assert_int_equal(pl.send, 16);
    assert_int_equal(eep_ep_plan_sms(&cfg, &s1, 132, 0.0, 4, 0, 64, &pl), 0);
    assert_int_equal(pl.copy, 3);
    assert_int_equal(pl.send, 1);
    /* The kernel's sender limit holds. */
    cfg.copy_sms = 2;
    assert_int_equal(eep_ep_plan_sms(&cfg, &s8, 132, 0.0, 132, 0, 64, &pl), 0);
    assert_int_equal(pl.send, 64);
    /* Bad input: no plan, and the plan is left alone. */
    pl.send = 77;
    assert_int_equal(eep_ep_plan_sms(&cfg, &s1, 0, 0.0, 24, 0, 64, &pl), -1);
    assert_int_equal(eep_ep_plan_sms(&cfg, &s1, 132, 0.0, -3, 0, 64, &pl), -1);
    assert_int_equal(eep_ep_plan_sms(&cfg, &s1, 132, 0.0, 24, 0, 0, &pl), -1);
    assert_int_equal(eep_ep_plan_sms(&cfg, &s1, 132, 0.0, 24, 0, 64, NULL), -1);
    assert_int_equal(pl.send, 77);
}

/* CPU_SYNC's host mirror (eep_ep_mirror_ready): the kernel writes it without a fence, so the
   host takes the counts only once every word carries the call's tag, in whatever order they
   landed; a word left by the previous call (its tag) is waited on, whatever its value. */
static void test_mirror_ready(void **state)
{
    enum { EL = 4 };
    uint64_t       m[EL + 2];
    const uint64_t seq = 0x500000007ull, tag = (uint64_t)(uint32_t)seq << 32;
    const uint64_t old = (uint64_t)(uint32_t)(seq - 1) << 32;
    int            e;

    (void)state;
    for (e = 0; e <= EL; e++) {
        m[e] = old | 3u; /* the previous call's words */
    }
    m[EL + 1] = 0;
    assert_int_equal(eep_ep_mirror_ready(m, EL, 0), 0);
    m[0] = tag | 3u; /* this call's first count, before its sequence word */
    assert_int_equal(eep_ep_mirror_ready(m, EL, 0), 0);
    m[EL + 1] = seq;
    assert_int_equal(eep_ep_mirror_ready(m, EL, 0), 1);
    m[2] = tag | 9u; /* out of order: word 1 not there yet */
    assert_int_equal(eep_ep_mirror_ready(m, EL, 1), 1);
    m[1] = tag | 0u;
    m[3] = tag | 5u;
    assert_int_equal(eep_ep_mirror_ready(m, EL, 1), 4); /* the rows (word EL) still old */
    m[EL] = tag | 17u;
    assert_int_equal(eep_ep_mirror_ready(m, EL, 4), EL + 1);
    assert_int_equal(eep_ep_mirror_ready(m, EL, 0), EL + 1);
    /* a rank without local experts: the rows word alone */
    {
        uint64_t z[2] = { old | 1u, seq };

        assert_int_equal(eep_ep_mirror_ready(z, 0, 0), 0);
        z[0] = tag | 0u;
        assert_int_equal(eep_ep_mirror_ready(z, 0, 0), 1);
    }
}

/* The one-rank "copy engine" is a driver kernel on every free SM (bench/RESULTS.md, 2026-12-08):
   within a budget smaller than the device it must not be taken unless forced. */
static void test_copy_engine_budget(void **state)
{
    (void)state;
    assert_false(eep_ep_copy_engine_allowed(1, 24, 132));
    assert_false(eep_ep_copy_engine_allowed(1, 8, 132));
    assert_false(eep_ep_copy_engine_allowed(1, 131, 132));
    assert_true(eep_ep_copy_engine_allowed(1, 0, 132));   /* no budget: the whole device */
    assert_true(eep_ep_copy_engine_allowed(1, 132, 132)); /* a budget of the whole device */
    assert_true(eep_ep_copy_engine_allowed(1, 66, 66));   /* a shared GPU's whole share */
    assert_false(eep_ep_copy_engine_allowed(0, 0, 132));  /* the knob's "never" */
    assert_true(eep_ep_copy_engine_allowed(2, 24, 132));  /* forced, for measurement */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_product_shape),     cmocka_unit_test(test_shape_check),
        cmocka_unit_test(test_wire_layout),       cmocka_unit_test(test_offsets),
        cmocka_unit_test(test_rows_max_is_tight), cmocka_unit_test(test_buffer_sizes),
        cmocka_unit_test(test_combine_lines),     cmocka_unit_test(test_layout_equal),
        cmocka_unit_test(test_expected_groups),   cmocka_unit_test(test_sm_model),
        cmocka_unit_test(test_knobs_table),       cmocka_unit_test(test_pick_sms),
        cmocka_unit_test(test_plan_sms),          cmocka_unit_test(test_placement),
        cmocka_unit_test(test_mirror_ready),      cmocka_unit_test(test_copy_engine_budget),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
