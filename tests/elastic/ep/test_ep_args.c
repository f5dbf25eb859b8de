/*
 * test_ep_args.c - host-side checks of dispatch/combine arguments: every rule rejects its case
 * with the right status and a message naming the argument, and a valid call passes.
 * Pointers are fake device addresses: the checks never dereference them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "eep/ep.h"
#include "elastic/ep/ep_args.h"
#include "elastic/ep/ep_handle.h"
#include "util/log.h"
#include "elastic/runtime/runtime.h"

static char last_msg[1024];
static int  n_msgs;

static void hook(eep_log_level_t level, eep_log_subsys_t subsys, const char *message, void *arg)
{
    (void)level;
    (void)subsys;
    (void)arg;
    snprintf(last_msg, sizeof(last_msg), "%s", message);
    n_msgs++;
}

#define DEV(_addr) ((void *)(uintptr_t)(_addr))

static int rt_a, rt_b; /* two runtimes' identities */

static const eep_ep_world_t world4 = { .runtime = &rt_a, .epoch = 7, .rank = 1, .world = 4 };

static void valid_args(eep_dispatch_args_t *a)
{
    memset(a, 0, sizeof(*a));
    a->size                = sizeof(*a);
    a->x                   = DEV(0x100000);
    a->dtype               = EEP_DTYPE_BF16;
    a->topk_idx            = DEV(0x200000);
    a->topk_idx_dtype      = EEP_INDEX_INT64;
    a->topk_weights        = DEV(0x300000);
    a->num_tokens          = 64;
    a->hidden              = 7168;
    a->num_topk            = 8;
    a->num_experts         = 256;
    a->expert_alignment    = 128;
    a->max_tokens_per_rank = 128;
    a->mode                = EEP_EP_MODE_NO_CPU_SYNC;
    a->recv_capacity       = eep_ep_recv_rows_max(4, 128, 8, 256, 128);
    a->recv_x              = DEV(0x400000);
    a->recv_topk_idx       = DEV(0x500000);
    a->recv_topk_weights   = DEV(0x600000);
    a->recv_expert_counts  = DEV(0x700000);
    a->recv_expert_offsets = DEV(0x800000);
}

static void make_fp8(eep_dispatch_args_t *a)
{
    a->dtype         = EEP_DTYPE_FP8_E4M3;
    a->x_scales      = DEV(0x900000);
    a->recv_x_scales = DEV(0xa00000);
}

static eep_ep_handle_t *make_handle(const void *rt, uint64_t epoch, const eep_dispatch_args_t *a)
{
    eep_ep_handle_t *h = NULL;

    assert_int_equal(eep_ep_handle_create(rt, epoch, 1, &h), EEP_OK);
    h->shape.world       = 4;
    h->shape.max_tokens  = a->max_tokens_per_rank;
    h->shape.hidden      = a->hidden;
    h->shape.num_topk    = a->num_topk;
    h->shape.num_experts = a->num_experts;
    h->shape.alignment   = a->expert_alignment;
    h->shape.dtype       = a->dtype;
    h->num_tokens        = a->num_tokens;
    h->num_recv_rows     = a->recv_capacity;
    h->has_layout        = 1;
    return h;
}

/* expect_fail on another world. */
static void expect_fail_world(const eep_dispatch_args_t *a, const eep_ep_world_t *w,
                              eep_status_t want, const char *needle)
{
    eep_ep_shape_t shape;

    last_msg[0] = '\0';
    assert_int_equal(eep_ep_dispatch_args_check(a, w, NULL, &shape), want);
    if (strstr(last_msg, needle) == NULL) {
        fail_msg("message \"%s\" does not name \"%s\"", last_msg, needle);
    }
}

/* Check a dispatch call fails with @p want and a message containing @p needle. */
static void expect_fail(const eep_dispatch_args_t *a, const eep_ep_handle_t *h, eep_status_t want,
                        const char *needle)
{
    eep_ep_shape_t shape;

    last_msg[0] = '\0';
    assert_int_equal(eep_ep_dispatch_args_check(a, &world4, h, &shape), want);
    if (strstr(last_msg, needle) == NULL) {
        fail_msg("message \"%s\" does not name \"%s\"", last_msg, needle);
    }
}

/* A view's placement (issue 24): calls of its expert count take it, others the default; its most
   experts on one rank size the outputs, and a rank of more than 256 is refused. */
