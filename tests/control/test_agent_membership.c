/*
 * test_agent_membership.c - the agent as libeep's membership provider
 * (control/agent/agent_membership.c) against a real etcd and eepd on 127.0.0.1.
 *
 * Three forked ranks, each with its own agent and provider (gRPC state never crosses a fork: the
 * parent only starts etcd, forks and reaps), eepd in a fork of its own placing 256 experts.  Each
 * rank polls until a view of three ranks holds it and checks it (eep_view_check, the placement
 * equal to eep_placement_default for 256 experts on 3 ranks: uneven blocks); the root publishes a
 * unique id, the others fetch it byte for byte; a second, different id for the same epoch and
 * attempt is refused (EEP_ERR_EXISTS); an id under another attempt written by a rank that is not
 * the root is refused by the fetcher; a fetch with nothing published times out in its bound; a
 * report for an epoch that is not the last is refused; the root reports the last rank, eepd evicts
 * it, the root gets a view without that member and the evicted rank its lease loss; the evicted
 * rank then reports the root from its old epoch, and eepd ignores it (the root is not evicted).  Without an
 * etcd binary every test is skipped with the reason.
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
#include "control/agent/agent_membership.h"
#include "control/etcd/etcd.h"
#include "eep/membership.h"
#include "proto/eep.pb-c.h"
#include "util/log.h"
#include "tests/control/etcd_test_util.h"
#include "tests/control/support/eepd_child.h"
#include "tests/control/support/etcd_server.h"

#define N_RANKS     3
#define N_EXPERTS   256
#define FETCH_BOUND 300

static eep_test_etcd_t g_etcd;
static int             g_up;
static char            g_job[64];
static char            g_dir[256];

enum {
    RC_OK   = 0,
    RC_JOIN = 10,
    RC_NO_VIEW,
    RC_VIEW_BAD,
    RC_PLACEMENT,
    RC_PUBLISH,
    RC_NOT_EXISTS,
    RC_FETCH,
    RC_UID_BYTES,
    RC_FORGED_ACCEPTED,
    RC_NOT_TIMEOUT,
    RC_BOUND,
    RC_STALE_REPORT,
    RC_REPORT,
    RC_NO_SHRUNK_VIEW,
    RC_NOT_EVICTED,
    RC_ZOMBIE_REPORT,
    RC_ZOMBIE_EVICTED_ROOT,
    RC_NOT_ABANDONED,
};

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

    nanosleep(&ts, NULL);
}

static void uid_pattern(eep_comm_uid_t *u, uint64_t epoch, int salt)
{
    int i;

    for (i = 0; i < EEP_COMM_UID_BYTES; i++) {
        u->bytes[i] = (unsigned char)(epoch * 37 + (uint64_t)i * 11 + (uint64_t)salt * 101);
    }
}

/* Poll @p ms until a view of @p n ranks that holds this rank (kept: ids copied into @p ids). */
static int wait_view(const eep_membership_t *ms, int n, int timeout_ms, eep_view_t *v_p)
{
    int64_t end = test_now_ms() + timeout_ms;

    while (test_now_ms() < end) {
        eep_view_t v;
        int        changed = 0;

        if (ms->ops->poll(ms->ctx, &v, &changed) == EEP_OK && changed) {
            if (v.world == n && v.my_rank >= 0) {
                *v_p = v;
                return 0;
            }
            ms->ops->release(ms->ctx, &v);
        }
        sleep_ms(20);
    }
    return -1;
}

static int check_view(const eep_view_t *v)
{
    eep_expert_place_t want[N_EXPERTS];
    int                counts[N_RANKS], e;

    if (eep_view_check(v) != EEP_OK || v->num_experts != N_EXPERTS || v->root < 0 ||
        v->root >= v->world) {
        fprintf(stderr, "view %llu: check failed (experts %d, root %d)\n",
                (unsigned long long)v->epoch, v->num_experts, v->root);
        return RC_VIEW_BAD;
    }
    if (eep_placement_default(N_EXPERTS, N_RANKS, want) != EEP_OK ||
        eep_placement_check(v->placement, N_EXPERTS, N_RANKS, counts) != EEP_OK) {
        return RC_PLACEMENT;
    }
    for (e = 0; e < N_EXPERTS; e++) {
        if (v->placement[e].rank != want[e].rank || v->placement[e].slot != want[e].slot) {
            fprintf(stderr, "expert %d at (%d, %d), the default policy says (%d, %d)\n", e,
                    v->placement[e].rank, v->placement[e].slot, want[e].rank, want[e].slot);
            return RC_PLACEMENT;
        }
    }
    fprintf(stderr, "rank %d: view %llu, %d ranks, experts per rank %d/%d/%d\n", v->my_rank,
            (unsigned long long)v->epoch, v->world, counts[0], counts[1], counts[2]);
    return counts[0] + counts[1] + counts[2] == N_EXPERTS && counts[0] != counts[2] ? RC_OK
                                                                                    : RC_PLACEMENT;
}

