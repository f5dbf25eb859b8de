/*
 * test_ep_training.c - the host side of issue 26's C API without a GPU: the layout envelope of
 * several shapes in one runtime (what fits, what does not, sizes), eep_ep_window_size (the
 * window-size hint), and eep_combine_ex's argument checks (each refused before any GPU call,
 * with a message naming the argument, and kept by eep_last_error()).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "eep/ep.h"
#include "elastic/ep/ep_handle.h"
#include "elastic/ep/ep_layout.h"
#include "elastic/runtime/runtime.h"
#include "util/log.h"

#define DEV(_addr) ((void *)(uintptr_t)(_addr))

static eep_ep_shape_t shape(int hidden, eep_dtype_t dtype)
{
    eep_ep_shape_t s = { .world       = 4,
                         .max_tokens  = 128,
                         .hidden      = hidden,
                         .num_topk    = 8,
                         .num_experts = 256,
                         .alignment   = 128,
                         .dtype       = dtype };

    return s;
}

/* One shape's envelope lays the area out exactly as before envelopes existed. */
static void test_envelope_of_one_shape(void **state)
{
    eep_ep_shape_t        s = shape(7168, EEP_DTYPE_BF16);
    eep_ep_envelope_t     env;
    eep_ep_buffer_sizes_t a, b;
    eep_ep_wire_t         w;

    (void)state;
    assert_int_equal(eep_ep_buffer_sizes(&s, &a), EEP_OK);
    eep_ep_envelope_of(&s, &env);
    eep_ep_envelope_sizes(&env, &b);
    assert_memory_equal(&a, &b, sizeof(a));
    assert_int_equal(a.combine_row_bytes, 128 * 128); /* 14336 data bytes = 128 lines */
    eep_ep_record_layout(&s, &w);
    assert_int_equal(w.hidden_bytes, 14336);
    assert_null(eep_ep_envelope_misfit(&env, &s, 0));
}

/* fp8 forward and bf16 backward of one layer, and a second layer kind, share one layout. */
static void test_envelope_mixed(void **state)
{
    eep_ep_shape_t    fp8 = shape(7168, EEP_DTYPE_FP8_E4M3), bf = shape(7168, EEP_DTYPE_BF16);
    eep_ep_shape_t    small = shape(2048, EEP_DTYPE_BF16), other = shape(7168, EEP_DTYPE_BF16);
    eep_ep_envelope_t env, fp8_only;
    eep_ep_wire_t     w;
    const char       *why = NULL;

    (void)state;
    eep_ep_envelope_of(&fp8, &fp8_only);
    /* the fp8 layout alone: the bf16 cached dispatch of the gradients does not fit its records */
    assert_non_null(eep_ep_envelope_misfit(&fp8_only, &bf, 0));
    assert_string_equal(eep_ep_envelope_misfit(&fp8_only, &bf, 0), "hidden (record bytes)");
    /* ... but its combine (bf16 rows, 14336 bytes) does: the row was always bf16 */
    assert_null(eep_ep_envelope_misfit(&fp8_only, &bf, 1));

    env = fp8_only;
    assert_int_equal(eep_ep_envelope_add(&env, &bf, NULL), EEP_OK);
    assert_int_equal(eep_ep_envelope_add(&env, &small, NULL), EEP_OK);
    assert_null(eep_ep_envelope_misfit(&env, &fp8, 0));
    assert_null(eep_ep_envelope_misfit(&env, &bf, 0));
    assert_null(eep_ep_envelope_misfit(&env, &small, 0));
    assert_int_equal(env.hidden_bytes, 14336);
    assert_int_equal(env.scale_bytes, 7168 / 128 * 4);
    /* the record holds bf16 data and the fp8 scales: its tag after both */
    eep_ep_envelope_record(&env, &w);
    assert_true(w.scale_off >= 14336 && w.meta_off >= w.scale_off + 224 && w.tag_off > w.meta_off);

    /* another max_tokens or world cannot share it (they choose the line formats) */
    other.max_tokens = 4096;
    assert_int_equal(eep_ep_envelope_add(&env, &other, &why), EEP_ERR_INVALID_ARG);
    assert_string_equal(why, "max_tokens_per_rank");
    assert_string_equal(eep_ep_envelope_misfit(&env, &other, 0), "max_tokens_per_rank");
    other       = bf;
    other.world = 8;
    assert_int_equal(eep_ep_envelope_add(&env, &other, &why), EEP_ERR_INVALID_ARG);
    assert_string_equal(why, "world");
    /* more top-k lanes than reserved */
    other          = bf;
    other.num_topk = 9;
    assert_string_equal(eep_ep_envelope_misfit(&env, &other, 0), "num_topk");
}

