/*
 * test_wait_loop.c - the query/abort loop behind eep_runtime_stream_wait (elastic/runtime/wait_loop.c),
 * driven by a fake stream (named as such: the driver is not under test here).
 *
 * The first version of this loop (in eep-rank) returned EEP_INPROGRESS after the second poll
 * because its condition reused the status of the previous poll; every barrier that took longer
 * than one poll "failed".  test_waits_through_many_polls holds that.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "eep/eep.h"
#include "elastic/runtime/wait_loop.h"

/* Fake stream: busy for `busy` queries, then `final` (EEP_ERR_ABORTED once aborted, when set). */
typedef struct {
    int          busy;
    int          queries;
    int          aborts;
    int          abort_at;     /* should_abort says yes from this query on (0: never) */
    int          abort_finish; /* queries still busy after the abort */
    eep_status_t final;
} fake_stream_t;

static eep_status_t fake_query(void *ctx)
{
    fake_stream_t *f = ctx;

    f->queries++;
    if (f->aborts > 0) {
        return f->abort_finish-- > 0 ? EEP_INPROGRESS : EEP_ERR_ABORTED;
    }
    return f->queries <= f->busy ? EEP_INPROGRESS : f->final;
}

static void fake_abort(void *ctx)
{
    ((fake_stream_t *)ctx)->aborts++;
}

static int fake_should_abort(void *ctx)
{
    fake_stream_t *f = ctx;

    return f->abort_at != 0 && f->queries >= f->abort_at;
}

static eep_wait_loop_t fake_loop(fake_stream_t *f)
{
    eep_wait_loop_t w = { fake_query, fake_abort, f, fake_should_abort, f, 0 };

    return w;
}

static void test_waits_through_many_polls(void **state)
{
    fake_stream_t   f = { .busy = 1000, .final = EEP_OK };
    eep_wait_loop_t w = fake_loop(&f);

    (void)state;
    assert_int_equal(eep_wait_loop_run(&w), EEP_OK);
    assert_int_equal(f.queries, 1001);
    assert_int_equal(f.aborts, 0);
}

static void test_done_at_once(void **state)
{
    fake_stream_t   f = { .busy = 0, .final = EEP_ERR_PEER_TIMEOUT };
    eep_wait_loop_t w = fake_loop(&f);

    (void)state;
    assert_int_equal(eep_wait_loop_run(&w), EEP_ERR_PEER_TIMEOUT);
    assert_int_equal(f.queries, 1);
}

static void test_abort_once_then_wait_for_the_work(void **state)
{
    fake_stream_t   f = { .busy = 1 << 30, .abort_at = 5, .abort_finish = 7, .final = EEP_OK };
    eep_wait_loop_t w = fake_loop(&f);

    (void)state;
    /* The aborted work still runs for 7 queries: the loop waits for it and aborts only once. */
    assert_int_equal(eep_wait_loop_run(&w), EEP_ERR_ABORTED);
    assert_int_equal(f.aborts, 1);
    assert_int_equal(f.queries, 5 + 7 + 1);
}

static void test_no_watch(void **state)
{
    fake_stream_t   f = { .busy = 3, .final = EEP_OK };
    eep_wait_loop_t w = fake_loop(&f);

    (void)state;
    w.should_abort = NULL;
    assert_int_equal(eep_wait_loop_run(&w), EEP_OK);
    assert_int_equal(f.aborts, 0);
}

static void test_public_wrapper_rejects_null(void **state)
{
    (void)state;
    assert_int_equal(eep_runtime_stream_wait(NULL, NULL, NULL, NULL), EEP_ERR_INVALID_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_waits_through_many_polls),
        cmocka_unit_test(test_done_at_once),
        cmocka_unit_test(test_abort_once_then_wait_for_the_work),
        cmocka_unit_test(test_no_watch),
        cmocka_unit_test(test_public_wrapper_rejects_null),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