static void test_view_placement(void **state)
{
    eep_expert_place_t  pl[1100];
    eep_ep_world_t      w = world4;
    eep_dispatch_args_t a;
    eep_ep_shape_t      shape;
    int                 e;

    (void)state;
    /* 16 experts: 13 on rank 0 (slots 0..12, in reverse), one on each other rank */
    for (e = 0; e < 16; e++) {
        pl[e].rank = e < 13 ? 0 : e - 12;
        pl[e].slot = e < 13 ? 12 - e : 0;
    }
    w.place_experts   = 16;
    w.place_local_max = 13;
    w.placement       = pl;
    valid_args(&a);
    a.num_experts   = 16;
    a.recv_capacity = eep_ep_recv_rows_max(4, 128, 8, 16, 128); /* the default's 4 a rank */
    last_msg[0]     = '\0';
    assert_int_equal(eep_ep_dispatch_args_check(&a, &w, NULL, &shape), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(last_msg, "recv_capacity"));
    a.recv_capacity = eep_ep_recv_rows_max_placed(4, 128, 8, 16, 128, pl);
    assert_true(a.recv_capacity > eep_ep_recv_rows_max(4, 128, 8, 16, 128));
    assert_int_equal(eep_ep_dispatch_args_check(&a, &w, NULL, &shape), EEP_OK);
    assert_ptr_equal(shape.placement, pl);
    assert_int_equal(eep_ep_local_experts(&shape), 13);
    /* another expert count: the default */
    valid_args(&a);
    assert_int_equal(eep_ep_dispatch_args_check(&a, &w, NULL, &shape), EEP_OK);
    assert_null(shape.placement);
    /* 1100 experts, 257 on rank 0: refused, naming num_experts and the view's placement */
    for (e = 0; e < 1100; e++) {
        pl[e].rank = e < 257 ? 0 : 1 + (e - 257) % 3;
        pl[e].slot = e < 257 ? e : (e - 257) / 3;
    }
    assert_int_equal(eep_placement_check(pl, 1100, 4, NULL), EEP_OK);
    w.place_experts   = 1100;
    w.place_local_max = 281; /* ranks 1..3: 281 each */
    valid_args(&a);
    a.num_experts = 1100;
    expect_fail_world(&a, &w, EEP_ERR_INVALID_ARG, "view's");
    assert_int_equal(eep_ep_recv_rows_max_placed(4, 128, 8, 16, 128, NULL),
                     eep_ep_recv_rows_max(4, 128, 8, 16, 128));
    pl[0].slot = 5; /* two experts in one slot */
    assert_int_equal(eep_ep_recv_rows_max_placed(4, 128, 8, 1100, 128, pl), -1);
}

static int setup(void **state)
{
    (void)state;
    eep_log_set_level(EEP_LOG_LEVEL_ERROR);
    eep_log_set_hook(hook, NULL);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    eep_log_set_hook(NULL, NULL);
    return 0;
}

static void test_valid_passes(void **state)
{
    eep_dispatch_args_t a;
    eep_ep_shape_t      shape = { 0 };

    (void)state;
    valid_args(&a);
    n_msgs = 0;
    assert_int_equal(eep_ep_dispatch_args_check(&a, &world4, NULL, &shape), EEP_OK);
    assert_int_equal(n_msgs, 0);
    assert_int_equal(shape.world, 4);
    assert_int_equal(shape.hidden, 7168);
    make_fp8(&a);
    assert_int_equal(eep_ep_dispatch_args_check(&a, &world4, NULL, NULL), EEP_OK);
    /* A rank with no tokens may pass NULL inputs. */
    valid_args(&a);
    a.num_tokens   = 0;
    a.x            = NULL;
    a.topk_idx     = NULL;
    a.topk_weights = NULL;
    assert_int_equal(eep_ep_dispatch_args_check(&a, &world4, NULL, NULL), EEP_OK);
    /* T = max and every legal K, int32 ids, CPU sync with an exact-size hook. */
    valid_args(&a);
    a.num_tokens     = a.max_tokens_per_rank;
    a.topk_idx_dtype = EEP_INDEX_INT32;
    a.num_topk       = 1;
    assert_int_equal(eep_ep_dispatch_args_check(&a, &world4, NULL, NULL), EEP_OK);
    a.num_topk      = EEP_EP_MAX_TOPK;
    a.recv_capacity = eep_ep_recv_rows_max(4, 128, EEP_EP_MAX_TOPK, 256, 128);
    assert_int_equal(eep_ep_dispatch_args_check(&a, &world4, NULL, NULL), EEP_OK);
    a.num_topk      = 8;
    a.mode          = EEP_EP_MODE_CPU_SYNC;
    a.recv_capacity = 0;
    a.alloc         = (eep_ep_alloc_func_t)(uintptr_t)0x1;
    a.recv_x        = NULL;
    assert_int_equal(eep_ep_dispatch_args_check(&a, &world4, NULL, NULL), EEP_OK);
}

