/*
 * test_agent_bootstrap.c - the etcd backend of the bootstrap (control/agent/agent_bootstrap.c)
 * against a real etcd and eepd.
 *
 * Every member is a forked process with its own agent, as ranks are in a job; eepd runs in a
 * forked process too.  The parent only starts etcd, forks and reaps: it never touches gRPC, so
 * the children inherit no gRPC state (gRPC does not survive a fork).  A child reports through its
 * exit code and its stderr (a file per child, read by the parent).  Cases: N ranks agree on a
 * view and run many all-gathers of different sizes (every byte checked), a bcast and a barrier;
 * a view that excludes the caller is refused; a rank that never shows up makes the others fail
 * with EEP_ERR_TIMEOUT within the bootstrap timeout, naming it; the keys go with the leases.
 * Without an etcd binary every test is skipped with the reason.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "control/agent/agent.h"
#include "control/agent/agent_bootstrap.h"
#include "control/etcd/etcd.h"
#include "util/log.h"
#include "tests/control/etcd_test_util.h"
#include "tests/control/support/eepd_child.h"
#include "tests/control/support/etcd_server.h"
#include "util/fd_count.h"

#define MAX_RANKS       6
#define N_RANKS         4
#define N_ROUNDS        12
#define MISSING_WAIT_MS 1500

static eep_test_etcd_t g_etcd;
static int             g_up;
static int             g_job_seq;
static char            g_job[64];
static char            g_dir[256];

/* Child exit codes, so that a failure says what went wrong. */
enum {
    RC_OK   = 0,
    RC_JOIN = 10,
    RC_NO_VIEW,
    RC_REFUSAL,
    RC_CREATE,
    RC_ALLGATHER,
    RC_BYTES,
    RC_BCAST,
    RC_BARRIER,
    RC_NOT_TIMEOUT,
    RC_TOO_SLOW,
    RC_MISSING,
    RC_KEYS_LEFT,
    RC_ETCD,
    RC_FDS,
};

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

    nanosleep(&ts, NULL);
}

/* ---- children ------------------------------------------------------------------------------ */

static uint8_t pattern(uint64_t epoch, int rank, int round, size_t i)
{
    return (uint8_t)(epoch * 29 + (uint64_t)rank * 131 + (uint64_t)round * 17 + i * 7 + (i >> 8));
}

/* A view with n ranks holding this member, or NULL after @p timeout_ms. */
static eep_agent_view_t *child_wait_view(eep_agent_t *a, uint32_t n, int timeout_ms)
{
    int64_t           end = test_now_ms() + timeout_ms;
    eep_agent_view_t *v   = NULL;

    while (test_now_ms() < end) {
        if (eep_agent_wait(a, 100, &v) == EEP_OK) {
            if (v->my_rank >= 0 && v->n_ranks == n) {
                return v;
            }
            eep_agent_view_free(v);
            v = NULL;
        }
    }
    return NULL;
}

/* Views that do not hold this member are refused (my_rank -1, or someone else's rank). */
static int child_check_refusal(eep_agent_t *a, eep_agent_view_t *v)
{
    eep_agent_bootstrap_params_t p;
    eep_bootstrap_t             *bs   = NULL;
    int                          mine = v->my_rank, rc = RC_OK;

    memset(&p, 0, sizeof(p));
    p.size     = sizeof(p);
    p.agent    = a;
    p.view     = v;
    p.job      = g_job;
    v->my_rank = -1;
    if (eep_agent_bootstrap_create(&p, &bs) != EEP_ERR_INVALID_ARG || bs != NULL) {
        rc = RC_REFUSAL;
    }
    v->my_rank = (mine + 1) % (int)v->n_ranks;
    if (eep_agent_bootstrap_create(&p, &bs) != EEP_ERR_INVALID_ARG || bs != NULL) {
        rc = RC_REFUSAL;
    }
    v->my_rank = mine;
    p.job      = "a/b";
    if (eep_agent_bootstrap_create(&p, &bs) != EEP_ERR_INVALID_ARG || bs != NULL) {
        rc = RC_REFUSAL;
    }
    if (eep_agent_bootstrap_create(NULL, &bs) != EEP_ERR_INVALID_ARG) {
        rc = RC_REFUSAL;
    }
    return rc;
}