static int child_root(const eep_membership_t *ms, const eep_view_t *v, int victim)
{
    eep_comm_uid_t u, other;
    char           victim_id[256];
    int64_t        end;

    uid_pattern(&u, v->epoch, 0);
    if (ms->ops->publish_uid(ms->ctx, v->epoch, 0, &u) != EEP_OK) {
        return RC_PUBLISH;
    }
    /* Idempotent for the same bytes (a retried write), refused for others. */
    if (ms->ops->publish_uid(ms->ctx, v->epoch, 0, &u) != EEP_OK) {
        return RC_PUBLISH;
    }
    uid_pattern(&other, v->epoch, 7);
    if (ms->ops->publish_uid(ms->ctx, v->epoch, 0, &other) != EEP_ERR_EXISTS) {
        return RC_NOT_EXISTS;
    }
    if (ms->ops->report_fault(ms->ctx, victim, v->epoch + 5, "test") != EEP_ERR_STALE_EPOCH) {
        return RC_STALE_REPORT;
    }
    /* Let the others fetch and forge first, then evict the victim. */
    sleep_ms(1500);
    snprintf(victim_id, sizeof(victim_id), "%s", v->member_ids[victim]);
    ms->ops->release(ms->ctx, (eep_view_t *)v);
    if (ms->ops->report_fault(ms->ctx, victim, v->epoch, "dispatch timeout") != EEP_OK) {
        return RC_REPORT;
    }
    end = test_now_ms() + 15000;
    while (test_now_ms() < end) {
        eep_view_t nv;
        int        changed = 0, i, has = 0;

        if (ms->ops->poll(ms->ctx, &nv, &changed) == EEP_OK && changed) {
            for (i = 0; i < nv.world; i++) {
                has |= strcmp(nv.member_ids[i], victim_id) == 0;
            }
            fprintf(stderr, "root: view %llu of %d ranks, victim %s\n",
                    (unsigned long long)nv.epoch, nv.world, has ? "still in" : "gone");
            ms->ops->release(ms->ctx, &nv);
            if (!has) {
                break;
            }
        }
        sleep_ms(20);
    }
    if (test_now_ms() >= end) {
        return RC_NO_SHRUNK_VIEW;
    }
    /* Stay a member while the evicted rank's stale report about this rank is judged. */
    end = test_now_ms() + 9000;
    while (test_now_ms() < end) {
        eep_view_t nv;
        int        changed = 0;

        if (ms->ops->poll(ms->ctx, &nv, &changed) == EEP_OK && changed) {
            ms->ops->release(ms->ctx, &nv);
        }
        sleep_ms(50);
    }
    return RC_OK;
}

/*
 * Views newer than @p epoch exist now: has_newer says so, and a fetch for an id nobody publishes
 * is given up after ~2 s (EEP_ERR_STALE_EPOCH) instead of waiting out its 10 s timeout.
 */
static int check_abandon(const eep_membership_t *ms, uint64_t epoch)
{
    eep_comm_uid_t u;
    eep_status_t   status;
    int64_t        t0 = test_now_ms(), waited;

    if (!ms->ops->has_newer(ms->ctx, epoch) || ms->ops->has_newer(ms->ctx, UINT64_MAX - 1)) {
        fprintf(stderr, "victim: has_newer wrong\n");
        return RC_NOT_ABANDONED;
    }
    status = ms->ops->fetch_uid(ms->ctx, epoch, 5, 10000, &u);
    waited = test_now_ms() - t0;
    fprintf(stderr, "victim: fetch of a skipped view: %s after %lld ms\n", eep_status_name(status),
            (long long)waited);
    return status == EEP_ERR_STALE_EPOCH && waited >= 1900 && waited < 8000 ? RC_OK
                                                                            : RC_NOT_ABANDONED;
}