static void test_struct_version(void **state)
{
    eep_dispatch_args_t a;

    (void)state;
    assert_int_equal(eep_ep_dispatch_args_check(NULL, &world4, NULL, NULL), EEP_ERR_INVALID_ARG);
    valid_args(&a);
    a.size = 0;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "args->size");
    a.size = sizeof(a) + 8;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "args->size");
    /* The second version's field: 0 or 1; a first-version caller's size never reaches it. */
    valid_args(&a);
    a.skip_padding_x = 1;
    assert_int_equal(eep_ep_dispatch_args_check(&a, &world4, NULL, NULL), EEP_OK);
    a.skip_padding_x = 2;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "args->skip_padding_x");
    a.size = offsetof(eep_dispatch_args_t, num_recv_rows_p) + sizeof(int64_t *);
    assert_int_equal(eep_ep_dispatch_args_check(&a, &world4, NULL, NULL), EEP_OK);
    /* The third version's layout: a known one; a second-version caller's size never reaches it
       (garbage there is expert-major). */
    valid_args(&a);
    a.layout = (eep_ep_layout_t)7;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "layout");
    a.size = offsetof(eep_dispatch_args_t, layout);
    assert_int_equal(eep_ep_args_layout(&a), EEP_EP_LAYOUT_EXPERT_MAJOR);
    assert_int_equal(eep_ep_dispatch_args_check(&a, &world4, NULL, NULL), EEP_OK);
}

/* Rank-major outputs: at most world * max_tokens rows, fewer than expert-major's worst case. */
static void test_rank_major_capacity(void **state)
{
    eep_dispatch_args_t a;
    eep_ep_shape_t      s;

    (void)state;
    valid_args(&a);
    a.layout = EEP_EP_LAYOUT_RANK_MAJOR;
    assert_int_equal(eep_ep_dispatch_args_check(&a, &world4, NULL, &s), EEP_OK);
    assert_int_equal(eep_ep_layout_rows_max(&s, EEP_EP_LAYOUT_RANK_MAJOR),
                     (int64_t)s.world * s.max_tokens);
    assert_true(eep_ep_layout_rows_max(&s, EEP_EP_LAYOUT_EXPERT_MAJOR) >
                eep_ep_layout_rows_max(&s, EEP_EP_LAYOUT_RANK_MAJOR));
    a.recv_capacity = (int64_t)s.world * s.max_tokens;
    assert_int_equal(eep_ep_dispatch_args_check(&a, &world4, NULL, NULL), EEP_OK);
    a.recv_capacity--;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "recv_capacity");
}

static void test_null_and_misaligned_pointers(void **state)
{
    static const struct {
        size_t      off;
        const char *name;
    } ptrs[] = {
        { offsetof(eep_dispatch_args_t, x), "x" },
        { offsetof(eep_dispatch_args_t, topk_idx), "topk_idx" },
        { offsetof(eep_dispatch_args_t, topk_weights), "topk_weights" },
        { offsetof(eep_dispatch_args_t, recv_x), "recv_x" },
        { offsetof(eep_dispatch_args_t, recv_topk_idx), "recv_topk_idx" },
        { offsetof(eep_dispatch_args_t, recv_topk_weights), "recv_topk_weights" },
        { offsetof(eep_dispatch_args_t, recv_expert_counts), "recv_expert_counts" },
        { offsetof(eep_dispatch_args_t, recv_expert_offsets), "recv_expert_offsets" },
        { offsetof(eep_dispatch_args_t, x_scales), "x_scales" },
        { offsetof(eep_dispatch_args_t, recv_x_scales), "recv_x_scales" },
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(ptrs) / sizeof(ptrs[0]); i++) {
        eep_dispatch_args_t a;
        void               *p;
        char                name[64];

        valid_args(&a);
        make_fp8(&a);
        snprintf(name, sizeof(name), "argument %s:", ptrs[i].name);
        memcpy(&p, (char *)&a + ptrs[i].off, sizeof(p));
        p = (char *)p + 8; /* 8-byte aligned, not 16 */
        memcpy((char *)&a + ptrs[i].off, &p, sizeof(p));
        expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, name);
        assert_non_null(strstr(last_msg, "aligned"));
        p = NULL;
        memcpy((char *)&a + ptrs[i].off, &p, sizeof(p));
        expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, ptrs[i].name);
    }
}

