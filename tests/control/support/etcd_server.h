/*
 * etcd_server.h - start real etcd members for tests: 127.0.0.1 only, free ports, a temp dir.
 *
 * Members are children of the test process (killed with SIGKILL if the test dies, through
 * PR_SET_PDEATHSIG, and by eep_test_etcd_destroy() otherwise); each waits until etcd answers
 * /health, bounded.  A member can be killed and restarted with the same data dir and ports.
 */
#ifndef EEP_TEST_ETCD_SERVER_H
#define EEP_TEST_ETCD_SERVER_H

#include <sys/types.h>

#define EEP_TEST_ETCD_MAX 5

typedef struct {
    int   n;
    char  dir[256];       /* temp dir holding every member's data and log */
    char  endpoints[256]; /* "127.0.0.1:c0,127.0.0.1:c1,..." */
    int   client_port[EEP_TEST_ETCD_MAX];
    int   peer_port[EEP_TEST_ETCD_MAX];
    pid_t pid[EEP_TEST_ETCD_MAX];       /* 0 when the member is down */
    long  log_start[EEP_TEST_ETCD_MAX]; /* size of the member's log when its run began */
    char  binary[256];
    int   tls;          /* clients must use TLS with a client certificate */
    char  ca_file[320]; /* TLS: CA, and a client certificate and key it signed */
    char  cert_file[320];
    char  key_file[320];
} eep_test_etcd_t;

/** @return the etcd binary's path, or NULL when etcd is not installed (skip the test). */
const char *eep_test_etcd_binary(void);

/**
 * Start an @p n-member cluster and wait until every member is healthy (bounded); a member that
 * exits because a port was taken after it was picked restarts the cluster on new ports (at most
 * 3 tries).  @return 0.
 */
int eep_test_etcd_start(eep_test_etcd_t *etcd, int n);

/**
 * The same with TLS: a CA, server and client certificates are made with openssl in the temp dir,
 * etcd serves https and requires client certificates.  @return 0; 77 when openssl is missing.
 */
int eep_test_etcd_start_tls(eep_test_etcd_t *etcd, int n);

/** SIGKILL member @p i and reap it. */
void eep_test_etcd_kill(eep_test_etcd_t *etcd, int i);

/**
 * SIGSTOP (@p stop) or SIGCONT member @p i: a hung member, and its recovery.  A stop returns
 * only once every thread of the member is stopped: SIGSTOP stops a multithreaded process one
 * thread at a time, and on a loaded machine a member went on serving for milliseconds after
 * kill() returned (it took a put the test meant to send to a hung member).
 * @return 0; -1 when the member's threads were not all stopped within 5 s.
 */
int eep_test_etcd_pause(eep_test_etcd_t *etcd, int i, int stop);

/**
 * Start member @p i again with its data dir and ports; wait until healthy (retried, 3 tries,
 * while one of its ports is taken).  @return 0.
 */
int eep_test_etcd_restart(eep_test_etcd_t *etcd, int i);

/** Kill every member and remove the temp dir. */
void eep_test_etcd_destroy(eep_test_etcd_t *etcd);

/**
 * @return a TCP port on 127.0.0.1 below the ephemeral range that nothing held a moment ago (not
 * even a connection in TIME_WAIT) and that this process has not handed out among its last 1024;
 * -1 when none is left.  Not thread-safe (the tests pick ports from one thread).
 */
int eep_test_free_port(void);

/**
 * Tests of this file only: when set, called by a cluster start after the ports of try
 * @p attempt (0, 1, ...) are picked and before any member is spawned (to take one of them, as
 * another process racing for it would).
 */
extern void (*eep_test_etcd_ports_hook)(eep_test_etcd_t *etcd, int attempt);

#endif
