/*
 * test_gpu_share.c - the registry of runtimes per GPU (elastic/gpu/gpu_share.c) with real
 * processes: forked children join and hold their entries, one is SIGKILLed (its entry is stale
 * and removed by the next count), runtimes of one process count once, GPUs are apart; and the
 * share of SMs each sharer counts on (eep_ep_shared_sms).  No GPU: the UUIDs are made up.
 */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "elastic/ep/ep_sm_model.h"
#include "elastic/gpu/gpu_share.h"

static const unsigned char gpu_a[16] = { 0xa0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 };
static const unsigned char gpu_b[16] = { 0xb0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 };

static char root[256];

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof(root), "/tmp/eep-test-gpu-share.XXXXXX");
    return mkdtemp(root) != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[300];

    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    return system(cmd) == 0 ? 0 : -1;
}

/* Files in the registry folder of @p uuid (dot names included). */
static int entries(const unsigned char *uuid)
{
    char           dir[400];
    DIR           *d;
    struct dirent *e;
    int            n = 0;

    snprintf(dir, sizeof(dir), "%s/eep-gpu-%02x0102030405060708090a0b0c0d0e0f", root, uuid[0]);
    d = opendir(dir);
    if (d == NULL) {
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        n += e->d_name[0] != '.';
    }
    closedir(d);
    return n;
}

/* A child that joins gpu_a, says so on @p ready, and holds its entry until killed or told. */
static pid_t child_join(int *release_fd)
{
    int   ready[2], release[2];
    pid_t pid;
    char  c = 0;

    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(release), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        eep_gpu_share_t *s = NULL;

        /* only its own pipe ends: an earlier child's release end held here would keep that
           child from seeing its end of file */
        for (int fd = 3; fd < 1024; fd++) {
            if (fd != ready[1] && fd != release[0]) {
                close(fd);
            }
        }
        c = eep_gpu_share_join(root, gpu_a, &s) == EEP_OK ? 'y' : 'n';
        (void)!write(ready[1], &c, 1);
        (void)!read(release[0], &c, 1); /* until the parent closes it */
        eep_gpu_share_leave(s);
        _exit(0);
    }
    close(ready[1]);
    close(release[0]);
    assert_int_equal(read(ready[0], &c, 1), 1);
    assert_int_equal(c, 'y');
    close(ready[0]);
    *release_fd = release[1];
    return pid;
}

static void test_one_process(void **state)
{
    eep_gpu_share_t *s = NULL, *t = NULL;

    (void)state;
    assert_int_equal(eep_gpu_share_count(NULL), 1);
    assert_int_equal(eep_gpu_share_join(root, gpu_a, &s), EEP_OK);
    assert_int_equal(eep_gpu_share_count(s), 1);
    /* a second runtime of this process: two entries, one process */
    assert_int_equal(eep_gpu_share_join(root, gpu_a, &t), EEP_OK);
    assert_int_equal(entries(gpu_a), 2);
    assert_int_equal(eep_gpu_share_count(s), 1);
    eep_gpu_share_leave(t);
    assert_int_equal(entries(gpu_a), 1);
    eep_gpu_share_leave(s);
    assert_int_equal(entries(gpu_a), 0);
    eep_gpu_share_leave(NULL);
}

static void test_processes_join_and_die(void **state)
{
    eep_gpu_share_t *s = NULL, *other = NULL;
    int              rel[3], status;
    pid_t            pid[3];

    (void)state;
    assert_int_equal(eep_gpu_share_join(root, gpu_a, &s), EEP_OK);
    for (int i = 0; i < 3; i++) {
        pid[i] = child_join(&rel[i]);
        assert_int_equal(eep_gpu_share_count(s), 2 + i);
    }
    /* another GPU's registry is apart */
    assert_int_equal(eep_gpu_share_join(root, gpu_b, &other), EEP_OK);
    assert_int_equal(eep_gpu_share_count(other), 1);
    /* SIGKILLed: its file stays, unlocked; the next count removes it */
    assert_int_equal(kill(pid[1], SIGKILL), 0);
    assert_int_equal(waitpid(pid[1], &status, 0), pid[1]);
    assert_int_equal(entries(gpu_a), 4);
    assert_int_equal(eep_gpu_share_count(s), 3);
    assert_int_equal(entries(gpu_a), 3);
    /* a clean leave */
    close(rel[0]);
    assert_int_equal(waitpid(pid[0], &status, 0), pid[0]);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(eep_gpu_share_count(s), 2);
    close(rel[2]);
    assert_int_equal(waitpid(pid[2], &status, 0), pid[2]);
    assert_int_equal(eep_gpu_share_count(s), 1);
    close(rel[1]);
    eep_gpu_share_leave(other);
    eep_gpu_share_leave(s);
}

static void test_bad_arguments(void **state)
{
    eep_gpu_share_t *s = (eep_gpu_share_t *)&s;
    char             file[300];
    FILE            *f;

    (void)state;
    assert_int_equal(eep_gpu_share_join(NULL, gpu_a, &s), EEP_ERR_INVALID_ARG);
    assert_null(s);
    assert_int_equal(eep_gpu_share_join("", gpu_a, &s), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_gpu_share_join(root, NULL, &s), EEP_ERR_INVALID_ARG);
    assert_int_equal(eep_gpu_share_join(root, gpu_a, NULL), EEP_ERR_INVALID_ARG);
    /* a folder that cannot be made (its parent is a file) */
    snprintf(file, sizeof(file), "%s/plain-file", root);
    f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(eep_gpu_share_join(file, gpu_a, &s), EEP_ERR_IO);
    assert_null(s);
}

static void test_shared_sms(void **state)
{
    (void)state;
    assert_int_equal(eep_ep_shared_sms(132, 1), 132);
    assert_int_equal(eep_ep_shared_sms(132, 0), 132);
    assert_int_equal(eep_ep_shared_sms(132, 2), 66);
    assert_int_equal(eep_ep_shared_sms(132, 8), 16);
    assert_int_equal(eep_ep_shared_sms(132, 100), 2); /* a sender and a counter at least */
    assert_int_equal(eep_ep_shared_sms(1, 4), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_process),
        cmocka_unit_test(test_processes_join_and_die),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_shared_sms),
    };

    alarm(60); /* bounded: a child that never sees its end of file must not hang make test */
    return cmocka_run_group_tests(tests, setup, teardown);
}