static void test_hidden_size(void **state)
{
    eep_dispatch_args_t a;

    (void)state;
    valid_args(&a);
    a.hidden = 100; /* 200 bytes: not a multiple of 16 */
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "hidden");
    assert_non_null(strstr(last_msg, "16 bytes"));
    a.hidden = 0;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "hidden");
    valid_args(&a);
    a.hidden = 2056; /* bf16: 4112 bytes, fine */
    assert_int_equal(eep_ep_dispatch_args_check(&a, &world4, NULL, NULL), EEP_OK);
    make_fp8(&a);
    a.hidden = 2064; /* fp8: a multiple of 16 bytes but not of 128 channels */
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "hidden");
    assert_non_null(strstr(last_msg, "128"));
    a.hidden = 2056; /* fp8: not even 16 bytes */
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "hidden");
}

static void test_tokens_topk_experts_alignment(void **state)
{
    eep_dispatch_args_t a;

    (void)state;
    valid_args(&a);
    a.num_tokens = a.max_tokens_per_rank + 1;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "num_tokens");
    a.num_tokens = -1;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "num_tokens");
    valid_args(&a);
    a.max_tokens_per_rank = 0;
    a.num_tokens          = 0;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "max_tokens_per_rank");

    valid_args(&a);
    a.num_topk = 0;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "num_topk");
    a.num_topk = EEP_EP_MAX_TOPK + 1;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "num_topk");

    valid_args(&a);
    /* 258 on 4 ranks: the default placement's 65, 65, 64, 64 (issue 24: no divisibility rule);
       the outputs' worst case is that of the rank with 65 */
    a.num_experts = 258;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "recv_capacity");
    a.recv_capacity = eep_ep_recv_rows_max(4, 128, 8, 258, 128);
    {
        eep_ep_shape_t shape;

        assert_true(a.recv_capacity > eep_ep_recv_rows_max(4, 128, 8, 256, 128));
        assert_int_equal(eep_ep_dispatch_args_check(&a, &world4, NULL, &shape), EEP_OK);
        assert_null(shape.placement);
        assert_int_equal(eep_ep_local_experts(&shape), 65);
    }
    a.num_experts   = 4 * (EEP_EP_MAX_LOCAL_EXPERTS + 1);
    a.recv_capacity = eep_ep_recv_rows_max(4, 128, 8, 256, 128);
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "num_experts");
    a.num_experts = 4; /* fewer experts than K = 8 */
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "num_experts");

    valid_args(&a);
    a.expert_alignment = 0;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "expert_alignment");
    a.expert_alignment = 96;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "expert_alignment");
    a.expert_alignment = 1;
    a.recv_capacity    = eep_ep_recv_rows_max(4, 128, 8, 256, 1);
    assert_int_equal(eep_ep_dispatch_args_check(&a, &world4, NULL, NULL), EEP_OK);

    valid_args(&a);
    a.mode = (eep_ep_mode_t)7;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "mode");
    valid_args(&a);
    a.topk_idx_dtype = (eep_index_dtype_t)3;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "topk_idx_dtype");
    valid_args(&a);
    a.dtype = (eep_dtype_t)9;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "dtype");
    valid_args(&a);
    a.num_sms = -2;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "num_sms");
    /* a budget of one SM cannot hold a sender and a copier */
    a.num_sms = 1;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "num_sms");
}

static void test_fp8_needs_scales(void **state)
{
    eep_dispatch_args_t a;

    (void)state;
    valid_args(&a);
    make_fp8(&a);
    a.x_scales = NULL;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "x_scales");
    assert_non_null(strstr(last_msg, "fp8"));
    valid_args(&a);
    make_fp8(&a);
    a.recv_x_scales = NULL;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "recv_x_scales");
}

