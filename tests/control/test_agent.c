/*
 * test_agent.c - libeep_agent's public API against a real etcd and an in-process eepd.
 *
 * Joining and polling (ranks, placement, the notify callback), the epoch rule (nothing at or
 * below an epoch already handed out), a lost lease (EEP_ERR_LEASE_LOST once, then a NEW member
 * id and a newer view), fault reports (the suspect is evicted and rejoins), graceful leave (a
 * new view at once), NIC discovery with no RDMA device, and bad arguments.  Without an etcd
 * binary every test is skipped with the reason.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "control/agent/agent.h"
#include "control/agent/agent_int.h" /* the agent's own etcd client: its keepalive */
#include "control/eepd/eepd.h"
#include "control/etcd/etcd.h"
#include "util/log.h"
#include "tests/control/etcd_test_util.h"
#include "tests/control/support/etcd_server.h"

static eep_test_etcd_t g_etcd;
static int             g_up;
static eepd_t         *g_eepd;
static pthread_t       g_loop;
static int             g_job_seq;
static char            g_job[64];

static void *eepd_thread(void *arg)
{
    eepd_run(arg);
    return NULL;
}

/* A fresh job per test, so that views of one test never reach the next. */
static int setup(void **state)
{
    eepd_config_t cfg;

    (void)state;
    if (!g_up) {
        return 0;
    }
    snprintf(g_job, sizeof(g_job), "agenttest%d-%d", (int)getpid(), ++g_job_seq);
    if (eep_config_load(&eepd_knob_table, &cfg) != EEP_OK) {
        return -1;
    }
    snprintf(cfg.job, sizeof(cfg.job), "%s", g_job);
    snprintf(cfg.listen, sizeof(cfg.listen), "127.0.0.1:0");
    cfg.settle_ms    = 200;
    cfg.lease_ttl_s  = 2;
    cfg.num_experts  = 8;
    cfg.metrics_port = 0;
    if (eepd_create(&cfg, 1, &g_eepd) != EEP_OK) {
        return -1;
    }
    return pthread_create(&g_loop, NULL, eepd_thread, g_eepd) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    if (g_eepd != NULL) {
        g_eepd->stop = 1;
        pthread_join(g_loop, NULL);
        eepd_destroy(g_eepd);
        g_eepd = NULL;
    }
    return 0;
}

static int group_setup(void **state)
{
    (void)state;
    if (etcd_test_group_start(&g_etcd, &g_up) != 0) {
        return -1;
    }
    setenv("EEP_ETCD_ENDPOINTS", g_etcd.endpoints, 1);
    setenv("EEP_AGENT_RDMA", "1", 1);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    etcd_test_group_stop(&g_etcd, g_up);
    return 0;
}

static void notify_count(void *arg)
{
    __atomic_add_fetch((int *)arg, 1, __ATOMIC_RELAXED);
}

static eep_agent_t *join(int *notified)
{
    eep_agent_params_t p;
    eep_agent_t       *a = NULL;

    memset(&p, 0, sizeof(p));
    p.size        = sizeof(p);
    p.job         = g_job;
    p.lease_ttl_s = 2;
    p.gpu_uuid    = "GPU-test";
    p.notify      = notified != NULL ? notify_count : NULL;
    p.notify_arg  = notified;
    assert_int_equal(eep_agent_create(&p, &a), EEP_OK);
    return a;
}

/* Wait for a view in which this agent holds a rank and which has @p n ranks. */
static eep_agent_view_t *wait_view(eep_agent_t *a, uint32_t n, int timeout_ms)
{
    int64_t           end = test_now_ms() + timeout_ms;
    eep_agent_view_t *v   = NULL;
    eep_status_t      status;

    while (test_now_ms() < end) {
        status = eep_agent_wait(a, 100, &v);
        if (status == EEP_OK) {
            if (v->my_rank >= 0 && v->n_ranks == n) {
                return v;
            }
            eep_agent_view_free(v);
            v = NULL;
        }
    }
    fail_msg("no view with %u ranks holding this member within %d ms", n, timeout_ms);
    return NULL;
}

