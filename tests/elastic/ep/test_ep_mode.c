/*
 * test_ep_mode.c - direct or hybrid (elastic/ep/ep_mode.c): the rule from the teams and
 * EEP_EP_MODE, forced modes that cannot run refused with the reason, the GIN peer mask, the
 * hybrid kernels' staging size and their JIT spec (EEP_EPK_GIN=1, nvcc, a key of their own).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "elastic/ep/ep_kernels.h"
#include "elastic/ep/ep_layout.h"
#include "elastic/ep/ep_mode.h"

static eep_ep_topology_t topo(int nranks, int lsa, int gin)
{
    eep_ep_topology_t t = {
        .nranks = nranks, .lsa_size = lsa, .rail_size = nranks / lsa, .gin = gin
    };

    return t;
}

static int choose(eep_ep_topology_t t, const char *knob, eep_status_t *status_p)
{
    int hybrid = -1;

    *status_p = eep_ep_mode_choose(&t, knob, &hybrid);
    return hybrid;
}

static void test_auto(void **state)
{
    eep_status_t st;

    (void)state;
    /* one node (every rank an LSA peer): direct, with or without GIN */
    assert_int_equal(choose(topo(8, 8, 0), "auto", &st), 0);
    assert_int_equal(st, EEP_OK);
    assert_int_equal(choose(topo(1, 1, 0), "auto", &st), 0);
    assert_int_equal(st, EEP_OK);
    /* the one-GPU cluster (lsa 1, every peer a GIN peer) and multi-node layouts: hybrid */
    const int layouts[][2] = { { 2, 1 }, { 4, 1 }, { 8, 1 }, { 4, 2 }, { 8, 4 }, { 8, 2 } };
    for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++) {
        assert_int_equal(choose(topo(layouts[i][0], layouts[i][1], 1), "auto", &st), 1);
        assert_int_equal(st, EEP_OK);
    }
    /* several nodes without GIN: nothing can run, and it says so (no silent fallback) */
    assert_int_equal(choose(topo(4, 1, 0), "auto", &st), -1);
    assert_int_equal(st, EEP_ERR_UNSUPPORTED);
}

static void test_forced(void **state)
{
    eep_status_t st;

    (void)state;
    assert_int_equal(choose(topo(8, 8, 0), "direct", &st), 0);
    assert_int_equal(st, EEP_OK);
    /* hybrid forced on one node needs GIN there */
    assert_int_equal(choose(topo(8, 8, 1), "hybrid", &st), 1);
    assert_int_equal(st, EEP_OK);
    assert_int_equal(choose(topo(8, 8, 0), "hybrid", &st), -1);
    assert_int_equal(st, EEP_ERR_UNSUPPORTED);
    /* direct across nodes cannot run */
    assert_int_equal(choose(topo(4, 2, 1), "direct", &st), -1);
    assert_int_equal(st, EEP_ERR_UNSUPPORTED);
    /* an LSA team that does not divide the world */
    eep_ep_topology_t odd = { .nranks = 6, .lsa_size = 4, .rail_size = 1, .gin = 1 };
    assert_int_equal(choose(odd, "hybrid", &st), -1);
    assert_int_equal(st, EEP_ERR_UNSUPPORTED);
    /* more ranks than the 32-bit masks */
    assert_int_equal(choose(topo(64, 8, 1), "auto", &st), -1);
    assert_int_equal(st, EEP_ERR_UNSUPPORTED);
    /* a typo in the knob */
    assert_int_equal(choose(topo(4, 4, 0), "hybird", &st), -1);
    assert_int_equal(st, EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_ep_mode_choose(NULL, "auto", NULL), EEP_ERR_INVALID_ARG);
}