static void test_capacity(void **state)
{
    eep_dispatch_args_t a;

    (void)state;
    valid_args(&a);
    a.recv_capacity--;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "recv_capacity");
    a.mode = EEP_EP_MODE_CPU_SYNC; /* checked later against the exact count */
    assert_int_equal(eep_ep_dispatch_args_check(&a, &world4, NULL, NULL), EEP_OK);
    assert_int_equal(eep_ep_capacity_check(&a, a.recv_capacity), EEP_OK);
    last_msg[0] = '\0';
    assert_int_equal(eep_ep_capacity_check(&a, a.recv_capacity + 1), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(last_msg, "recv_capacity"));
}

static void test_handles(void **state)
{
    eep_dispatch_args_t a;
    eep_ep_handle_t    *h;

    (void)state;
    valid_args(&a);
    a.mode = EEP_EP_MODE_CACHED;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "handle");

    h = make_handle(&rt_a, world4.epoch, &a);
    assert_int_equal(eep_ep_dispatch_args_check(&a, &world4, h, NULL), EEP_OK);
    /* Same shape needed to reuse a layout, and the same output layout. */
    a.num_tokens--;
    expect_fail(&a, h, EEP_ERR_INVALID_ARG, "handle");
    a.num_tokens++;
    a.layout = EEP_EP_LAYOUT_RANK_MAJOR;
    expect_fail(&a, h, EEP_ERR_INVALID_ARG, "layout 1/0");
    a.layout = EEP_EP_LAYOUT_EXPERT_MAJOR;
    /* Older membership epoch. */
    h->epoch = world4.epoch - 1;
    expect_fail(&a, h, EEP_ERR_STALE_EPOCH, "epoch");
    /* A non-cached dispatch refills an old handle in place. */
    a.mode = EEP_EP_MODE_NO_CPU_SYNC;
    assert_int_equal(eep_ep_dispatch_args_check(&a, &world4, h, NULL), EEP_OK);
    /* ... but not another runtime's. */
    h->runtime = &rt_b;
    expect_fail(&a, h, EEP_ERR_INVALID_ARG, "another runtime");
    a.mode = EEP_EP_MODE_CACHED;
    expect_fail(&a, h, EEP_ERR_INVALID_ARG, "another runtime");
    /* No layout yet. */
    h->runtime    = &rt_a;
    h->epoch      = world4.epoch;
    h->has_layout = 0;
    expect_fail(&a, h, EEP_ERR_INVALID_ARG, "handle");
    /* A dead handle (what destroy leaves behind). */
    h->has_layout = 1;
    h->magic      = 0;
    expect_fail(&a, h, EEP_ERR_INVALID_ARG, "not a live");
    h->magic = EEP_EP_HANDLE_MAGIC;
    eep_ep_handle_destroy(h);
    eep_ep_handle_destroy(NULL);
}

static void test_combine(void **state)
{
    eep_dispatch_args_t a;
    eep_ep_handle_t    *h;

    (void)state;
    valid_args(&a);
    h = make_handle(&rt_a, world4.epoch, &a);
    assert_int_equal(eep_ep_combine_args_check(DEV(0x1000), h, DEV(0x2000), &world4), EEP_OK);
    last_msg[0] = '\0';
    assert_int_equal(eep_ep_combine_args_check(NULL, h, DEV(0x2000), &world4), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(last_msg, "argument y:"));
    assert_int_equal(eep_ep_combine_args_check(DEV(0x1000), h, DEV(0x2004), &world4),
                     EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(last_msg, "argument out:"));
    assert_int_equal(eep_ep_combine_args_check(DEV(0x1000), NULL, DEV(0x2000), &world4),
                     EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(last_msg, "handle"));
    h->epoch = 3;
    assert_int_equal(eep_ep_combine_args_check(DEV(0x1000), h, DEV(0x2000), &world4),
                     EEP_ERR_STALE_EPOCH);
    h->epoch   = world4.epoch;
    h->runtime = &rt_b;
    assert_int_equal(eep_ep_combine_args_check(DEV(0x1000), h, DEV(0x2000), &world4),
                     EEP_ERR_INVALID_ARG);
    /* A dispatch with no tokens needs no output. */
    h->runtime    = &rt_a;
    h->num_tokens = 0;
    assert_int_equal(eep_ep_combine_args_check(DEV(0x1000), h, NULL, &world4), EEP_OK);
    eep_ep_handle_destroy(h);
}