static void test_join_and_poll(void **state)
{
    int               n1 = 0, n2 = 0;
    eep_agent_t      *a, *b;
    eep_agent_view_t *va, *vb, *again = NULL;
    char              ida[256], idb[256];

    (void)state;
    NEED_ETCD(g_up);
    a  = join(&n1);
    b  = join(&n2);
    va = wait_view(a, 2, 10000);
    vb = wait_view(b, 2, 10000);
    assert_int_equal(va->epoch, vb->epoch);
    assert_int_not_equal(va->my_rank, vb->my_rank);
    assert_int_equal(eep_agent_member_id(a, ida, sizeof(ida)), EEP_OK);
    assert_int_equal(eep_agent_member_id(b, idb, sizeof(idb)), EEP_OK);
    assert_string_equal(va->members[va->my_rank].id, ida);
    assert_string_equal(va->members[vb->my_rank].id, idb);
    assert_string_equal(va->members[0].gpu_uuid, "GPU-test");
    assert_int_equal(va->num_experts, 8);
    assert_int_equal(va->copies, 1);
    assert_int_equal(va->expert_ranks[0], 0);
    assert_int_equal(va->expert_ranks[7], 1);
    assert_int_equal(eep_agent_epoch(a), va->epoch);
    /* Nothing new: INPROGRESS, and the same epoch is never handed out twice. */
    assert_int_equal(eep_agent_poll(a, &again), EEP_INPROGRESS);
    /* The callback runs just after the view is stored (and a waiter woken): allow it a moment. */
    for (int64_t end = test_now_ms() + 2000;
         test_now_ms() < end && __atomic_load_n(&n1, __ATOMIC_RELAXED) == 0;) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };

        nanosleep(&ts, NULL);
    }
    assert_true(__atomic_load_n(&n1, __ATOMIC_RELAXED) > 0);
    assert_int_equal(eep_agent_member_id(a, ida, 4), EEP_ERR_INVALID_ARG);
    eep_agent_view_free(va);
    eep_agent_view_free(vb);
    eep_agent_destroy(b);
    eep_agent_destroy(a);
}

/* Revoke the lease of member @p id behind its agent's back (the id ends with the lease id in
   hex). */
static void revoke_lease_of(const char *id)
{
    eep_etcd_params_t ep;
    eep_etcd_t       *etcd = NULL;

    memset(&ep, 0, sizeof(ep));
    ep.size      = sizeof(ep);
    ep.endpoints = g_etcd.endpoints;
    assert_int_equal(eep_etcd_create(&ep, &etcd), EEP_OK);
    assert_int_equal(eep_etcd_lease_revoke(etcd, (int64_t)strtoull(strrchr(id, '-') + 1, NULL, 16)),
                     EEP_OK);
    eep_etcd_destroy(etcd);
}

/* @p a back in a 2-member view under a member id other than @p before: that view. */
static eep_agent_view_t *wait_rejoined(eep_agent_t *a, const char *before)
{
    eep_agent_view_t *v          = wait_view(a, 2, 10000);
    char              after[256] = "";

    assert_int_equal(eep_agent_member_id(a, after, sizeof(after)), EEP_OK);
    assert_string_not_equal(before, after);
    assert_string_equal(v->members[v->my_rank].id, after);
    return v;
}

static void test_lease_lost_rejoins_as_new_member(void **state)
{
    eep_agent_t      *a, *b;
    eep_agent_view_t *v, *w = NULL;
    char              before[256];
    uint64_t          epoch;
    int64_t           end;
    eep_status_t      status = EEP_INPROGRESS;
    int               lost   = 0;

    (void)state;
    NEED_ETCD(g_up);
    a = join(NULL);
    b = join(NULL);
    v = wait_view(a, 2, 10000);
    eep_agent_view_free(wait_view(b, 2, 10000));
    epoch = v->epoch;
    eep_agent_view_free(v);
    assert_int_equal(eep_agent_member_id(a, before, sizeof(before)), EEP_OK);
    revoke_lease_of(before);
    end = test_now_ms() + 10000;
    while (test_now_ms() < end && !lost) {
        status = eep_agent_wait(a, 100, &w);
        if (status == EEP_ERR_LEASE_LOST) {
            lost = 1;
        } else if (status == EEP_OK) {
            assert_true(w->epoch > epoch); /* never an old epoch */
            epoch = w->epoch;
            eep_agent_view_free(w);
        }
    }
    assert_true(lost);
    /* Reported once only. */
    status = eep_agent_poll(a, &w);
    assert_int_not_equal(status, EEP_ERR_LEASE_LOST);
    if (status == EEP_OK) {
        eep_agent_view_free(w);
    }
    v = wait_rejoined(a, before);
    assert_true(v->epoch > epoch || v->epoch == eep_agent_epoch(a));
    eep_agent_view_free(v);
    eep_agent_destroy(b);
    eep_agent_destroy(a);
}

/* The rejoin waits for the owner: until a poll has reported the loss, no new member appears
 * (a process whose loop hangs stays out of the views; it used to be back at once). */