static int child_rounds(eep_bootstrap_t *bs, uint64_t epoch, int rank, int n)
{
    static const size_t lens[] = { 128, 1, 4, 4096, 65536, 7 };
    uint8_t            *mine, *all;
    size_t              len, i;
    int                 r, p, rc = RC_OK;
    uint64_t            ids[2], got[2 * MAX_RANKS];
    int64_t             t0 = test_now_ms();

    /* First: everyone agrees on the view (epoch, rank). */
    ids[0] = epoch;
    ids[1] = (uint64_t)rank;
    if (eep_bootstrap_allgather(bs, ids, got, sizeof(ids)) != EEP_OK) {
        return RC_ALLGATHER;
    }
    for (p = 0; p < n; p++) {
        if (got[2 * p] != epoch || got[2 * p + 1] != (uint64_t)p) {
            fprintf(stderr, "rank %d: peer %d says epoch %llu rank %llu\n", rank, p,
                    (unsigned long long)got[2 * p], (unsigned long long)got[2 * p + 1]);
            return RC_BYTES;
        }
    }
    mine = malloc(65536);
    all  = malloc(65536 * (size_t)n);
    if (mine == NULL || all == NULL) {
        free(mine);
        free(all);
        return RC_ALLGATHER;
    }
    for (r = 0; r < N_ROUNDS && rc == RC_OK; r++) {
        len = lens[r % (int)(sizeof(lens) / sizeof(lens[0]))];
        for (i = 0; i < len; i++) {
            mine[i] = pattern(epoch, rank, r, i);
        }
        memset(all, 0xEE, len * (size_t)n);
        if (eep_bootstrap_allgather(bs, mine, all, len) != EEP_OK) {
            rc = RC_ALLGATHER;
            break;
        }
        for (p = 0; p < n && rc == RC_OK; p++) {
            for (i = 0; i < len; i++) {
                if (all[(size_t)p * len + i] != pattern(epoch, p, r, i)) {
                    fprintf(stderr, "rank %d: round %d byte %zu of peer %d is %u\n", rank, r, i, p,
                            all[(size_t)p * len + i]);
                    rc = RC_BYTES;
                    break;
                }
            }
        }
    }
    if (rc == RC_OK) {
        /* bcast and barrier ride on the all-gather. */
        for (i = 0; i < 128; i++) {
            mine[i] = rank == 1 ? pattern(epoch, 1, 99, i) : 0;
        }
        if (eep_bootstrap_bcast(bs, mine, 128, 1) != EEP_OK) {
            rc = RC_BCAST;
        }
        for (i = 0; i < 128 && rc == RC_OK; i++) {
            if (mine[i] != pattern(epoch, 1, 99, i)) {
                rc = RC_BCAST;
            }
        }
        if (rc == RC_OK && eep_bootstrap_barrier(bs) != EEP_OK) {
            rc = RC_BARRIER;
        }
        fprintf(stderr, "rank %d: %d exchanges through etcd in %lld ms\n", rank, N_ROUNDS + 3,
                (long long)(test_now_ms() - t0));
    }
    free(mine);
    free(all);
    return rc;
}

/*
 * One rank.  @p absent_rank: the rank that joins the view but never bootstraps (-1: none); it
 * holds its membership until @p hold_fd reaches end-of-file.
 */