/* The top-k gradients travel as K fp32 in a combine row: a row holds them even at small H. */
static void test_envelope_topk_row(void **state)
{
    eep_ep_shape_t    s = shape(8, EEP_DTYPE_BF16); /* 16 bytes of bf16 per row */
    eep_ep_envelope_t env;

    (void)state;
    s.num_topk = 32; /* 128 bytes of gradients */
    eep_ep_envelope_of(&s, &env);
    assert_int_equal(env.crow_data, 128);
}

static void test_window_size(void **state)
{
    eep_ep_shape_desc_t d[3] = {
        { .max_tokens_per_rank = 128,
          .hidden              = 7168,
          .num_topk            = 8,
          .num_experts         = 256,
          .dtype               = EEP_DTYPE_FP8_E4M3 },
        { .max_tokens_per_rank = 128,
          .hidden              = 7168,
          .num_topk            = 8,
          .num_experts         = 256,
          .dtype               = EEP_DTYPE_BF16 },
        { .max_tokens_per_rank = 128,
          .hidden              = 2048,
          .num_topk            = 8,
          .num_experts         = 256,
          .dtype               = EEP_DTYPE_BF16 },
    };
    eep_ep_shape_t         s = shape(7168, EEP_DTYPE_BF16);
    eep_ep_buffer_sizes_t  z;
    eep_workspace_layout_t ws;
    size_t                 one = 0, all = 0, fp8 = 0;

    (void)state;
    assert_int_equal(eep_ep_window_size(4, &d[1], 1, &one), EEP_OK);
    assert_int_equal(eep_ep_buffer_sizes(&s, &z), EEP_OK);
    assert_int_equal(eep_workspace_layout(4, 1, (size_t)1 << 40, &ws), EEP_OK);
    {
        /* 4 ranks may be hybrid: the GIN send staging counts (the Python package's 2-rank run
           was refused for want of it), and 1 rank never is */
        eep_ep_envelope_t env;
        size_t            stage, solo = 0;

        eep_ep_envelope_of(&s, &env);
        stage = eep_ep_gin_stage_bytes_env(&env);
        assert_true(stage > 0);
        assert_true(one >= ws.data_off + z.total_bytes + stage);
        assert_true(one < ws.data_off + z.total_bytes + stage + (2u << 20));
        assert_int_equal(eep_ep_window_size(1, &d[1], 1, &solo), EEP_OK);
        assert_true(solo < one);
    }
    assert_int_equal(one % (2u << 20), 0);
    assert_int_equal(eep_ep_window_size(4, d, 1, &fp8), EEP_OK);
    assert_int_equal(eep_ep_window_size(4, d, 3, &all), EEP_OK);
    assert_true(fp8 < one); /* fp8 records are half the bytes */
    assert_true(all >= one);

    /* bad input names the field, and eep_last_error keeps the message */
    eep_last_error_clear();
    d[2].hidden = 4; /* 8 bytes of bf16: not a multiple of 16 */
    assert_int_equal(eep_ep_window_size(4, d, 3, &all), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(eep_last_error(), "shapes[2].hidden"));
    d[2].hidden              = 2048;
    d[2].max_tokens_per_rank = 256;
    assert_int_equal(eep_ep_window_size(4, d, 3, &all), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(eep_last_error(), "shapes[2].max_tokens_per_rank"));
    assert_int_equal(eep_ep_window_size(0, d, 1, &all), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(eep_last_error(), "world"));
    assert_int_equal(eep_ep_window_size(4, NULL, 1, &all), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(eep_last_error(), "shapes"));
    assert_int_equal(eep_ep_window_size(4, d, 1, NULL), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(eep_last_error(), "bytes_p"));
}

