/*
 * etcd_server.c - real etcd members for tests, as children of the test process.
 *
 * Ports: picked below the kernel's ephemeral range (which bind(0) and every outgoing connection
 * draw from, so a port found free there could be some client's source port a moment later),
 * from a per-process random start, each one checked by a bind without SO_REUSEADDR (a port in
 * TIME_WAIT, i.e. recently used, is passed over) and never handed out twice by this process.
 * Another process can still take a port between the check and etcd's bind (the check cannot
 * hold it for etcd): a member that exits early saying "address already in use" is retried on
 * new ports (a whole cluster start: the peer ports are in every member's --initial-cluster) or
 * on the same ports (a restart), at most EEP_TEST_ETCD_START_TRIES times.
 *
 * etcd runs with short raft timings (50 ms heartbeat, 500 ms election) so a 3-member cluster
 * elects a leader in well under a second and the minimum lease TTL is 1 s, and with
 * --grpc-keepalive-min-time 500ms so a client pinging every second (strictly above the minimum:
 * at the minimum, timer jitter earns "too_many_pings" strikes) is allowed.  Health is polled over
 * HTTP GET /health, bounded.
 */
#include "tests/control/support/etcd_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EEP_TEST_ETCD_HEALTH_MS   20000
#define EEP_TEST_ETCD_START_TRIES 3

const char *eep_test_etcd_binary(void)
{
    static const char *const candidates[] = { "/usr/bin/etcd", "/usr/local/bin/etcd",
                                              "/usr/sbin/etcd" };
    size_t                   i;

    for (i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++) {
        if (access(candidates[i], X_OK) == 0) {
            return candidates[i];
        }
    }
    return NULL;
}

void (*eep_test_etcd_ports_hook)(eep_test_etcd_t *etcd, int attempt);

/* The last ports this process handed out (a ring): none is handed out again while in it. */
#define EEP_TEST_PORTS_KEPT 1024
static int    eep_test_ports_given[EEP_TEST_PORTS_KEPT];
static size_t eep_test_ports_n;
static int    eep_test_port_next; /* 0 until the random start is drawn */

static int eep_test_port_given(int port)
{
    size_t i, n = eep_test_ports_n < EEP_TEST_PORTS_KEPT ? eep_test_ports_n : EEP_TEST_PORTS_KEPT;

    for (i = 0; i < n; i++) {
        if (eep_test_ports_given[i] == port) {
            return 1;
        }
    }
    return 0;
}

