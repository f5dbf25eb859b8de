/*
 * test_bootstrap.c - the standalone bootstrap: file and TCP backends with forked ranks,
 * all-gather/bcast/barrier results, timeouts when a rank is missing, and bad arguments.
 */
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "eep/eep.h"
#include "elastic/runtime/bootstrap.h"
#include "util/log.h"

#define NRANKS 4
#define ROUNDS 5

static char tmpdir[256];

static int setup_dir(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/eep-bootstrap-XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
    return 0;
}

static int teardown_dir(void **state)
{
    char cmd[300];

    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static int free_port(void)
{
    struct sockaddr_in a;
    socklen_t          len = sizeof(a);
    int                fd  = socket(AF_INET, SOCK_STREAM, 0), port;

    memset(&a, 0, sizeof(a));
    a.sin_family      = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        return -1;
    }
    port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* One rank's work; returns the process exit code (0 = all checks held). */
static int rank_main(const eep_bootstrap_params_t *params)
{
    eep_bootstrap_t *bs;
    uint64_t         mine, all[NRANKS];
    char             blob[40];
    int              r, i;

    if (eep_bootstrap_create(params, &bs) != EEP_OK) {
        return 10;
    }
    if (eep_bootstrap_rank(bs) != params->rank || eep_bootstrap_nranks(bs) != NRANKS) {
        return 11;
    }
    for (r = 0; r < ROUNDS; r++) {
        mine = (uint64_t)params->rank * 1000 + (uint64_t)r;
        memset(all, 0xff, sizeof(all));
        if (eep_bootstrap_allgather(bs, &mine, all, sizeof(mine)) != EEP_OK) {
            return 12;
        }
        for (i = 0; i < NRANKS; i++) {
            if (all[i] != (uint64_t)i * 1000 + (uint64_t)r) {
                return 13;
            }
        }
    }
    memset(blob, params->rank, sizeof(blob));
    if (eep_bootstrap_bcast(bs, blob, sizeof(blob), 2) != EEP_OK) {
        return 14;
    }
    for (i = 0; i < (int)sizeof(blob); i++) {
        if (blob[i] != 2) {
            return 15;
        }
    }
    if (eep_bootstrap_barrier(bs) != EEP_OK) {
        return 16;
    }
    eep_bootstrap_destroy(bs);
    return 0;
}

/* Fork NRANKS ranks running rank_main and wait (bounded) for all; assert they all passed. */
static void run_ranks(eep_bootstrap_params_t base)
{
    pid_t pids[NRANKS];
    int   i, status, waited;

    for (i = 0; i < NRANKS; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            eep_bootstrap_params_t p = base;

            p.rank = i;
            _exit(rank_main(&p));
        }
    }
    for (i = 0; i < NRANKS; i++) {
        for (waited = 0; waited < 3000; waited++) { /* 30 s at most */
            pid_t got = waitpid(pids[i], &status, WNOHANG);

            if (got == pids[i]) {
                break;
            }
            usleep(10000);
        }
        if (waited == 3000) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], &status, 0);
            fail_msg("rank %d hung", i);
        }
        assert_true(WIFEXITED(status));
        if (WEXITSTATUS(status) != 0) {
            fail_msg("rank %d failed check %d", i, WEXITSTATUS(status));
        }
    }
}

static void test_file_backend(void **state)
{
    eep_bootstrap_params_t p;

    (void)state;
    memset(&p, 0, sizeof(p));
    p.size       = sizeof(p);
    p.kind       = EEP_BOOTSTRAP_FILE;
    p.nranks     = NRANKS;
    p.path       = tmpdir;
    p.timeout_ms = 20000;
    run_ranks(p);
}

