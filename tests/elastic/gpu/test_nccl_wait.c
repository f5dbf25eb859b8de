/*
 * test_nccl_wait.c - the bounded waits on non-blocking NCCL work (elastic/gpu/nccl_util.c), above
 * all eep_nccl_wait_child: a shrink or split of a non-blocking parent.
 *
 * NCCL is not under test here: a FAKE NCCL (fake_comm_t and the three entry points below, which
 * this executable's definitions put in front of libnccl's) plays NCCL 2.28.9's behaviour as read
 * in its source (init.cc ncclCommInitChildComm, group.cc ncclGroupEndInternal): the call returns
 * ncclSuccess with the child still NULL, the parent reads ncclInProgress, and a thread writes the
 * child and then settles the parent.  The GPU check of the real thing is tests/gpu/test_ep_hybrid
 * (shrink_and_next_runtime) and make gpu-elastic (views applied "by shrink").
 */
#include <nccl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "elastic/gpu/nccl_util.h"
#include "util/clock.h"

/* ---- the fake NCCL ---- */

typedef struct fake_comm {
    int async;   /* ncclResult_t, read and written atomically */
    int aborted; /* ncclCommAbort calls */
} fake_comm_t;

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async)
{
    *async = (ncclResult_t)__atomic_load_n(&((fake_comm_t *)(void *)comm)->async, __ATOMIC_ACQUIRE);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    if (comm != NULL) {
        __atomic_add_fetch(&((fake_comm_t *)(void *)comm)->aborted, 1, __ATOMIC_RELEASE);
    }
    return ncclSuccess;
}

const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    return "(fake NCCL)";
}

/* What the fake child-making thread does, and when. */
typedef struct fake_job {
    fake_comm_t *parent, *child;
    ncclComm_t  *slot;
    int          delay_ms;     /* before it writes the slot */
    int          write_child;  /* 0: NCCL made no communicator */
    int          parent_after; /* the parent's result once done */
    int          child_after;  /* the child's result, delay_ms later again */
    pthread_t    thread;
    int          started;
} fake_job_t;

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

    nanosleep(&ts, NULL);
}