static int child_rank(int n, int absent_rank, int hold_fd)
{
    eep_agent_params_t           ap;
    eep_agent_bootstrap_params_t bp;
    eep_agent_t                 *a = NULL;
    eep_agent_view_t            *v;
    eep_bootstrap_t             *bs = NULL;
    eep_status_t                 status;
    int                          rc = RC_OK, missing = -1;
    int64_t                      t0, waited;
    char                         c;

    memset(&ap, 0, sizeof(ap));
    ap.size        = sizeof(ap);
    ap.job         = g_job;
    ap.lease_ttl_s = 2;
    if (eep_agent_create(&ap, &a) != EEP_OK) {
        return RC_JOIN;
    }
    v = child_wait_view(a, (uint32_t)n, 20000);
    if (v == NULL) {
        eep_agent_destroy(a);
        return RC_NO_VIEW;
    }
    if (v->my_rank == absent_rank) {
        /* Hold the rank, never write a key; leave when the parent says so (bounded by alarm). */
        while (read(hold_fd, &c, 1) > 0) {
        }
        goto out;
    }
    if (v->my_rank == 0 && absent_rank < 0) {
        rc = child_check_refusal(a, v);
        if (rc != RC_OK) {
            goto out;
        }
    }
    memset(&bp, 0, sizeof(bp));
    bp.size       = sizeof(bp);
    bp.agent      = a;
    bp.view       = v;
    bp.job        = g_job;
    bp.timeout_ms = absent_rank >= 0 ? MISSING_WAIT_MS : 15000;
    if (eep_agent_bootstrap_create(&bp, &bs) != EEP_OK || eep_bootstrap_rank(bs) != v->my_rank ||
        eep_bootstrap_nranks(bs) != n) {
        rc = RC_CREATE;
        goto out;
    }
    if (eep_agent_bootstrap_missing(bs, &missing) != EEP_ERR_NOT_FOUND) {
        rc = RC_MISSING;
        goto out;
    }
    if (absent_rank < 0) {
        rc = child_rounds(bs, v->epoch, v->my_rank, n);
        goto out;
    }
    t0     = test_now_ms();
    status = eep_bootstrap_barrier(bs);
    waited = test_now_ms() - t0;
    fprintf(stderr, "rank %d: barrier without rank %d: %s after %lld ms\n", v->my_rank, absent_rank,
            eep_status_name(status), (long long)waited);
    if (status != EEP_ERR_TIMEOUT) {
        rc = RC_NOT_TIMEOUT;
    } else if (waited < MISSING_WAIT_MS - 50 || waited > MISSING_WAIT_MS + 3000) {
        rc = RC_TOO_SLOW;
    } else if (eep_agent_bootstrap_missing(bs, &missing) != EEP_OK || missing != absent_rank) {
        rc = RC_MISSING;
    }
out:
    eep_bootstrap_destroy(bs);
    eep_agent_view_free(v);
    eep_agent_destroy(a);
    return rc;
}

/*
 * One rank makes and ends a bootstrap CHURN_VIEWS times, an all-gather through etcd each time
 * (as every fresh view of the elastic loop does: its unique id travels that way), and its open
 * fds must not grow.  The elastic GPU run of 2026-12-03 saw a survivor's fds climb by ~1 every
 * two views.
 */
#define CHURN_VIEWS 40
static int child_churn(void)
{
    eep_agent_params_t           ap;
    eep_agent_t                 *a  = NULL;
    eep_agent_view_t            *v  = NULL;
    eep_bootstrap_t             *bs = NULL;
    eep_agent_bootstrap_params_t bp;
    int                          rc = RC_OK, i, fds0 = -1, fds1 = -1;
    uint8_t                      mine[64], all[64];

    memset(&ap, 0, sizeof(ap));
    ap.size        = sizeof(ap);
    ap.job         = g_job;
    ap.lease_ttl_s = 2;
    if (eep_agent_create(&ap, &a) != EEP_OK) {
        return RC_JOIN;
    }
    v = child_wait_view(a, 1, 20000);
    if (v == NULL) {
        eep_agent_destroy(a);
        return RC_NO_VIEW;
    }
    memset(mine, 7, sizeof(mine));
    for (i = 0; i < CHURN_VIEWS && rc == RC_OK; i++) {
        memset(&bp, 0, sizeof(bp));
        bp.size       = sizeof(bp);
        bp.agent      = a;
        bp.view       = v;
        bp.job        = g_job;
        bp.timeout_ms = 15000;
        if (eep_agent_bootstrap_create(&bp, &bs) != EEP_OK) {
            rc = RC_CREATE;
            break;
        }
        if (eep_bootstrap_allgather(bs, mine, all, sizeof(mine)) != EEP_OK) {
            rc = RC_ALLGATHER;
        }
        eep_bootstrap_destroy(bs);
        bs = NULL;
        v->epoch++; /* the next view's keys */
        if (i == 4) {
            sleep_ms(200);
            fds0 = eep_open_fds(); /* after the first ones: gRPC's own threads and pollers are up */
        }
    }
    sleep_ms(200);
    fds1 = eep_open_fds();
    fprintf(stderr, "open fds after 5 bootstraps %d, after %d: %d\n", fds0, CHURN_VIEWS, fds1);
    if (rc == RC_OK && (fds0 < 0 || fds1 > fds0 + 2)) {
        rc = RC_FDS;
    }
    eep_agent_view_free(v);
    eep_agent_destroy(a);
    return rc;
}