/*
 * The evicted rank reports the root from its old epoch under its old member id, as a zombie's
 * agent does before it has learnt that its lease is gone (woken from SIGSTOP): the fault key as
 * eep_agent_report_fault writes it.  eepd must not evict the root on it.
 */
static int zombie_report(const char *my_old_id, const char *root_id, int root, uint64_t epoch)
{
    Eep__V1__Fault f    = EEP__V1__FAULT__INIT;
    eep_etcd_t    *etcd = NULL;
    uint8_t        buf[1024];
    char           key[512];
    eep_status_t   status;
    size_t         len;

    f.reporter     = (char *)my_old_id;
    f.suspect      = (char *)root_id;
    f.suspect_rank = root;
    f.epoch        = epoch;
    f.phase        = "dispatch";
    f.detail       = "zombie";
    len            = eep__v1__fault__get_packed_size(&f);
    if (len > sizeof(buf) || eep_etcd_create(NULL, &etcd) != EEP_OK) {
        return RC_ZOMBIE_REPORT;
    }
    eep__v1__fault__pack(&f, buf);
    snprintf(key, sizeof(key), "/eep/%s/faults/%s", g_job, root_id);
    status = eep_etcd_put(etcd, key, buf, len, 0, NULL);
    fprintf(stderr, "victim: reported the root from epoch %llu as %s: %s\n",
            (unsigned long long)epoch, my_old_id, eep_status_name(status));
    if (status != EEP_OK) {
        eep_etcd_destroy(etcd);
        return RC_ZOMBIE_REPORT;
    }
    /* eepd deletes a fault key when it evicts on it (with the member key): the key must stay. */
    sleep_ms(3000);
    {
        eep_etcd_range_t r;
        int              left;

        status = eep_etcd_range(etcd, key, 0, &r);
        left   = status == EEP_OK && r.count == 1;
        if (status == EEP_OK) {
            eep_etcd_range_free(&r);
        }
        eep_etcd_destroy(etcd);
        fprintf(stderr, "victim: the stale report is %s\n",
                left ? "still there (ignored)" : "gone");
        return left ? RC_OK : RC_ZOMBIE_EVICTED_ROOT;
    }
}

static int child_other(eep_agent_t *a, const eep_membership_t *ms, const eep_view_t *v, int forger,
                       int victim)
{
    char root_id[256], my_id[256];

    eep_comm_uid_t u, want, junk;
    eep_status_t   status;
    int64_t        t0, waited, end;

    snprintf(root_id, sizeof(root_id), "%s", v->member_ids[v->root]);
    snprintf(my_id, sizeof(my_id), "%s", v->member_ids[v->my_rank]);
    (void)a;
    uid_pattern(&want, v->epoch, 0);
    if (ms->ops->fetch_uid(ms->ctx, v->epoch, 0, 10000, &u) != EEP_OK) {
        return RC_FETCH;
    }
    if (memcmp(u.bytes, want.bytes, EEP_COMM_UID_BYTES) != 0) {
        return RC_UID_BYTES;
    }
    if (v->my_rank == forger) {
        uid_pattern(&junk, v->epoch, 3);
        if (ms->ops->publish_uid(ms->ctx, v->epoch, 1, &junk) != EEP_OK) {
            return RC_PUBLISH;
        }
    } else if (ms->ops->fetch_uid(ms->ctx, v->epoch, 1, 10000, &u) != EEP_ERR_INVALID_ARG) {
        return RC_FORGED_ACCEPTED;
    }
    t0     = test_now_ms();
    status = ms->ops->fetch_uid(ms->ctx, v->epoch, 3, FETCH_BOUND, &u);
    waited = test_now_ms() - t0;
    if (status != EEP_ERR_TIMEOUT) {
        return RC_NOT_TIMEOUT;
    }
    if (waited < FETCH_BOUND - 10 || waited > FETCH_BOUND + 2000) {
        fprintf(stderr, "fetch bound %d ms, waited %lld ms\n", FETCH_BOUND, (long long)waited);
        return RC_BOUND;
    }
    if (v->my_rank != victim) {
        return RC_OK;
    }
    /* The victim: evicted by eepd after the root's report, it sees its lease lost. */
    end = test_now_ms() + 15000;
    while (test_now_ms() < end) {
        eep_view_t nv;
        int        changed = 0;

        status = ms->ops->poll(ms->ctx, &nv, &changed);
        if (status == EEP_ERR_LEASE_LOST) {
            fprintf(stderr, "victim: lease lost\n");
            return check_abandon(ms, v->epoch) != RC_OK
                       ? RC_NOT_ABANDONED
                       : zombie_report(my_id, root_id, v->root, v->epoch);
        }
        if (status == EEP_OK && changed) {
            int out = nv.my_rank < 0;

            ms->ops->release(ms->ctx, &nv);
            if (out) {
                fprintf(stderr, "victim: a view without it\n");
                return check_abandon(ms, v->epoch) != RC_OK
                           ? RC_NOT_ABANDONED
                           : zombie_report(my_id, root_id, v->root, v->epoch);
            }
        }
        sleep_ms(20);
    }
    return RC_NOT_EVICTED;
}

