/*
 * test_eep_fault.c - eep-rank's fault specs (tools/eep_fault.c) on the CPU: every action with its
 * defaults and keys, the legacy arm-file line of make gpu-elastic, the aliases exit-dispatch /
 * exit-combine, and bad input refused with a message naming the bad word (unknown action or key,
 * a key the action does not take, numbers out of range or not whole, a missing ms); the queue
 * of armed faults (a fault without a step fires at the next one, only at its phase and action
 * class, in arming order; a delay of K steps fires K steps in a row; at most 16 armed); the
 * corrupt-id token is one routed only to this rank's own experts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "tools/eep_fault.h"

static eep_fault_t parse_ok(const char *spec)
{
    eep_fault_t f;
    char        err[256] = "";

    memset(&f, 0xab, sizeof(f));
    if (eep_fault_parse(spec, &f, err, sizeof(err)) != EEP_OK) {
        fail_msg("'%s' refused: %s", spec, err);
    }
    return f;
}

/* Refused, with @p want somewhere in the message, and the output left as it was. */
static void parse_bad(const char *spec, const char *want)
{
    eep_fault_t f, before;
    char        err[256] = "";

    memset(&f, 0x5a, sizeof(f));
    before = f;
    assert_int_equal(eep_fault_parse(spec, &f, err, sizeof(err)), EEP_ERR_INVALID_ARG);
    if (strstr(err, want) == NULL) {
        fail_msg("'%s': message '%s' does not say '%s'", spec, err, want);
    }
    assert_memory_equal(&f, &before, sizeof(f));
}

static void test_actions(void **state)
{
    eep_fault_t f;

    (void)state;
    f = parse_ok("stall phase=dispatch ms=200 step=40\n");
    assert_int_equal(f.action, EEP_FAULT_STALL);
    assert_int_equal(f.phase, EEP_FAULT_PH_DISPATCH);
    assert_int_equal(f.ms, 200);
    assert_int_equal(f.step, 40);
    f = parse_ok("  hang ");
    assert_int_equal(f.action, EEP_FAULT_HANG);
    assert_int_equal(f.phase, EEP_FAULT_PH_FIRST);
    assert_int_equal(f.ms, 0);
    assert_int_equal(f.step, -1);
    f = parse_ok("delay ms=50 steps=3 phase=combine");
    assert_int_equal(f.action, EEP_FAULT_DELAY);
    assert_int_equal(f.steps, 3);
    assert_int_equal(f.phase, EEP_FAULT_PH_COMBINE);
    f = parse_ok("delay ms=5");
    assert_int_equal(f.steps, 1);
    f = parse_ok("exit-combine");
    assert_int_equal(f.action, EEP_FAULT_EXIT);
    assert_int_equal(f.phase, EEP_FAULT_PH_COMBINE);
    f = parse_ok("exit-dispatch step=7");
    assert_int_equal(f.phase, EEP_FAULT_PH_DISPATCH);
    assert_int_equal(f.step, 7);
    f = parse_ok("exit phase=barrier");
    assert_int_equal(f.phase, EEP_FAULT_PH_BARRIER);
    f = parse_ok("corrupt-id");
    assert_int_equal(f.action, EEP_FAULT_CORRUPT_ID);
    assert_int_equal(f.phase, EEP_FAULT_PH_DISPATCH);
    assert_int_equal(f.has_expert, 0);
    f = parse_ok("corrupt-id expert=-7");
    assert_int_equal(f.has_expert, 1);
    assert_int_equal(f.expert, -7);
    f = parse_ok("kill phase=combine");
    assert_int_equal(f.action, EEP_FAULT_KILL);
    f = parse_ok("stop");
    assert_int_equal(f.action, EEP_FAULT_STOP);
    assert_string_equal(eep_fault_action_name(EEP_FAULT_CORRUPT_ID), "corrupt-id");
    assert_string_equal(eep_fault_phase_name(EEP_FAULT_PH_COMBINE), "combine");
}

/* make gpu-elastic writes "PHASE KILL|STOP" to the arm file: it must still mean what it did. */
static void test_legacy_arm_line(void **state)
{
    eep_fault_t f;

    (void)state;
    f = parse_ok("dispatch KILL\n");
    assert_int_equal(f.action, EEP_FAULT_KILL);
    assert_int_equal(f.phase, EEP_FAULT_PH_DISPATCH);
    assert_int_equal(f.step, -1);
    f = parse_ok("barrier STOP");
    assert_int_equal(f.action, EEP_FAULT_STOP);
    assert_int_equal(f.phase, EEP_FAULT_PH_BARRIER);
    parse_bad("dispatch TERM", "unknown action 'dispatch'");
}