/* After every rank left: no bootstrap key of the job is left (they went with the leases). */
static int child_check_keys_gone(void)
{
    char             prefix[128];
    eep_etcd_t      *etcd = NULL;
    eep_etcd_range_t r;
    int64_t          end = test_now_ms() + 6000;
    size_t           i, boot;
    int              rc = RC_KEYS_LEFT;

    snprintf(prefix, sizeof(prefix), "/eep/%s/views/", g_job);
    if (eep_etcd_create(NULL, &etcd) != EEP_OK) {
        return RC_ETCD;
    }
    while (test_now_ms() < end) {
        if (eep_etcd_range(etcd, prefix, 1, &r) != EEP_OK) {
            rc = RC_ETCD;
            break;
        }
        for (boot = 0, i = 0; i < r.count; i++) {
            boot += strstr((const char *)r.kvs[i].key, "/boot/") != NULL;
        }
        eep_etcd_range_free(&r);
        if (boot == 0) {
            rc = RC_OK;
            break;
        }
        sleep_ms(100);
    }
    eep_etcd_destroy(etcd);
    return rc;
}

/* Fork @p fn into a child whose stderr goes to g_dir/<name>.log. */
static pid_t spawn(const char *name, int n, int absent_rank, int hold[2], int keys)
{
    char  path[512];
    pid_t pid;

    snprintf(path, sizeof(path), "%s/%s.log", g_dir, name);
    pid = fork();
    if (pid == 0) {
        int rc;

        alarm(90);
        if (freopen(path, "w", stderr) == NULL) {
            _exit(99);
        }
        if (hold != NULL) {
            close(hold[1]);
        }
        rc = keys == 2 ? child_churn()
             : keys    ? child_check_keys_gone()
                       : child_rank(n, absent_rank, hold ? hold[0] : -1);
        fflush(stderr);
        _exit(rc);
    }
    return pid;
}

/* ---- parent -------------------------------------------------------------------------------- */

/*
 * Reap @p pids until @p want of them exited or @p timeout_ms passed; with @p kill_rest, SIGKILL
 * and reap the others.  rcs[i]: the exit code, -1 when killed by a signal, -2 still running.
 * Call with rcs filled with -2 the first time.  @return how many have exited.
 */
static int reap_until(pid_t *pids, int n, int *rcs, int want, int timeout_ms, int kill_rest)
{
    int64_t end  = test_now_ms() + timeout_ms;
    int     done = 0, i, st;

    for (i = 0; i < n; i++) {
        done += rcs[i] != -2;
    }
    while (done < want && test_now_ms() < end) {
        for (i = 0; i < n; i++) {
            if (rcs[i] == -2 && waitpid(pids[i], &st, WNOHANG) == pids[i]) {
                rcs[i] = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
                done++;
            }
        }
        sleep_ms(20);
    }
    for (i = 0; kill_rest && i < n; i++) {
        if (rcs[i] == -2) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], &st, 0);
            rcs[i] = -1;
            done++;
        }
    }
    return done;
}

static void reap(pid_t *pids, int n, int *rcs, int timeout_ms)
{
    int i;

    for (i = 0; i < n; i++) {
        rcs[i] = -2;
    }
    reap_until(pids, n, rcs, n, timeout_ms, 1);
}

static int grep_log(const char *name, const char *needle)
{
    char  path[512], line[1024];
    FILE *f;
    int   hit = 0;

    snprintf(path, sizeof(path), "%s/%s.log", g_dir, name);
    f = fopen(path, "r");
    if (f == NULL) {
        return 0;
    }
    while (!hit && fgets(line, sizeof(line), f) != NULL) {
        hit = strstr(line, needle) != NULL;
    }
    fclose(f);
    return hit;
}

static void show_log(const char *name)
{
    char  path[512], line[1024];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s.log", g_dir, name);
    f = fopen(path, "r");
    if (f == NULL) {
        return;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        printf("    %s: %s", name, line);
    }
    fclose(f);
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_job, sizeof(g_job), "boottest%d-%d", (int)getpid(), ++g_job_seq);
    return 0;
}