static void test_gin_mask(void **state)
{
    (void)state;
    /* lsa 1: every other rank */
    assert_int_equal(eep_ep_gin_mask(4, 2, 0, 1), 0xbu);
    /* 2 nodes x 2: rank 1 (node 0) reaches 2 and 3 over GIN; rank 2 (node 1, lsa rank 0) 0, 1 */
    assert_int_equal(eep_ep_gin_mask(4, 1, 1, 2), 0xcu);
    assert_int_equal(eep_ep_gin_mask(4, 2, 0, 2), 0x3u);
    /* 4 nodes x 2, rank 5 (node 2): all but 4 and 5 */
    assert_int_equal(eep_ep_gin_mask(8, 5, 1, 2), 0xcfu);
    /* one node: no GIN peer; 32 ranks in 4 nodes: the top bits too */
    assert_int_equal(eep_ep_gin_mask(8, 3, 3, 8), 0u);
    assert_int_equal(eep_ep_gin_mask(32, 0, 0, 8), 0xffffff00u);
    /* nonsense topologies give 0, never a shift past 31 */
    assert_int_equal(eep_ep_gin_mask(33, 0, 0, 1), 0u);
    assert_int_equal(eep_ep_gin_mask(4, 0, 1, 2), 0u);
}

static void test_stage_and_spec(void **state)
{
    eep_ep_shape_t        s = { .world       = 4,
                                .max_tokens  = 256,
                                .hidden      = 2048,
                                .num_topk    = 8,
                                .num_experts = 32,
                                .alignment   = 16,
                                .dtype       = EEP_DTYPE_BF16 };
    eep_ep_buffer_sizes_t z;
    eep_ep_wire_t         w;
    eep_ep_kernel_names_t n1, n2;
    eep_jit_spec_t        direct, hybrid;
    size_t                need;

    (void)state;
    assert_int_equal(eep_ep_buffer_sizes(&s, &z), EEP_OK);
    eep_ep_record_layout(&s, &w);
    /* what kernels/ep/ep_gin.cuh addresses: W x T records, W x T rows, W count slots */
    need = (size_t)4 * 256 * (w.token_bytes + z.combine_row_bytes) + 4 * z.count_slot_bytes;
    assert_true(eep_ep_gin_stage_bytes(&s, 1) >= need);
    assert_true(eep_ep_gin_stage_bytes(&s, 1) < need + ((size_t)2 << 20));
    assert_int_equal(eep_ep_gin_stage_bytes(&s, 1) % ((size_t)2 << 20), 0);
    s.hidden = 17; /* a bad shape */
    assert_int_equal(eep_ep_gin_stage_bytes(&s, 1), 0);
    s.hidden = 2048;
    /* forwarding (2 nodes x 2): more, for its regions; an LSA size that does not divide: 0 */
    assert_true(eep_ep_gin_stage_bytes(&s, 2) > eep_ep_gin_stage_bytes(&s, 1));
    assert_int_equal(eep_ep_gin_stage_bytes(&s, 3), 0);
    assert_true(eep_ep_gin_stage_bytes_max(&s) >= eep_ep_gin_stage_bytes(&s, 2));

    eep_ep_kernel_spec_mode(0, 64, 1, 0, 0, &s, &n1, &direct);
    eep_ep_kernel_spec_mode(0, 64, 1, 0, 1, &s, &n2, &hybrid);
    assert_int_equal(direct.needs_gin, 0);
    assert_int_equal(hybrid.needs_gin, 1); /* nvcc: NVRTC cannot compile GIN's headers */
    assert_null(strstr(direct.defines, "EEP_EPK_GIN"));
    assert_non_null(strstr(hybrid.defines, "EEP_EPK_GIN=1"));
    /* the rest of the spec is the same kernel of the same shape */
    assert_string_equal(direct.function, hybrid.function);
    assert_string_equal(direct.template_args, hybrid.template_args);
    assert_int_equal(strncmp(direct.defines, hybrid.defines, strlen(direct.defines)), 0);
    /* the plain spec is the direct one */
    eep_ep_kernel_spec(0, 64, 1, 0, &s, &n1, &direct);
    assert_int_equal(direct.needs_gin, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auto),
        cmocka_unit_test(test_forced),
        cmocka_unit_test(test_gin_mask),
        cmocka_unit_test(test_stage_and_spec),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