static void test_bad_input(void **state)
{
    char long_spec[400];

    (void)state;
    parse_bad("", "empty fault spec");
    parse_bad(" \n", "empty fault spec");
    parse_bad("explode", "unknown action 'explode'");
    parse_bad("stall ms=10 phase=gemm", "phase 'gemm'");
    parse_bad("stall", "stall wants ms=N");
    parse_bad("stall ms=0", "stall wants ms=N");
    parse_bad("delay steps=2", "delay wants ms=N");
    parse_bad("stall ms=ten", "ms wants a whole number");
    parse_bad("stall ms=-1", "ms wants a whole number");
    parse_bad("stall ms=3600001", "ms wants a whole number");
    parse_bad("hang step=0", "step wants a whole number >= 1");
    parse_bad("hang step=12x", "step wants a whole number >= 1");
    parse_bad("delay ms=1 steps=0", "steps wants");
    parse_bad("kill ms=5", "kill does not take 'ms'");
    parse_bad("stall ms=5 expert=3", "stall does not take 'expert'");
    parse_bad("corrupt-id phase=combine", "corrupt-id does not take 'phase'");
    parse_bad("exit-dispatch phase=combine", "names its phase already");
    parse_bad("stall 200", "'200' is not key=value");
    parse_bad("stall =200", "'=200' is not key=value");
    parse_bad("hang colour=red", "unknown key 'colour'");
    parse_bad("corrupt-id expert=99999999999", "expert wants a whole number");
    memset(long_spec, 'a', sizeof(long_spec) - 1);
    long_spec[sizeof(long_spec) - 1] = '\0';
    parse_bad(long_spec, "longer than");
    assert_int_equal(eep_fault_parse(NULL, NULL, NULL, 0), EEP_ERR_INVALID_ARG);
}

static void test_queue(void **state)
{
    const unsigned    after  = EEP_FAULT_BIT(EEP_FAULT_STALL) | EEP_FAULT_BIT(EEP_FAULT_KILL);
    const unsigned    before = EEP_FAULT_BIT(EEP_FAULT_DELAY) | EEP_FAULT_BIT(EEP_FAULT_HANG);
    eep_fault_queue_t q;
    eep_fault_t       f, g;
    int               i;

    (void)state;
    memset(&q, 0, sizeof(q));
    f = parse_ok("stall phase=combine ms=5"); /* no step: the next one */
    assert_int_equal(eep_fault_queue_add(&q, &f, 11), EEP_OK);
    f = parse_ok("kill phase=combine step=20");
    assert_int_equal(eep_fault_queue_add(&q, &f, 11), EEP_OK);
    f = parse_ok("delay ms=3 steps=3 phase=dispatch");
    assert_int_equal(eep_fault_queue_add(&q, &f, 12), EEP_OK);
    assert_int_equal(q.n, 3);
    assert_int_equal(q.f[0].step, 11);
    assert_int_equal(q.f[1].step, 20);
    /* not before its step, not at another phase, not for another action class */
    assert_int_equal(eep_fault_queue_due(&q, 10, EEP_FAULT_PH_COMBINE, after), -1);
    assert_int_equal(eep_fault_queue_due(&q, 11, EEP_FAULT_PH_DISPATCH, after), -1);
    assert_int_equal(eep_fault_queue_due(&q, 11, EEP_FAULT_PH_COMBINE, before), -1);
    i = eep_fault_queue_due(&q, 11, EEP_FAULT_PH_COMBINE, after);
    assert_int_equal(i, 0);
    g = eep_fault_queue_take(&q, i, 11);
    assert_int_equal(g.action, EEP_FAULT_STALL);
    assert_int_equal(q.n, 2);
    assert_int_equal(eep_fault_queue_due(&q, 11, EEP_FAULT_PH_COMBINE, after), -1);
    /* a late step still fires one that is overdue */
    assert_int_equal(eep_fault_queue_due(&q, 25, EEP_FAULT_PH_COMBINE, after), 0);
    /* the delay: steps 12, 13, 14 in a row, then gone */
    for (i = 12; i <= 14; i++) {
        int k = eep_fault_queue_due(&q, (uint64_t)i, EEP_FAULT_PH_DISPATCH, before);

        assert_int_equal(k, 1);
        g = eep_fault_queue_take(&q, k, (uint64_t)i);
        assert_int_equal(g.action, EEP_FAULT_DELAY);
        assert_int_equal(eep_fault_queue_due(&q, (uint64_t)i, EEP_FAULT_PH_DISPATCH, before), -1);
    }
    assert_int_equal(q.n, 1);
    assert_int_equal(eep_fault_queue_due(&q, 15, EEP_FAULT_PH_DISPATCH, before), -1);
    /* full at EEP_FAULT_QUEUE_MAX */
    while (q.n < EEP_FAULT_QUEUE_MAX) {
        assert_int_equal(eep_fault_queue_add(&q, &f, 1), EEP_OK);
    }
    assert_int_equal(eep_fault_queue_add(&q, &f, 1), EEP_ERR_NO_MEMORY);
    assert_int_equal(q.n, EEP_FAULT_QUEUE_MAX);
}

static void test_corrupt_pick(void **state)
{
    /* 3 local experts per rank: rank 1 owns 3..5 */
    const int64_t idx[] = { 0, 4, /* mixed */ 3,       11, /* mixed */ -1, 5, /* a none: skip */
                            5, 3, /* rank 1 only */ 4, 5 };

    (void)state;
    assert_int_equal(eep_fault_corrupt_pick(idx, 5, 2, 3, 1), 3);
    assert_int_equal(eep_fault_corrupt_pick(idx, 3, 2, 3, 1), -1);
    assert_int_equal(eep_fault_corrupt_pick(idx, 5, 2, 3, 0), -1);
    assert_int_equal(eep_fault_corrupt_pick(idx, 5, 2, 3, 3), -1);
    assert_int_equal(eep_fault_corrupt_pick(NULL, 5, 2, 3, 1), -1);
    assert_int_equal(eep_fault_corrupt_pick(idx, 5, 2, 0, 1), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_actions),      cmocka_unit_test(test_legacy_arm_line),
        cmocka_unit_test(test_bad_input),    cmocka_unit_test(test_queue),
        cmocka_unit_test(test_corrupt_pick),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