/* 1 when nothing holds 127.0.0.1:@p port, not even a connection in TIME_WAIT. */
static int eep_test_port_bindable(int port)
{
    struct sockaddr_in addr;
    int                fd, ok;

    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
        return 0;
    }
    memset(&addr, 0, sizeof(addr));
    addr.sin_family      = AF_INET;
    addr.sin_port        = htons((uint16_t)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok                   = bind(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0;
    close(fd);
    return ok;
}

/* The first port of the kernel's ephemeral range (bind(0) and outgoing connections use it). */
static int eep_test_ephemeral_low(void)
{
    FILE *f   = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    int   low = 32768, high;

    if (f != NULL) {
        if (fscanf(f, "%d %d", &low, &high) != 2) {
            low = 32768;
        }
        fclose(f);
    }
    return low;
}

int eep_test_free_port(void)
{
    const int lo = 10000;
    int       hi = eep_test_ephemeral_low(); /* exclusive */
    int       span, tries, port;

    if (hi - lo < 1000) {
        hi = 65536; /* an unusual range: search all of the upper ports instead */
    }
    span = hi - lo;
    if (eep_test_port_next == 0) {
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        eep_test_port_next = lo + (int)(((unsigned)getpid() * 2654435761u ^ (unsigned)ts.tv_nsec) %
                                        (unsigned)span);
    }
    for (tries = 0; tries < span; tries++) {
        port               = eep_test_port_next;
        eep_test_port_next = lo + (port + 1 - lo) % span;
        if (!eep_test_port_given(port) && eep_test_port_bindable(port)) {
            eep_test_ports_given[eep_test_ports_n++ % EEP_TEST_PORTS_KEPT] = port;
            return port;
        }
    }
    return -1;
}

static int64_t eep_test_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One HTTP GET /health; @return 1 when etcd says it is healthy (with TLS: accepts TCP). */
static int eep_test_etcd_healthy(int port, int tls)
{
    struct sockaddr_in addr;
    struct timeval     tv = { 1, 0 };
    char               buf[1024];
    const char        *req = "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    ssize_t            got;
    size_t             total = 0;
    int                fd, ok = 0;

    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
        return 0;
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    memset(&addr, 0, sizeof(addr));
    addr.sin_family      = AF_INET;
    addr.sin_port        = htons((uint16_t)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (tls) {
        ok = connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0;
    } else if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 &&
               write(fd, req, strlen(req)) == (ssize_t)strlen(req)) {
        while (total < sizeof(buf) - 1 &&
               (got = read(fd, buf + total, sizeof(buf) - 1 - total)) > 0) {
            total += (size_t)got;
        }
        buf[total] = '\0';
        ok         = strstr(buf, "\"health\":\"true\"") != NULL;
    }
    close(fd);
    return ok;
}

static pid_t eep_test_etcd_spawn(eep_test_etcd_t *etcd, int i)
{
    char  name[16], data[320], log[320], client[64], peer[64], cluster[512];
    char  cert[340], key[340];
    pid_t pid;
    int   j, fd;

    snprintf(name, sizeof(name), "m%d", i);
    snprintf(data, sizeof(data), "%s/%s.etcd", etcd->dir, name);
    snprintf(log, sizeof(log), "%s/%s.log", etcd->dir, name);
    snprintf(client, sizeof(client), "%s://127.0.0.1:%d", etcd->tls ? "https" : "http",
             etcd->client_port[i]);
    snprintf(cert, sizeof(cert), "%s/tls/server.crt", etcd->dir);
    snprintf(key, sizeof(key), "%s/tls/server.key", etcd->dir);
    snprintf(peer, sizeof(peer), "http://127.0.0.1:%d", etcd->peer_port[i]);
    cluster[0] = '\0';
    for (j = 0; j < etcd->n; j++) {
        size_t len = strlen(cluster);

        snprintf(cluster + len, sizeof(cluster) - len, "%sm%d=http://127.0.0.1:%d",
                 j > 0 ? "," : "", j, etcd->peer_port[j]);
    }
    {
        struct stat st;

        etcd->log_start[i] = stat(log, &st) == 0 ? (long)st.st_size : 0;
    }
    pid = fork();
    if (pid != 0) {
        return pid;
    }
    /* Child: die with the test; output to the member's log. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
#if !defined(__x86_64__) && !defined(__aarch64__)
    setenv("ETCD_UNSUPPORTED_ARCH", "1", 1);
#endif
    execl(etcd->binary, etcd->binary, "--name", name, "--data-dir", data, "--listen-client-urls",
          client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
          "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster,
          "--initial-cluster-state", "new", "--initial-cluster-token", etcd->dir,
          "--heartbeat-interval", "50", "--election-timeout", "500", "--grpc-keepalive-min-time",
          "500ms", "--logger", "zap", "--log-level", "warn",
          etcd->tls ? "--cert-file" : (char *)NULL, cert, "--key-file", key, "--client-cert-auth",
          "--trusted-ca-file", etcd->ca_file, (char *)NULL);
    fprintf(stderr, "exec %s: %s\n", etcd->binary, strerror(errno));
    _exit(127);
}

/* 1 when member @p i's log, from where its current run began, says its port was taken. */
static int eep_test_etcd_addr_in_use(const eep_test_etcd_t *etcd, int i)
{
    char  path[320], buf[4096];
    FILE *f;
    int   found = 0;

    snprintf(path, sizeof(path), "%s/m%d.log", etcd->dir, i);
    f = fopen(path, "r");
    if (f == NULL) {
        return 0;
    }
    if (fseek(f, etcd->log_start[i], SEEK_SET) == 0) {
        while (!found && fgets(buf, sizeof(buf), f) != NULL) {
            found = strstr(buf, "address already in use") != NULL;
        }
    }
    fclose(f);
    return found;
}

/* @return 0 healthy; -2 exited early because its port was taken (retry); -1 otherwise. */
static int eep_test_etcd_wait_healthy(eep_test_etcd_t *etcd, int i)
{
    int64_t deadline = eep_test_now_ms() + EEP_TEST_ETCD_HEALTH_MS;
    int     status;

    while (eep_test_now_ms() < deadline) {
        if (waitpid(etcd->pid[i], &status, WNOHANG) == etcd->pid[i]) {
            etcd->pid[i] = 0;
            if (eep_test_etcd_addr_in_use(etcd, i)) {
                fprintf(stderr,
                        "etcd member %d exited early: a port (client %d, peer %d) was "
                        "taken after it was picked (log %s/m%d.log)\n",
                        i, etcd->client_port[i], etcd->peer_port[i], etcd->dir, i);
                return -2;
            }
            fprintf(stderr, "etcd member %d exited early (log %s/m%d.log)\n", i, etcd->dir, i);
            return -1;
        }
        if (eep_test_etcd_healthy(etcd->client_port[i], etcd->tls)) {
            return 0;
        }
        usleep(50 * 1000);
    }
    fprintf(stderr, "etcd member %d not healthy after %d ms (log %s/m%d.log)\n", i,
            EEP_TEST_ETCD_HEALTH_MS, etcd->dir, i);
    return -1;
}

/* A CA, a server certificate for 127.0.0.1 and a client certificate, made with openssl. */
static int eep_test_etcd_make_certs(eep_test_etcd_t *etcd)
{
    char cmd[4096];
    int  ret;

    snprintf(cmd, sizeof(cmd),
             "set -e; cd '%s'; mkdir tls; cd tls;"
             "printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' >ext;"
             "K='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes';"
             "openssl req -x509 $K -keyout ca.key -out ca.crt -days 2 -subj /CN=eep-test-ca;"
             "for n in server client; do"
             "  openssl req $K -keyout $n.key -out $n.csr -subj /CN=eep-test-$n;"
             "  openssl x509 -req -in $n.csr -CA ca.crt -CAkey ca.key -CAcreateserial"
             "    -out $n.crt -days 2 -extfile ext;"
             "done",
             etcd->dir);
    ret = system(cmd);
    if (ret != 0) {
        fprintf(stderr, "making test certificates with openssl failed (%d)\n", ret);
        return -1;
    }
    snprintf(etcd->ca_file, sizeof(etcd->ca_file), "%s/tls/ca.crt", etcd->dir);
    snprintf(etcd->cert_file, sizeof(etcd->cert_file), "%s/tls/client.crt", etcd->dir);
    snprintf(etcd->key_file, sizeof(etcd->key_file), "%s/tls/client.key", etcd->dir);
    return 0;
}

/*
 * One try at starting every member on fresh ports (the data and logs of an earlier try are put
 * aside first).  @return 0; -2 when a member lost a port to someone else (try again); -1.
 */
static int eep_test_etcd_start_attempt(eep_test_etcd_t *etcd, int attempt)
{
    char cmd[700];
    int  i, ret = 0;

    if (attempt > 0) {
        for (i = 0; i < etcd->n; i++) {
            eep_test_etcd_kill(etcd, i);
        }
        snprintf(cmd, sizeof(cmd),
                 "cd '%s' && rm -rf m*.etcd && for f in m*.log; do"
                 " [ -e \"$f\" ] && mv \"$f\" \"$f.try%d\"; done; true",
                 etcd->dir, attempt - 1);
        if (system(cmd) != 0) {
            fprintf(stderr, "could not clear %s for another start\n", etcd->dir);
            return -1;
        }
    }
    etcd->endpoints[0] = '\0';
    for (i = 0; i < etcd->n; i++) {
        size_t len = strlen(etcd->endpoints);

        etcd->client_port[i] = eep_test_free_port();
        etcd->peer_port[i]   = eep_test_free_port();
        if (etcd->client_port[i] < 0 || etcd->peer_port[i] < 0) {
            fprintf(stderr, "no free port below the ephemeral range\n");
            return -1;
        }
        snprintf(etcd->endpoints + len, sizeof(etcd->endpoints) - len, "%s127.0.0.1:%d",
                 i > 0 ? "," : "", etcd->client_port[i]);
    }
    if (eep_test_etcd_ports_hook != NULL) {
        eep_test_etcd_ports_hook(etcd, attempt);
    }
    for (i = 0; i < etcd->n; i++) {
        etcd->pid[i] = eep_test_etcd_spawn(etcd, i);
        if (etcd->pid[i] < 0) {
            etcd->pid[i] = 0;
            return -1;
        }
    }
    for (i = 0; i < etcd->n && ret == 0; i++) {
        ret = eep_test_etcd_wait_healthy(etcd, i);
    }
    /* A member that lost its peer port can keep another from getting healthy: a taken port
     * anywhere means another try. */
    for (i = 0; i < etcd->n && ret == -1; i++) {
        if (eep_test_etcd_addr_in_use(etcd, i)) {
            ret = -2;
        }
    }
    return ret;
}

static int eep_test_etcd_start_mode(eep_test_etcd_t *etcd, int n, int tls)
{
    const char *binary = eep_test_etcd_binary();
    int         attempt, ret = -1;

    memset(etcd, 0, sizeof(*etcd));
    if (binary == NULL || n < 1 || n > EEP_TEST_ETCD_MAX) {
        return -1;
    }
    snprintf(etcd->binary, sizeof(etcd->binary), "%s", binary);
    snprintf(etcd->dir, sizeof(etcd->dir), "/tmp/eep-etcd-test-XXXXXX");
    if (mkdtemp(etcd->dir) == NULL) {
        perror("mkdtemp");
        return -1;
    }
    etcd->tls = tls;
    if (tls && eep_test_etcd_make_certs(etcd) != 0) {
        eep_test_etcd_destroy(etcd);
        return -1;
    }
    etcd->n = n;
    for (attempt = 0; attempt < EEP_TEST_ETCD_START_TRIES; attempt++) {
        ret = eep_test_etcd_start_attempt(etcd, attempt);
        if (ret != -2) {
            break;
        }
    }
    if (ret != 0) {
        eep_test_etcd_destroy(etcd);
        return -1;
    }
    return 0;
}

int eep_test_etcd_start(eep_test_etcd_t *etcd, int n)
{
    return eep_test_etcd_start_mode(etcd, n, 0);
}

int eep_test_etcd_start_tls(eep_test_etcd_t *etcd, int n)
{
    if (system("openssl version >/dev/null 2>&1") != 0) {
        return 77;
    }
    return eep_test_etcd_start_mode(etcd, n, 1);
}

void eep_test_etcd_kill(eep_test_etcd_t *etcd, int i)
{
    if (etcd->pid[i] > 0) {
        kill(etcd->pid[i], SIGKILL);
        waitpid(etcd->pid[i], NULL, 0);
        etcd->pid[i] = 0;
    }
}

/* 1 when every thread of @p pid is in the stopped state ('T' in /proc/PID/task/TID/stat). */
static int eep_test_all_threads_stopped(pid_t pid)
{
    char           path[64], stat[512];
    DIR           *dir;
    struct dirent *ent;
    int            stopped = 1, seen = 0;

    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    dir = opendir(path);
    if (dir == NULL) {
        return 0;
    }
    while (stopped && (ent = readdir(dir)) != NULL) {
        const char *state;
        FILE       *f;
        size_t      got;

        if (ent->d_name[0] == '.') {
            continue;
        }
        snprintf(path, sizeof(path), "/proc/%d/task/%.16s/stat", (int)pid, ent->d_name);
        f = fopen(path, "r");
        if (f == NULL) {
            continue; /* the thread exited */
        }
        got = fread(stat, 1, sizeof(stat) - 1, f);
        fclose(f);
        stat[got] = '\0';
        /* "TID (comm) S ...": the state follows the last ')' (comm may hold one). */
        state   = strrchr(stat, ')');
        stopped = state != NULL && state[1] == ' ' && (state[2] == 'T' || state[2] == 't');
        seen++;
    }
    closedir(dir);
    return stopped && seen > 0;
}

int eep_test_etcd_pause(eep_test_etcd_t *etcd, int i, int stop)
{
    int64_t deadline;

    if (etcd->pid[i] <= 0) {
        return 0;
    }
    kill(etcd->pid[i], stop ? SIGSTOP : SIGCONT);
    if (!stop) {
        return 0;
    }
    deadline = eep_test_now_ms() + 5000;
    while (!eep_test_all_threads_stopped(etcd->pid[i])) {
        if (eep_test_now_ms() > deadline) {
            fprintf(stderr, "etcd member %d: not all threads stopped 5 s after SIGSTOP\n", i);
            return -1;
        }
        usleep(1000);
    }
    return 0;
}

int eep_test_etcd_restart(eep_test_etcd_t *etcd, int i)
{
    int attempt, ret = -1;

    /* The same ports (the cluster and the clients know them): retried while someone else
     * holds one, a moment at a time. */
    for (attempt = 0; attempt < EEP_TEST_ETCD_START_TRIES; attempt++) {
        if (attempt > 0) {
            usleep(300 * 1000);
        }
        eep_test_etcd_kill(etcd, i);
        etcd->pid[i] = eep_test_etcd_spawn(etcd, i);
        if (etcd->pid[i] < 0) {
            etcd->pid[i] = 0;
            return -1;
        }
        ret = eep_test_etcd_wait_healthy(etcd, i);
        if (ret != -2) {
            break;
        }
    }
    return ret == 0 ? 0 : -1;
}

void eep_test_etcd_destroy(eep_test_etcd_t *etcd)
{
    char cmd[300];
    int  i;

    for (i = 0; i < etcd->n; i++) {
        eep_test_etcd_pause(etcd, i, 0); /* a stopped process dies of SIGKILL too; be plain */
        eep_test_etcd_kill(etcd, i);
    }
    if (etcd->dir[0] != '\0' && strncmp(etcd->dir, "/tmp/eep-etcd-test-", 19) == 0) {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", etcd->dir);
        if (system(cmd) != 0) {
            fprintf(stderr, "could not remove %s\n", etcd->dir);
        }
    }
    etcd->dir[0] = '\0';
}
