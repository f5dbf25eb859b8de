/*
 * eepd_main.c - the eepd program: knobs, signals, and the loop.
 *
 *   eepd [--help] [--version]      everything else is a knob (eep-info --config: EEP_EEPD_*)
 *
 * SIGINT/SIGTERM set a flag the loop checks at least hz times a second; on the way out the
 * replica revokes its lease so another one leads at once.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "control/eepd/eepd.h"
#include "eep/version.h"
#include "util/log.h"

static volatile sig_atomic_t eepd_signalled;

static void eepd_on_signal(int sig)
{
    (void)sig;
    eepd_signalled = 1;
}

static void *eepd_signal_watch(void *arg)
{
    eepd_t *eepd = arg;

    while (!eepd_signalled) {
        struct timespec ts = { 0, 20 * 1000 * 1000 };

        nanosleep(&ts, NULL);
    }
    eepd->stop = 1;
    return NULL;
}

int main(int argc, char **argv)
{
    eepd_config_t    cfg;
    eepd_t          *eepd = NULL;
    eep_status_t     status;
    struct sigaction sa;
    pthread_t        th;

    static const struct option longopts[] = {
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { NULL, 0, NULL, 0 },
    };
    int c;

    opterr = 0;
    while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            printf("usage: eepd [--help] [--version]\n"
                   "  configured by EEP_* knobs (eep-info --config): EEP_JOB, EEP_ETCD_ENDPOINTS,\n"
                   "  EEP_EEPD_LISTEN (gRPC), EEP_EEPD_METRICS_ADDR/PORT (/metrics, /healthz,\n"
                   "  /livez), EEP_EEPD_TLS_*, ...\n");
            return 0;
        case 'V':
            printf("eepd (ElasticEP) %s\n", eep_version());
            return 0;
        default:
            fprintf(stderr, "eepd: unknown option '%s' (eepd --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr,
                "eepd: unexpected argument '%s': eepd takes its settings from EEP_* "
                "knobs (eepd --help)\n",
                argv[optind]);
        return 2;
    }
    eep_config_check_env();
    status = eep_config_load(&eepd_knob_table, &cfg);
    if (status != EEP_OK) {
        return 2;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = eepd_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    status = eepd_create(&cfg, 1, &eepd);
    if (status != EEP_OK) {
        fprintf(stderr, "eepd: cannot start: %s\n", eep_status_string(status));
        return 1;
    }
    pthread_create(&th, NULL, eepd_signal_watch, eepd);
    status         = eepd_run(eepd);
    eepd_signalled = 1;
    pthread_join(th, NULL);
    eepd_destroy(eepd);
    return status == EEP_OK ? 0 : 1;
}
