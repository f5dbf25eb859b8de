/*
 * eepd_child.h - one eepd replica in a forked child, for tests whose other children are ranks:
 * 127.0.0.1 on a free port, a 300 ms settle window and 2 s leases (fast views), no metrics port.
 * The child stops cleanly on SIGTERM and exits after 120 s at the latest (alarm), so a test that
 * dies leaves nothing running for long.
 */
#ifndef EEP_TEST_EEPD_CHILD_H
#define EEP_TEST_EEPD_CHILD_H

#include <sys/types.h>

/**
 * Fork an eepd for @p job against the etcd of EEP_ETCD_ENDPOINTS (the test's etcd).
 * @param num_experts  experts the views place (0: the knob's default)
 * @return the child's pid, or -1 when fork failed
 */
pid_t eep_test_eepd_fork(const char *job, int num_experts);

/** SIGTERM, then reap within @p timeout_ms (SIGKILL after). @return the exit status, or -1. */
int eep_test_eepd_stop(pid_t pid, int timeout_ms);

#endif /* EEP_TEST_EEPD_CHILD_H */