/* The public entry points run the same checks against the runtime's rank count. */
static void test_public_entry_points(void **state)
{
    eep_runtime_t       rt;
    eep_fault_page_t    page;
    eep_dispatch_args_t a;
    eep_ep_handle_t    *h = NULL;

    (void)state;
    memset(&rt, 0, sizeof(rt));
    memset(&page, 0, sizeof(page));
    rt.fault_host = &page;
    rt.rank       = 1;
    rt.nranks     = 4;
    valid_args(&a);
    assert_int_equal(eep_dispatch(NULL, &a, &h, NULL), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_dispatch(&rt, &a, NULL, NULL), EEP_ERR_INVALID_ARG);
    a.num_experts = 4 * 257; /* 257 on each of the runtime's 4 ranks: more than 256 */
    last_msg[0]   = '\0';
    assert_int_equal(eep_dispatch(&rt, &a, &h, NULL), EEP_ERR_INVALID_ARG);
    assert_non_null(strstr(last_msg, "num_experts"));
    /* The runtime's view placement reaches the checks (eep_dispatch's world): 300 experts, 297
       on rank 0 and one on each other rank, is refused naming the view's placement */
    {
        static eep_expert_place_t pl[300];
        int                       e;

        for (e = 0; e < 300; e++) {
            pl[e].rank = e < 297 ? 0 : e - 296;
            pl[e].slot = e < 297 ? e : 0;
        }
        rt.placement       = pl;
        rt.num_experts     = 300;
        rt.place_local_max = 297;
        a.num_experts      = 300;
        last_msg[0]        = '\0';
        assert_int_equal(eep_dispatch(&rt, &a, &h, NULL), EEP_ERR_INVALID_ARG);
        assert_non_null(strstr(last_msg, "the view's placement"));
        a.num_experts = 256; /* another expert count: the default's 64 a rank */
        last_msg[0]   = '\0';
        (void)eep_dispatch(&rt, &a, &h, NULL);
        assert_null(strstr(last_msg, "placement"));
        assert_null(h);
        rt.placement   = NULL;
        rt.num_experts = 0;
    }
    /* Valid arguments on a runtime with no GPU (or, with a driver, not in direct mode): refused
       before any launch, and no handle made. */
    a.num_experts = 256;
    assert_int_not_equal(eep_dispatch(&rt, &a, &h, NULL), EEP_OK);
    assert_null(h);
    assert_int_equal(eep_combine(&rt, DEV(0x1000), NULL, DEV(0x2000), NULL), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_combine(NULL, DEV(0x1000), NULL, DEV(0x2000), NULL), EEP_ERR_INVALID_ARG);
}

/*
 * The runtime's membership epoch reaches the checks: a handle made in an older epoch is refused
 * by combine and by a cached dispatch through the public entry points, with both epochs named,
 * before any GPU call (the runtime here has none).
 */
static void test_stale_epoch_through_runtime(void **state)
{
    eep_runtime_t       rt;
    eep_fault_page_t    page;
    eep_dispatch_args_t a;
    eep_ep_handle_t    *h, *given;

    (void)state;
    memset(&rt, 0, sizeof(rt));
    memset(&page, 0, sizeof(page));
    rt.fault_host = &page;
    rt.rank       = 1;
    rt.nranks     = 4;
    rt.epoch      = 4;
    assert_int_equal(eep_runtime_epoch(&rt), 4);
    valid_args(&a);
    h = make_handle(&rt, 4, &a);
    /* A view is applied: the runtime moves to epoch 5, the handle stays in 4. */
    assert_int_equal(eep_runtime_set_epoch(&rt, 5), EEP_OK);
    assert_int_equal(eep_runtime_epoch(&rt), 5);

    last_msg[0] = '\0';
    assert_int_equal(eep_combine(&rt, DEV(0x1000), h, DEV(0x2000), NULL), EEP_ERR_STALE_EPOCH);
    assert_non_null(strstr(last_msg, "combine"));
    assert_non_null(strstr(last_msg, "epoch 4"));
    assert_non_null(strstr(last_msg, "epoch 5"));

    a.mode      = EEP_EP_MODE_CACHED;
    given       = h;
    last_msg[0] = '\0';
    assert_int_equal(eep_dispatch(&rt, &a, &given, NULL), EEP_ERR_STALE_EPOCH);
    assert_ptr_equal(given, h); /* left untouched on error */
    assert_non_null(strstr(last_msg, "epoch 4"));
    assert_non_null(strstr(last_msg, "epoch 5"));

    /* The same handle in the runtime's epoch passes the epoch check (and, with no GPU here, stops
       later, at the device). */
    h->epoch    = 5;
    last_msg[0] = '\0';
    assert_int_not_equal(eep_combine(&rt, DEV(0x1000), h, DEV(0x2000), NULL), EEP_ERR_STALE_EPOCH);
    assert_null(strstr(last_msg, "membership epoch"));

    /* Epochs only grow. */
    assert_int_equal(eep_runtime_set_epoch(&rt, 5), EEP_ERR_STALE_EPOCH);
    assert_int_equal(eep_runtime_set_epoch(&rt, 3), EEP_ERR_STALE_EPOCH);
    assert_int_equal(eep_runtime_epoch(&rt), 5);
    assert_int_equal(eep_runtime_epoch(NULL), 0);
    eep_ep_handle_destroy(h);
}

