/* eepd_child.c - one eepd replica in a forked child (eepd_child.h). */
#include "tests/control/support/eepd_child.h"

#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "control/eepd/eepd.h"

static eepd_t *eep_test_child_eepd; /* the child's own */

static void eep_test_eepd_on_term(int sig)
{
    (void)sig;
    if (eep_test_child_eepd != NULL) {
        eep_test_child_eepd->stop = 1;
    }
}

pid_t eep_test_eepd_fork(const char *job, int num_experts)
{
    pid_t pid = fork();

    if (pid == 0) {
        eepd_config_t cfg;

        alarm(120);
        signal(SIGTERM, eep_test_eepd_on_term);
        if (eep_config_load(&eepd_knob_table, &cfg) != EEP_OK) {
            _exit(1);
        }
        snprintf(cfg.job, sizeof(cfg.job), "%s", job);
        snprintf(cfg.listen, sizeof(cfg.listen), "127.0.0.1:0");
        cfg.settle_ms    = 300;
        cfg.lease_ttl_s  = 2;
        cfg.metrics_port = 0;
        if (num_experts > 0) {
            cfg.num_experts = num_experts;
        }
        if (eepd_create(&cfg, 1, &eep_test_child_eepd) != EEP_OK) {
            _exit(1);
        }
        eepd_run(eep_test_child_eepd);
        eepd_destroy(eep_test_child_eepd);
        _exit(0);
    }
    return pid;
}

int eep_test_eepd_stop(pid_t pid, int timeout_ms)
{
    struct timespec nap = { 0, 20 * 1000 * 1000 };
    int             st, waited;

    if (pid <= 0) {
        return -1;
    }
    kill(pid, SIGTERM);
    for (waited = 0; waited < timeout_ms; waited += 20) {
        if (waitpid(pid, &st, WNOHANG) == pid) {
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        }
        nanosleep(&nap, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}