static void test_lost_lease_rejoins_after_owner_saw_it(void **state)
{
    eep_agent_t      *a, *b;
    eep_agent_view_t *w = NULL;
    char              before[256], after[256] = "";
    int64_t           end;

    (void)state;
    NEED_ETCD(g_up);
    a = join(NULL);
    b = join(NULL);
    eep_agent_view_free(wait_view(a, 2, 10000));
    eep_agent_view_free(wait_view(b, 2, 10000));
    assert_int_equal(eep_agent_member_id(a, before, sizeof(before)), EEP_OK);
    revoke_lease_of(before);
    /* the agent sees the loss (newest epoch UINT64_MAX: a loss waits to be reported) ... */
    end = test_now_ms() + 10000;
    while (test_now_ms() < end && eep_agent_newest_epoch(a) != UINT64_MAX) {
        usleep(20 * 1000);
    }
    assert_true(eep_agent_newest_epoch(a) == UINT64_MAX);
    /* ... and stays out while nobody polls (a rejoin takes a few ms) */
    usleep(1500 * 1000);
    assert_int_equal(eep_agent_member_id(a, after, sizeof(after)), EEP_ERR_BUSY);
    assert_int_equal(eep_agent_poll(a, &w), EEP_ERR_LEASE_LOST);
    eep_agent_view_free(wait_rejoined(a, before));
    eep_agent_destroy(b);
    eep_agent_destroy(a);
}

struct revoke_arg {
    eep_etcd_t *etcd;
    int64_t     lease;
};

/* The revoke blocks while etcd is stopped; what it returns then (OK or a timeout) is not the
   test's concern: the lease ends either way. */
static void *revoke_thread(void *p)
{
    struct revoke_arg *r = p;

    (void)eep_etcd_lease_revoke(r->etcd, r->lease);
    return NULL;
}

/* A lease whose keepalive has ended backs no view, even before the lost callback has run: etcd's
 * client ends the keepalive first and calls back after, and a poll in between handed out a
 * queued view that still gave the member a rank (CI, agent_pause_view).  Here the keepalive is
 * ended by a revoke on the agent's own client while etcd is stopped (the key stays, no watch
 * event, no callback), with a newer view holding this member already queued: no poll may hand
 * it out, and the loss comes once etcd is back. */
static void test_no_view_after_keepalive_ended(void **state)
{
    eep_agent_t      *a, *b, *c;
    eep_agent_view_t *w = NULL;
    uint64_t          epoch;
    int64_t           end, deadline;
    struct revoke_arg r;
    pthread_t         th;
    eep_status_t      status = EEP_INPROGRESS;

    (void)state;
    NEED_ETCD(g_up);
    a     = join(NULL);
    b     = join(NULL);
    w     = wait_view(a, 2, 10000);
    epoch = w->epoch;
    eep_agent_view_free(w);
    eep_agent_view_free(wait_view(b, 2, 10000));
    c = join(NULL);
    /* the 3-rank view reaches a's queue; a does not poll */
    end = test_now_ms() + 10000;
    while (test_now_ms() < end && eep_agent_newest_epoch(a) <= epoch) {
        usleep(20 * 1000);
    }
    assert_true(eep_agent_newest_epoch(a) > epoch && eep_agent_newest_epoch(a) != UINT64_MAX);
    pthread_mutex_lock(&a->lock);
    r.lease = a->lease;
    pthread_mutex_unlock(&a->lock);
    r.etcd = a->etcd;
    assert_int_equal(eep_test_etcd_pause(&g_etcd, 0, 1), 0);
    assert_int_equal(pthread_create(&th, NULL, revoke_thread, &r), 0);
    end = test_now_ms() + 5000;
    while (test_now_ms() < end && eep_etcd_lease_deadline(a->etcd, r.lease, &deadline) == EEP_OK) {
        usleep(1000);
    }
    assert_int_equal(eep_etcd_lease_deadline(a->etcd, r.lease, &deadline), EEP_ERR_NOT_FOUND);
    /* the keepalive has ended, the lease is unconfirmed: nothing handed out */
    status = eep_agent_poll(a, &w);
    if (status == EEP_OK) {
        int rank = w->my_rank;

        eep_agent_view_free(w);
        eep_test_etcd_pause(&g_etcd, 0, 0);
        pthread_join(th, NULL);
        fail_msg("a view (rank %d) was handed out after the lease's keepalive ended", rank);
    }
    assert_int_equal(status, EEP_INPROGRESS);
    assert_int_equal(eep_test_etcd_pause(&g_etcd, 0, 0), 0);
    pthread_join(th, NULL);
    /* etcd back: the revoke (or the expiry) deletes the key, and the loss is reported first */
    end = test_now_ms() + 10000;
    while (test_now_ms() < end) {
        status = eep_agent_wait(a, 100, &w);
        if (status == EEP_ERR_LEASE_LOST) {
            break;
        }
        if (status == EEP_OK) {
            int rank = w->my_rank;

            eep_agent_view_free(w);
            assert_true(rank < 0); /* never a rank under the ended lease */
        }
    }
    assert_int_equal(status, EEP_ERR_LEASE_LOST);
    eep_agent_destroy(c);
    eep_agent_destroy(b);
    eep_agent_destroy(a);
}