static int child_rank(void)
{
    eep_agent_params_t            ap;
    eep_agent_membership_params_t mp;
    eep_membership_t              ms = { NULL, NULL };
    eep_agent_t                  *a  = NULL;
    eep_view_t                    v;
    int                           rc, forger, victim;

    memset(&ap, 0, sizeof(ap));
    ap.size        = sizeof(ap);
    ap.job         = g_job;
    ap.lease_ttl_s = 2;
    if (eep_agent_create(&ap, &a) != EEP_OK) {
        return RC_JOIN;
    }
    memset(&mp, 0, sizeof(mp));
    mp.size  = sizeof(mp);
    mp.agent = a;
    mp.job   = g_job;
    if (eep_agent_membership_create(&mp, &ms) != EEP_OK) {
        eep_agent_destroy(a);
        return RC_JOIN;
    }
    if (wait_view(&ms, N_RANKS, 20000, &v) != 0) {
        rc = RC_NO_VIEW;
        goto out;
    }
    rc = check_view(&v);
    if (rc != RC_OK) {
        goto out;
    }
    /* Roles from the view alone: the first non-root rank forges, the last one is evicted. */
    forger = v.root == 0 ? 1 : 0;
    victim = v.root == N_RANKS - 1 ? N_RANKS - 2 : N_RANKS - 1;
    rc     = v.my_rank == v.root ? child_root(&ms, &v, victim)
                                 : child_other(a, &ms, &v, forger, victim);
out:
    eep_agent_membership_destroy(&ms);
    eep_agent_destroy(a);
    return rc;
}

static pid_t spawn(int i)
{
    char  path[512];
    pid_t pid;

    snprintf(path, sizeof(path), "%s/ms-%d.log", g_dir, i);
    pid = fork();
    if (pid == 0) {
        int rc;

        alarm(90);
        if (freopen(path, "w", stderr) == NULL) {
            _exit(99);
        }
        rc = child_rank();
        fflush(stderr);
        _exit(rc);
    }
    return pid;
}

static int reap(pid_t pid, int timeout_ms)
{
    int64_t end = test_now_ms() + timeout_ms;
    int     st;

    while (test_now_ms() < end) {
        if (waitpid(pid, &st, WNOHANG) == pid) {
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        }
        sleep_ms(20);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -2;
}

static void show_log(int i)
{
    char  path[512], line[1024];
    FILE *f;

    snprintf(path, sizeof(path), "%s/ms-%d.log", g_dir, i);
    f = fopen(path, "r");
    if (f == NULL) {
        return;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        printf("    rank child %d: %s", i, line);
    }
    fclose(f);
}

static void test_membership_ops(void **state)
{
    pid_t eepd, pids[N_RANKS];
    int   rcs[N_RANKS], i, bad = 0;

    (void)state;
    NEED_ETCD(g_up);
    snprintf(g_job, sizeof(g_job), "mstest%d", (int)getpid());
    eepd = eep_test_eepd_fork(g_job, N_EXPERTS);
    assert_true(eepd > 0);
    for (i = 0; i < N_RANKS; i++) {
        pids[i] = spawn(i);
        assert_true(pids[i] > 0);
    }
    for (i = 0; i < N_RANKS; i++) {
        rcs[i] = reap(pids[i], 60000);
    }
    eep_test_eepd_stop(eepd, 10000);
    for (i = 0; i < N_RANKS; i++) {
        show_log(i);
        if (rcs[i] != RC_OK) {
            printf("child %d exited %d\n", i, rcs[i]);
            bad++;
        }
    }
    assert_int_equal(bad, 0);
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
        cmocka_unit_test(test_membership_ops),
    };

    eep_log_set_level(EEP_LOG_LEVEL_ERROR);
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