/* eep_combine_ex refuses bad arguments before any GPU call. */
static void test_combine_ex_args(void **state)
{
    eep_runtime_t      rt;
    eep_fault_page_t   page;
    eep_ep_handle_t   *h = NULL;
    eep_combine_args_t a;

    (void)state;
    memset(&rt, 0, sizeof(rt));
    memset(&page, 0, sizeof(page));
    rt.fault_host = &page;
    rt.rank       = 1;
    rt.nranks     = 4;
    assert_int_equal(eep_ep_handle_create(&rt, 0, 1, &h), EEP_OK);
    h->shape         = shape(7168, EEP_DTYPE_FP8_E4M3);
    h->num_tokens    = 64;
    h->num_recv_rows = 512;
    h->has_layout    = 1;

    memset(&a, 0, sizeof(a));
    a.size     = sizeof(a);
    a.y        = DEV(0x10000);
    a.out      = DEV(0x20000);
    a.weighted = 1;

    assert_int_equal(eep_combine_ex(NULL, &a, h, NULL), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(eep_last_error(), "rt"));
    assert_int_equal(eep_combine_ex(&rt, NULL, h, NULL), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(eep_last_error(), "args"));
    a.size = 8;
    assert_int_equal(eep_combine_ex(&rt, &a, h, NULL), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(eep_last_error(), "args->size"));
    a.size     = sizeof(a);
    a.weighted = 2;
    assert_int_equal(eep_combine_ex(&rt, &a, h, NULL), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(eep_last_error(), "weighted"));
    a.weighted = 0;
    a.y_grad   = DEV(0x30000);
    assert_int_equal(eep_combine_ex(&rt, &a, h, NULL), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(eep_last_error(), "topk_grad"));
    a.topk_grad = (float *)DEV(0x40008); /* misaligned */
    assert_int_equal(eep_combine_ex(&rt, &a, h, NULL), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(eep_last_error(), "topk_grad: pointer is not 16-byte aligned"));
    a.topk_grad = (float *)DEV(0x40000);
    a.y_grad    = DEV(0x30004);
    assert_int_equal(eep_combine_ex(&rt, &a, h, NULL), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(eep_last_error(), "y_grad: pointer is not 16-byte aligned"));
    a.y_grad = DEV(0x30000);
    a.out    = NULL;
    a.hidden = 12;
    assert_int_equal(eep_combine_ex(&rt, &a, h, NULL), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(eep_last_error(), "hidden"));
    a.hidden    = 0;
    a.topk_grad = NULL;
    a.y_grad    = NULL;
    assert_int_equal(eep_combine_ex(&rt, &a, h, NULL), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(eep_last_error(), "out"));
    /* the combine's own SM budget: 0 or 2..1024 */
    a.out     = DEV(0x20000);
    a.num_sms = 1;
    assert_int_equal(eep_combine_ex(&rt, &a, h, NULL), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(eep_last_error(), "num_sms"));
    a.num_sms = 24;
    /* a rank-major handle has no row per (token, k): no weight gradients from it */
    h->layout   = EEP_EP_LAYOUT_RANK_MAJOR;
    a.topk_grad = (float *)DEV(0x40000);
    a.y_grad    = DEV(0x30000);
    assert_int_equal(eep_combine_ex(&rt, &a, h, NULL), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(eep_last_error(), "topk_grad: a rank-major handle"));
    h->layout   = EEP_EP_LAYOUT_EXPERT_MAJOR;
    a.topk_grad = NULL;
    a.y_grad    = NULL;
    /* a valid call passes the checks and stops at the device (no GPU here) */
    eep_last_error_clear();
    assert_int_not_equal(eep_combine_ex(&rt, &a, h, NULL), EEP_ERR_INVALID_ARG);
    eep_ep_handle_destroy(h);
}

static void test_reserve_args(void **state)
{
    eep_ep_shape_desc_t d = { .max_tokens_per_rank = 128,
                              .hidden              = 7168,
                              .num_topk            = 8,
                              .num_experts         = 256,
                              .dtype               = EEP_DTYPE_BF16 };
    eep_runtime_t       rt;

    (void)state;
    memset(&rt, 0, sizeof(rt));
    rt.nranks = 4;
    assert_int_equal(eep_ep_reserve(NULL, &d, 1), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(eep_last_error(), "rt"));
    assert_int_equal(eep_ep_reserve(&rt, &d, 0), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(eep_last_error(), "num_shapes"));
    d.num_experts = 4 * 257; /* 257 experts on each of 4 ranks: more than 256 */
    assert_int_equal(eep_ep_reserve(&rt, &d, 1), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(eep_last_error(), "shapes[0].num_experts"));
}

static int setup(void **state)
{
    (void)state;
    eep_log_set_level(EEP_LOG_LEVEL_NONE); /* eep_last_error keeps the messages anyway */
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_envelope_of_one_shape), cmocka_unit_test(test_envelope_mixed),
        cmocka_unit_test(test_envelope_topk_row),     cmocka_unit_test(test_window_size),
        cmocka_unit_test(test_combine_ex_args),       cmocka_unit_test(test_reserve_args),
    };

    return cmocka_run_group_tests(tests, setup, NULL);
}