static void *fake_job_main(void *arg)
{
    fake_job_t *j = (fake_job_t *)arg;

    sleep_ms(j->delay_ms);
    if (j->write_child) {
        __atomic_store_n(j->slot, (ncclComm_t)(void *)j->child, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&j->parent->async, j->parent_after, __ATOMIC_RELEASE);
    sleep_ms(j->delay_ms);
    __atomic_store_n(&j->child->async, j->child_after, __ATOMIC_RELEASE);
    return NULL;
}

/* The fake ncclCommShrink of a non-blocking parent: returns at once, the child NULL. */
static ncclResult_t fake_shrink(ncclComm_t parent, ncclComm_t *slot, void *arg)
{
    fake_job_t *j = (fake_job_t *)arg;

    assert_ptr_equal(parent, (ncclComm_t)(void *)j->parent);
    j->slot          = slot;
    j->parent->async = ncclInProgress;
    j->child->async  = ncclInProgress;
    assert_int_equal(pthread_create(&j->thread, NULL, fake_job_main, j), 0);
    j->started = 1;
    return ncclSuccess;
}

static ncclResult_t fake_shrink_refused(ncclComm_t parent, ncclComm_t *slot, void *arg)
{
    (void)parent;
    (void)slot;
    (void)arg;
    return ncclInvalidArgument;
}

static void job_join(fake_job_t *j)
{
    if (j->started) {
        pthread_join(j->thread, NULL);
        j->started = 0;
    }
}

/* ---- tests ---- */

/* The 2.28.9 case: success, the child NULL at return, written 30 ms later; ready 30 ms after. */
static void test_child_written_later(void **state)
{
    fake_comm_t parent = { ncclSuccess, 0 }, child = { ncclSuccess, 0 };
    fake_job_t  j   = { &parent, &child, NULL, 30, 1, ncclSuccess, ncclSuccess, 0, 0 };
    ncclComm_t  got = NULL;

    (void)state;
    assert_int_equal(eep_nccl_wait_child((ncclComm_t)(void *)&parent, fake_shrink, &j,
                                         eep_clock_ms() + 5000, "shrink", NULL, NULL, &got),
                     EEP_OK);
    assert_ptr_equal(got, (ncclComm_t)(void *)&child);
    assert_int_equal(__atomic_load_n(&child.async, __ATOMIC_ACQUIRE), ncclSuccess);
    assert_int_equal(child.aborted, 0);
    job_join(&j);
}

/* A parent that carries the fault of the view being left does not fail a good child. */
static void test_parent_fault_child_good(void **state)
{
    fake_comm_t parent = { ncclSuccess, 0 }, child = { ncclSuccess, 0 };
    fake_job_t  j   = { &parent, &child, NULL, 10, 1, ncclRemoteError, ncclSuccess, 0, 0 };
    ncclComm_t  got = NULL;

    (void)state;
    assert_int_equal(eep_nccl_wait_child((ncclComm_t)(void *)&parent, fake_shrink, &j,
                                         eep_clock_ms() + 5000, "shrink", NULL, NULL, &got),
                     EEP_OK);
    assert_ptr_equal(got, (ncclComm_t)(void *)&child);
    job_join(&j);
}

/* NCCL made no communicator: the parent's error, no child, nothing aborted. */
static void test_no_child(void **state)
{
    fake_comm_t parent = { ncclSuccess, 0 }, child = { ncclSuccess, 0 };
    fake_job_t  j   = { &parent, &child, NULL, 10, 0, ncclSystemError, ncclSuccess, 0, 0 };
    ncclComm_t  got = (ncclComm_t)(void *)&j;

    (void)state;
    assert_int_equal(eep_nccl_wait_child((ncclComm_t)(void *)&parent, fake_shrink, &j,
                                         eep_clock_ms() + 5000, "shrink", NULL, NULL, &got),
                     EEP_ERR_IO);
    assert_null(got);
    job_join(&j);
    assert_int_equal(child.aborted, 0);
}

/* A child that fails its own init is aborted and not handed out. */
static void test_child_fails(void **state)
{
    fake_comm_t parent = { ncclSuccess, 0 }, child = { ncclSuccess, 0 };
    fake_job_t  j   = { &parent, &child, NULL, 10, 1, ncclSuccess, ncclRemoteError, 0, 0 };
    ncclComm_t  got = NULL;

    (void)state;
    assert_int_equal(eep_nccl_wait_child((ncclComm_t)(void *)&parent, fake_shrink, &j,
                                         eep_clock_ms() + 5000, "shrink", NULL, NULL, &got),
                     EEP_ERR_PEER_LOST);
    assert_null(got);
    assert_int_equal(child.aborted, 1);
    job_join(&j);
}

/* The deadline passes while NCCL's thread runs: a timeout in bounded time, and the thread's
   later write goes to memory that is still valid (a stack slot here is a use after return,
   which the sanitizer build reports). */
static void test_deadline_then_late_write(void **state)
{
    fake_comm_t parent = { ncclSuccess, 0 }, child = { ncclSuccess, 0 };
    fake_job_t  j   = { &parent, &child, NULL, 300, 1, ncclSuccess, ncclSuccess, 0, 0 };
    ncclComm_t  got = NULL;
    double      t0  = eep_clock_ms();

    (void)state;
    assert_int_equal(eep_nccl_wait_child((ncclComm_t)(void *)&parent, fake_shrink, &j,
                                         eep_clock_ms() + 50, "shrink", NULL, NULL, &got),
                     EEP_ERR_TIMEOUT);
    assert_true(eep_clock_ms() - t0 < 250.0);
    assert_null(got);
    job_join(&j); /* writes the slot after our return */
    assert_ptr_equal(*j.slot, (ncclComm_t)(void *)&child);
    free(j.slot); /* the slot is the caller's to lose; the test frees it to stay leak-clean */
}

static int abandon_at_once(void *arg, double waited_ms)
{
    (void)waited_ms;
    return *(int *)arg;
}

static void test_abandon(void **state)
{
    fake_comm_t parent = { ncclSuccess, 0 }, child = { ncclSuccess, 0 };
    fake_job_t  j   = { &parent, &child, NULL, 200, 1, ncclSuccess, ncclSuccess, 0, 0 };
    ncclComm_t  got = NULL;
    int         yes = 1;

    (void)state;
    assert_int_equal(eep_nccl_wait_child((ncclComm_t)(void *)&parent, fake_shrink, &j,
                                         eep_clock_ms() + 5000, "shrink", abandon_at_once, &yes,
                                         &got),
                     EEP_ERR_STALE_EPOCH);
    assert_null(got);
    job_join(&j);
    free(j.slot);
}

static void test_refused_and_bad_args(void **state)
{
    fake_comm_t parent = { ncclSuccess, 0 };
    ncclComm_t  got    = (ncclComm_t)(void *)&parent;

    (void)state;
    assert_int_equal(eep_nccl_wait_child((ncclComm_t)(void *)&parent, fake_shrink_refused, NULL,
                                         eep_clock_ms() + 5000, "shrink", NULL, NULL, &got),
                     EEP_ERR_INVALID_ARG);
    assert_null(got);
    assert_int_equal(eep_nccl_wait_child(NULL, fake_shrink_refused, NULL, eep_clock_ms() + 5000,
                                         "shrink", NULL, NULL, &got),
                     EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_nccl_wait_child((ncclComm_t)(void *)&parent, NULL, NULL,
                                         eep_clock_ms() + 5000, "shrink", NULL, NULL, &got),
                     EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_nccl_wait_child((ncclComm_t)(void *)&parent, fake_shrink_refused, NULL,
                                         eep_clock_ms() + 5000, "shrink", NULL, NULL, NULL),
                     EEP_ERR_INVALID_ARG);
}

/* eep_nccl_wait: in progress for a while, then the result; a timeout when it never ends. */
static void *settle_later(void *arg)
{
    sleep_ms(20);
    __atomic_store_n(&((fake_comm_t *)arg)->async, ncclSuccess, __ATOMIC_RELEASE);
    return NULL;
}

static void test_wait(void **state)
{
    fake_comm_t c = { ncclInProgress, 0 };
    pthread_t   t;

    (void)state;
    assert_int_equal(pthread_create(&t, NULL, settle_later, &c), 0);
    assert_int_equal(
        eep_nccl_wait((ncclComm_t)(void *)&c, ncclInProgress, eep_clock_ms() + 5000, "op"), EEP_OK);
    pthread_join(t, NULL);
    c.async = ncclInProgress;
    assert_int_equal(eep_nccl_wait((ncclComm_t)(void *)&c, ncclSuccess, eep_clock_ms() + 20, "op"),
                     EEP_ERR_TIMEOUT);
    assert_int_equal(
        eep_nccl_wait((ncclComm_t)(void *)&c, ncclInvalidUsage, eep_clock_ms() + 20, "op"),
        EEP_ERR_INVALID_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_child_written_later),
        cmocka_unit_test(test_parent_fault_child_good),
        cmocka_unit_test(test_no_child),
        cmocka_unit_test(test_child_fails),
        cmocka_unit_test(test_deadline_then_late_write),
        cmocka_unit_test(test_abandon),
        cmocka_unit_test(test_refused_and_bad_args),
        cmocka_unit_test(test_wait),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