static void test_tcp_backend(void **state)
{
    eep_bootstrap_params_t p;
    char                   addr[64];
    int                    port = free_port();

    (void)state;
    assert_true(port > 0);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    memset(&p, 0, sizeof(p));
    p.size       = sizeof(p);
    p.kind       = EEP_BOOTSTRAP_TCP;
    p.nranks     = NRANKS;
    p.address    = addr;
    p.timeout_ms = 20000;
    run_ranks(p);
}

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* A missing rank is a timeout close to the deadline, never a hang. */
static void test_missing_rank_times_out(void **state)
{
    eep_bootstrap_params_t p;
    eep_bootstrap_t       *bs;
    char                   addr[64];
    double                 t0;
    int                    x = 1, all[2];

    (void)state;
    memset(&p, 0, sizeof(p));
    p.size       = sizeof(p);
    p.kind       = EEP_BOOTSTRAP_FILE;
    p.rank       = 0;
    p.nranks     = 2;
    p.path       = tmpdir;
    p.timeout_ms = 300;
    assert_int_equal(eep_bootstrap_create(&p, &bs), EEP_OK);
    t0 = now_ms();
    assert_int_equal(eep_bootstrap_allgather(bs, &x, all, sizeof(x)), EEP_ERR_TIMEOUT);
    assert_true(now_ms() - t0 >= 290 && now_ms() - t0 < 3000);
    eep_bootstrap_destroy(bs);

    /* TCP: rank 0 alone waits for joins; rank 1 alone finds nobody listening. */
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", free_port());
    p.kind    = EEP_BOOTSTRAP_TCP;
    p.address = addr;
    t0        = now_ms();
    bs        = NULL;
    assert_int_equal(eep_bootstrap_create(&p, &bs), EEP_ERR_TIMEOUT);
    assert_null(bs);
    assert_true(now_ms() - t0 >= 290 && now_ms() - t0 < 3000);
    p.rank = 1;
    assert_int_equal(eep_bootstrap_create(&p, &bs), EEP_ERR_TIMEOUT);
    assert_null(bs);
}

static void test_bad_arguments(void **state)
{
    eep_bootstrap_params_t p;
    eep_bootstrap_t       *bs = NULL;
    int                    x  = 0;

    (void)state;
    assert_int_equal(eep_bootstrap_create(NULL, NULL), EEP_ERR_INVALID_ARG);
    memset(&p, 0, sizeof(p));
    p.size   = sizeof(p);
    p.kind   = EEP_BOOTSTRAP_FILE;
    p.rank   = 3;
    p.nranks = 2;
    p.path   = tmpdir;
    assert_int_equal(eep_bootstrap_create(&p, &bs), EEP_ERR_INVALID_ARG); /* rank >= nranks */
    p.rank = 0;
    p.path = NULL;
    assert_int_equal(eep_bootstrap_create(&p, &bs), EEP_ERR_INVALID_ARG); /* no directory */
    p.kind    = EEP_BOOTSTRAP_TCP;
    p.address = "no-port-here";
    assert_int_equal(eep_bootstrap_create(&p, &bs), EEP_ERR_INVALID_ARG);
    p.size = sizeof(p) + 8;
    assert_int_equal(eep_bootstrap_create(&p, &bs), EEP_ERR_INVALID_ARG); /* unknown size */
    p.size = sizeof(p);
    p.kind = (eep_bootstrap_kind_t)42;
    assert_int_equal(eep_bootstrap_create(&p, &bs), EEP_ERR_INVALID_ARG);
    /* Knob route: EEP_BOOTSTRAP must name a backend. */
    setenv("EEP_BOOTSTRAP", "carrier-pigeon:coop", 1);
    setenv("EEP_RANK", "0", 1);
    setenv("EEP_WORLD_SIZE", "1", 1);
    assert_int_equal(eep_bootstrap_create(NULL, &bs), EEP_ERR_INVALID_ARG);
    unsetenv("EEP_BOOTSTRAP");
    unsetenv("EEP_RANK");
    unsetenv("EEP_WORLD_SIZE");
    assert_null(bs);
    assert_int_equal(eep_bootstrap_allgather(NULL, &x, &x, sizeof(x)), EEP_ERR_INVALID_ARG);
    eep_bootstrap_destroy(NULL);
}

/* The environment route: a one-rank world over a directory. */
static void test_env_single_rank(void **state)
{
    eep_bootstrap_t *bs = NULL;
    char             spec[300];
    int              x = 42, all = 0;

    (void)state;
    snprintf(spec, sizeof(spec), "file:%s/single", tmpdir);
    setenv("EEP_BOOTSTRAP", spec, 1);
    setenv("EEP_RANK", "0", 1);
    setenv("EEP_WORLD_SIZE", "1", 1);
    assert_int_equal(eep_bootstrap_create(NULL, &bs), EEP_OK);
    unsetenv("EEP_BOOTSTRAP");
    unsetenv("EEP_RANK");
    unsetenv("EEP_WORLD_SIZE");
    assert_int_equal(eep_bootstrap_nranks(bs), 1);
    assert_int_equal(eep_bootstrap_allgather(bs, &x, &all, sizeof(x)), EEP_OK);
    assert_int_equal(all, 42);
    eep_bootstrap_destroy(bs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_file_backend, setup_dir, teardown_dir),
        cmocka_unit_test(test_tcp_backend),
        cmocka_unit_test_setup_teardown(test_missing_rank_times_out, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_bad_arguments, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_env_single_rank, setup_dir, teardown_dir),
    };

    eep_log_set_level(EEP_LOG_LEVEL_NONE);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