/* Degraded mode (issue 24): the caller's dead_mask is checked (inside the world, never this rank;
   ignored for callers of an older struct), joins the runtime's, and a handle's dead set must
   match a cached dispatch's and cover the runtime's at combine. */
static void test_degraded_args(void **state)
{
    eep_dispatch_args_t a;
    eep_ep_world_t      w = world4; /* rank 1 of 4 */
    eep_ep_handle_t    *h;

    (void)state;
    valid_args(&a);
    a.dead_mask = 1u << 4;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "dead_mask");
    a.dead_mask = 1ull << 63;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "dead_mask");
    a.dead_mask = 1u << 1;
    expect_fail(&a, NULL, EEP_ERR_INVALID_ARG, "this rank");
    a.dead_mask = (1u << 0) | (1u << 3);
    assert_int_equal(eep_ep_dispatch_args_check(&a, &world4, NULL, NULL), EEP_OK);
    assert_int_equal(eep_ep_args_dead_mask(&a, &world4), 0x9u);
    w.dead_mask = 1u << 2; /* the runtime's */
    assert_int_equal(eep_ep_args_dead_mask(&a, &w), 0xdu);
    a.dead_mask = 0;
    assert_int_equal(eep_ep_args_dead_mask(&a, &w), 0x4u);
    /* a third-version caller's size ends before dead_mask: garbage there is no mask */
    a.dead_mask = 1u << 1;
    a.size      = offsetof(eep_dispatch_args_t, dead_mask);
    assert_int_equal(eep_ep_dispatch_args_check(&a, &world4, NULL, NULL), EEP_OK);
    assert_int_equal(eep_ep_args_dead_mask(&a, &world4), 0u);

    /* CACHED: the handle's dead set, exactly */
    valid_args(&a);
    a.mode = EEP_EP_MODE_CACHED;
    h      = make_handle(&rt_a, world4.epoch, &a);
    assert_int_equal(eep_ep_dispatch_args_check(&a, &world4, h, NULL), EEP_OK);
    a.dead_mask = 1u << 2; /* found dead since the handle was made */
    expect_fail(&a, h, EEP_ERR_PEER_LOST, "dispatch again");
    h->dead_mask = 1u << 2;
    assert_int_equal(eep_ep_dispatch_args_check(&a, &world4, h, NULL), EEP_OK);
    a.dead_mask = 0; /* fewer dead than the layout excludes */
    expect_fail(&a, h, EEP_ERR_INVALID_ARG, "dead ranks");
    a.dead_mask = 0;
    assert_int_equal(eep_ep_dispatch_args_check(&a, &w, h, NULL), EEP_OK); /* the runtime's */

    /* combine: a rank the runtime found dead after the handle's dispatch owes partials */
    h->dead_mask = 0;
    assert_int_equal(eep_ep_combine_args_check(DEV(0x1000), h, DEV(0x2000), &world4), EEP_OK);
    last_msg[0] = '\0';
    assert_int_equal(eep_ep_combine_args_check(DEV(0x1000), h, DEV(0x2000), &w), EEP_ERR_PEER_LOST);
    assert_non_null(strstr(last_msg, "dispatch again"));
    h->dead_mask = 1u << 2;
    assert_int_equal(eep_ep_combine_args_check(DEV(0x1000), h, DEV(0x2000), &w), EEP_OK);
    eep_ep_handle_destroy(h);
}

/* The reach masks (degraded mode with forwarding): 2 nodes of 2 GPUs, rank 3 dead.  Rank 1's
   forwarder to node 1 is 3: it reaches neither 2 nor 3, and 2 hears nothing from it (1's tokens
   went through 3), while 2's tokens reach 1 through 0; rank 0 crosses through 2, alive.  Not
   symmetric, by the route.  Without forwarding: the dead set only. */