static void test_allgather_rounds(void **state)
{
    pid_t   eepd, pids[N_RANKS + 1];
    int     rcs[N_RANKS + 1], i, bad = 0;
    char    name[32];
    int64_t t0;

    (void)state;
    NEED_ETCD(g_up);
    eepd = eep_test_eepd_fork(g_job, 0);
    assert_true(eepd > 0);
    t0 = test_now_ms();
    for (i = 0; i < N_RANKS; i++) {
        snprintf(name, sizeof(name), "ranks-%d", i);
        pids[i] = spawn(name, N_RANKS, -1, NULL, 0);
        assert_true(pids[i] > 0);
    }
    reap(pids, N_RANKS, rcs, 60000);
    printf("%d ranks: join, %d all-gathers, bcast, barrier, leave in %lld ms\n", N_RANKS,
           N_ROUNDS + 1, (long long)(test_now_ms() - t0));
    show_log("ranks-0");
    for (i = 0; i < N_RANKS; i++) {
        snprintf(name, sizeof(name), "ranks-%d", i);
        if (rcs[i] != RC_OK) {
            printf("child %d exited %d\n", i, rcs[i]);
            show_log(name);
            bad++;
        }
    }
    pids[0] = spawn("keys", 0, -1, NULL, 1);
    reap(pids, 1, rcs, 20000);
    eep_test_eepd_stop(eepd, 10000);
    assert_int_equal(bad, 0);
    assert_int_equal(rcs[0], RC_OK);
}

static void test_missing_rank_times_out(void **state)
{
    const int n = 3;
    pid_t     eepd, pids[3];
    int       rcs[3], hold[2], i, bad = 0, named = 0;
    char      name[32];

    (void)state;
    NEED_ETCD(g_up);
    eepd = eep_test_eepd_fork(g_job, 0);
    assert_true(eepd > 0);
    assert_int_equal(pipe(hold), 0); /* after eepd's fork: only the ranks hold its write end */
    for (i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "missing-%d", i);
        pids[i] = spawn(name, n, n - 1, hold, 0);
        assert_true(pids[i] > 0);
    }
    close(hold[0]);
    /* The two present ranks finish (timed out) while the absent one still holds its rank: had
       it left early, eepd would publish a view without it. */
    for (i = 0; i < n; i++) {
        rcs[i] = -2;
    }
    reap_until(pids, n, rcs, n - 1, 60000, 0);
    close(hold[1]);
    reap_until(pids, n, rcs, n, 20000, 1);
    for (i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "missing-%d", i);
        show_log(name);
        if (rcs[i] != RC_OK) {
            printf("child %d exited %d\n", i, rcs[i]);
            bad++;
        }
        named += grep_log(name, "no data from rank 2");
    }
    eep_test_eepd_stop(eepd, 10000);
    assert_int_equal(bad, 0);
    assert_int_equal(named, n - 1);
}

/* Fresh views one after another on one rank: its open fds stay flat (child_churn). */
static void test_bootstrap_churn_fds(void **state)
{
    pid_t eepd, pid;
    int   rc;

    (void)state;
    NEED_ETCD(g_up);
    eepd = eep_test_eepd_fork(g_job, 0);
    assert_true(eepd > 0);
    pid = spawn("churn", 1, -1, NULL, 2);
    assert_true(pid > 0);
    reap(&pid, 1, &rc, 60000);
    show_log("churn");
    eep_test_eepd_stop(eepd, 10000);
    assert_int_equal(rc, RC_OK);
}

static int group_setup(void **state)
{
    (void)state;
    if (etcd_test_group_start(&g_etcd, &g_up) != 0) {
        return -1;
    }
    snprintf(g_dir, sizeof(g_dir), "%s", g_etcd.dir);
    setenv("EEP_ETCD_ENDPOINTS", g_etcd.endpoints, 1);
    setenv("EEP_AGENT_RDMA", "0", 1);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    etcd_test_group_stop(&g_etcd, g_up);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_allgather_rounds, setup),
        cmocka_unit_test_setup(test_missing_rank_times_out, setup),
        cmocka_unit_test_setup(test_bootstrap_churn_fds, setup),
    };

    eep_log_set_level(EEP_LOG_LEVEL_ERROR);
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