static void test_fault_report_evicts_suspect(void **state)
{
    eep_agent_t      *a, *b;
    eep_agent_view_t *v;
    char              idb[256], idb2[256];
    eep_status_t      status;
    int64_t           end;
    int               lost = 0;

    (void)state;
    NEED_ETCD(g_up);
    a = join(NULL);
    b = join(NULL);
    v = wait_view(a, 2, 10000);
    eep_agent_view_free(wait_view(b, 2, 10000));
    assert_int_equal(eep_agent_member_id(b, idb, sizeof(idb)), EEP_OK);
    assert_int_equal(eep_agent_report_fault(a, idb, 1 - v->my_rank, v->epoch, "combine", "timeout"),
                     EEP_OK);
    assert_int_equal(eep_agent_report_fault(a, "../leader", 0, v->epoch, "x", NULL),
                     EEP_ERR_INVALID_ARG);
    eep_agent_view_free(v);
    end = test_now_ms() + 10000;
    while (test_now_ms() < end && !lost) {
        eep_agent_view_t *w = NULL;

        status = eep_agent_wait(b, 100, &w);
        lost   = status == EEP_ERR_LEASE_LOST;
        if (status == EEP_OK) {
            eep_agent_view_free(w);
        }
    }
    assert_true(lost);
    v = wait_view(b, 2, 10000);
    assert_int_equal(eep_agent_member_id(b, idb2, sizeof(idb2)), EEP_OK);
    assert_string_not_equal(idb, idb2);
    eep_agent_view_free(v);
    eep_agent_destroy(b);
    eep_agent_destroy(a);
}

static void test_leave_is_immediate(void **state)
{
    eep_agent_t      *a, *b;
    eep_agent_view_t *v;
    int64_t           t0;

    (void)state;
    NEED_ETCD(g_up);
    a = join(NULL);
    b = join(NULL);
    eep_agent_view_free(wait_view(a, 2, 10000));
    eep_agent_view_free(wait_view(b, 2, 10000));
    t0 = test_now_ms();
    assert_int_equal(eep_agent_leave(b), EEP_OK);
    assert_int_equal(eep_agent_leave(b), EEP_OK); /* idempotent */
    v = wait_view(a, 1, 5000);
    printf("leave -> view without it in %lld ms (settle 200 ms not applied)\n",
           (long long)(test_now_ms() - t0));
    assert_true(test_now_ms() - t0 < 1500);
    assert_string_equal(v->reason, "leave");
    eep_agent_view_free(v);
    eep_agent_destroy(b);
    eep_agent_destroy(a);
}

static void test_nics_and_bad_args(void **state)
{
    char             **names = NULL;
    size_t             n     = 99, i;
    eep_agent_t       *a     = NULL;
    eep_agent_params_t p;

    (void)state;
    assert_int_equal(eep_agent_find_nics(&names, &n), EEP_OK);
    printf("rdma devices: %zu\n", n);
    for (i = 0; i < n; i++) {
        free(names[i]);
    }
    free(names);
    assert_int_equal(eep_agent_find_nics(NULL, &n), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_agent_create(NULL, &a), EEP_ERR_INVALID_ARG);
    memset(&p, 0, sizeof(p));
    assert_int_equal(eep_agent_create(&p, &a), EEP_ERR_INVALID_ARG); /* size unset */
    p.size = sizeof(p);
    p.job  = "a/b";
    assert_int_equal(eep_agent_create(&p, &a), EEP_ERR_INVALID_ARG);
    assert_null(a);
    eep_agent_destroy(NULL);
    assert_int_equal(eep_agent_poll(NULL, NULL), EEP_ERR_INVALID_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_join_and_poll, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lease_lost_rejoins_as_new_member, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lost_lease_rejoins_after_owner_saw_it, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_no_view_after_keepalive_ended, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault_report_evicts_suspect, setup, teardown),
        cmocka_unit_test_setup_teardown(test_leave_is_immediate, setup, teardown),
        cmocka_unit_test(test_nics_and_bad_args),
    };

    eep_log_set_level(EEP_LOG_LEVEL_ERROR);
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