static void test_reach_masks(void **state)
{
    uint32_t drop, mute;

    (void)state;
    eep_ep_reach_masks(4, 1, 2, 1u << 3, &drop, &mute);
    assert_int_equal(drop, 0xcu);
    assert_int_equal(mute, 0x8u);
    eep_ep_reach_masks(4, 0, 2, 1u << 3, &drop, &mute);
    assert_int_equal(drop, 0x8u);
    assert_int_equal(mute, 0x8u);
    eep_ep_reach_masks(4, 2, 2, 1u << 3, &drop, &mute);
    assert_int_equal(drop, 0x8u); /* 2 -> 0, 1 through 0 (its own local index) */
    assert_int_equal(mute, 0xau); /* 1 -> 2 went through 3 */
    eep_ep_reach_masks(4, 2, 1, 1u << 3, &drop, &mute);
    assert_int_equal(drop, 0x8u);
    assert_int_equal(mute, 0x8u);
    eep_ep_reach_masks(8, 5, 2, 0, &drop, &mute); /* nothing dead: nothing cut */
    assert_int_equal(drop | mute, 0u);
    /* 4 nodes of 2, rank 6 (node 3, local 0) dead: rank 0 reaches node 3 through 6: cut;
       rank 1 through 7: fine; both hear node 3's live rank 7 through their node's rank 1 */
    eep_ep_reach_masks(8, 0, 2, 1u << 6, &drop, &mute);
    assert_int_equal(drop, 0xc0u);
    assert_int_equal(mute, 0x40u);
    eep_ep_reach_masks(8, 1, 2, 1u << 6, &drop, &mute);
    assert_int_equal(drop, 0x40u);
    assert_int_equal(mute, 0x40u);
}

/* The runtime's dead peers (its view machine's) reach the checks through eep_combine: a handle
   made before the death is refused with EEP_ERR_PEER_LOST, nothing launched. */
static void test_degraded_through_runtime(void **state)
{
    eep_runtime_t       rt;
    eep_fault_page_t    page;
    eep_view_machine_t  vm;
    eep_dispatch_args_t a;
    eep_ep_handle_t    *h, *given;

    (void)state;
    memset(&rt, 0, sizeof(rt));
    memset(&page, 0, sizeof(page));
    memset(&vm, 0, sizeof(vm));
    rt.fault_host = &page;
    rt.rank       = 1;
    rt.nranks     = 4;
    rt.epoch      = 4;
    rt.vm         = &vm;
    vm.view.world = 4;
    vm.state      = EEP_VIEW_STATE_DEGRADED;
    vm.dead[0]    = 1u << 3;
    valid_args(&a);
    h           = make_handle(&rt, 4, &a);
    last_msg[0] = '\0';
    assert_int_equal(eep_combine(&rt, DEV(0x1000), h, DEV(0x2000), NULL), EEP_ERR_PEER_LOST);
    assert_non_null(strstr(last_msg, "0x8"));
    a.mode = EEP_EP_MODE_CACHED;
    given  = h;
    assert_int_equal(eep_dispatch(&rt, &a, &given, NULL), EEP_ERR_PEER_LOST);
    assert_ptr_equal(given, h);
    /* a handle that knew the death passes these checks (and, with no GPU, stops at the device) */
    h->dead_mask = 1u << 3;
    last_msg[0]  = '\0';
    assert_int_not_equal(eep_combine(&rt, DEV(0x1000), h, DEV(0x2000), NULL), EEP_ERR_PEER_LOST);
    assert_null(strstr(last_msg, "known dead"));
    eep_ep_handle_destroy(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_passes),
        cmocka_unit_test(test_struct_version),
        cmocka_unit_test(test_rank_major_capacity),
        cmocka_unit_test(test_null_and_misaligned_pointers),
        cmocka_unit_test(test_hidden_size),
        cmocka_unit_test(test_tokens_topk_experts_alignment),
        cmocka_unit_test(test_fp8_needs_scales),
        cmocka_unit_test(test_capacity),
        cmocka_unit_test(test_handles),
        cmocka_unit_test(test_combine),
        cmocka_unit_test(test_public_entry_points),
        cmocka_unit_test(test_view_placement),
        cmocka_unit_test(test_stale_epoch_through_runtime),
        cmocka_unit_test(test_degraded_args),
        cmocka_unit_test(test_degraded_through_runtime),
        cmocka_unit_test(test_reach_masks),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
