/* test_clock.c - eep_clock_ms, the host code's one monotonic clock: it never goes back, it
   follows real time, and it resolves well under a millisecond (deadlines compare fractions). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <time.h>
#include <cmocka.h>

#include "util/clock.h"

static void test_never_goes_back(void **state)
{
    double prev = eep_clock_ms();
    int    i;

    (void)state;
    for (i = 0; i < 100000; i++) {
        double now = eep_clock_ms();

        assert_true(now >= prev);
        prev = now;
    }
}

static void test_follows_a_sleep(void **state)
{
    const struct timespec nap = { 0, 20 * 1000 * 1000 };
    double                t0, t1;

    (void)state;
    t0 = eep_clock_ms();
    nanosleep(&nap, NULL);
    t1 = eep_clock_ms();
    assert_true(t1 - t0 >= 20.0);
    assert_true(t1 - t0 < 2000.0);
}

static void test_sub_millisecond(void **state)
{
    int fractional = 0, i;

    (void)state;
    /* an integer-millisecond clock reads whole numbers every time */
    for (i = 0; i < 1000 && !fractional; i++) {
        double t = eep_clock_ms();

        fractional = t != (double)(long long)t;
    }
    assert_true(fractional);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_never_goes_back),
        cmocka_unit_test(test_follows_a_sleep),
        cmocka_unit_test(test_sub_millisecond),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
