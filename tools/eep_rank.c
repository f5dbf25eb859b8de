/*
 * eep_rank.c - eep-rank: one rank of a job as a process (what `make run` starts per GPU).
 *
 *   eep-rank [--interval-ms N] [--seconds N] [--join-timeout-s N] [--boot-timeout-ms N] [-v]
 *
 *   --interval-ms N      between barriers (100)
 *   --seconds N          run this long, then leave (0: until SIGTERM)
 *   --join-timeout-s N   give up when no view at all arrived in this long (300)
 *   --boot-timeout-ms N  each bootstrap exchange (0: EEP_BOOTSTRAP_TIMEOUT_MS)
 *   -v                   log the GPU probe's own messages
 *
 * The rank joins the job through the agent (EEP_JOB, EEP_ETCD_ENDPOINTS), waits for a view that
 * holds it, bootstraps the data-plane runtime through the etcd backend for that view's epoch
 * (rank = my_rank, world = the view's size, device = EEP_DEVICE), then runs a sequential barrier
 * plus a small self-check every --interval-ms and prints one JSON line per second (epoch, rank,
 * world, barriers done, status).  Key design choice: a view change, EEP_ERR_PEER_TIMEOUT or
 * EEP_ERR_LEASE_LOST tears the runtime down and builds a new one for the newest view that holds
 * this member.  That costs a new NCCL communicator per change; shrinking the live group in place
 * is a later issue.  A peer that timed out with no newer view in sight is reported as a fault, so
 * that eepd evicts it and publishes that newer view.  SIGTERM or SIGINT leave gracefully
 * (eep_agent_leave): the others get a view without this rank at once.  Without a usable GPU it
 * prints one line and exits with EEP_ERR_NO_DEVICE's code (80).  Every wait is bounded.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "control/agent/agent.h"
#include "control/agent/agent_bootstrap.h"
#include "eep/eep.h"
#include "util/config.h"
#include "elastic/gpu/cuda_sym.h"
#include "util/clock.h"
#include "util/log.h"

/* Exit codes: 0 after a graceful leave, 2 for usage, else the negated eep_status_t. */
#define EEP_RANK_EXIT(status) ((int)-(status))

static volatile sig_atomic_t eep_rank_stop;

typedef struct {
    int               interval_ms;
    int               seconds;
    int               join_timeout_s;
    int               boot_timeout_ms;
    eep_agent_t      *agent;
    eep_agent_view_t *view; /* the view the runtime was built for, or NULL */
    eep_bootstrap_t  *bs;
    eep_runtime_t    *rt;
    uint64_t          min_epoch; /* build only for a view at least this new */
    uint64_t          barriers;  /* done in the current runtime */
    uint64_t          rebuilds;
    int               device;
    const char       *status;     /* "joining", "running", "rebuilding", "waiting" */
    const char       *last_error; /* eep_status_name of the last failure, or "" */
} eep_rank_t;

static void eep_rank_signal(int sig)
{
    (void)sig;
    eep_rank_stop = 1;
}

/* One JSON line on stdout. */
static void eep_rank_report(const eep_rank_t *r)
{
    printf("{\"t_ms\":%lld,\"epoch\":%llu,\"rank\":%d,\"world\":%u,\"device\":%d,"
           "\"barriers\":%llu,\"rebuilds\":%llu,\"status\":\"%s\",\"error\":\"%s\"}\n",
           eep_clock_wall_ms(), r->view != NULL ? (unsigned long long)r->view->epoch : 0ULL,
           r->view != NULL ? r->view->my_rank : -1, r->view != NULL ? r->view->n_ranks : 0u,
           r->device, (unsigned long long)r->barriers, (unsigned long long)r->rebuilds, r->status,
           r->last_error);
}

/* @return EEP_OK when a CUDA driver loads and sees a device; quiet (the caller says it once). */
static eep_status_t eep_rank_gpu_check(int verbose)
{
    const eep_cuda_sym_t *cu = NULL;
    eep_status_t          status;
    eep_log_level_t       level = EEP_LOG_LEVEL_NONE;
    int                   count = 0, l;

    /* The configured level, to put back after the quiet probe. */
    for (l = EEP_LOG_LEVEL_TRACE; l > EEP_LOG_LEVEL_NONE && level == EEP_LOG_LEVEL_NONE; l--) {
        if (eep_log_enabled((eep_log_level_t)l, EEP_SUBSYS_RUNTIME)) {
            level = (eep_log_level_t)l;
        }
    }
    if (!verbose) {
        eep_log_set_level(EEP_LOG_LEVEL_NONE);
    }
    status = eep_cuda_sym_driver(&cu);
    if (status == EEP_OK && (cu->cuDeviceGetCount(&count) != CUDA_SUCCESS || count < 1)) {
        status = EEP_ERR_NO_DEVICE;
    }
    if (!verbose) {
        eep_log_set_level(level);
    }
    return status != EEP_OK ? EEP_ERR_NO_DEVICE : EEP_OK;
}

/*
 * The group is changing (or this rank leaves): abort rather than finalize, so that no teardown
 * step waits on a rank that already left (finalizing is bounded too, by EEP_INIT_TIMEOUT_MS, but
 * that is seconds per change).
 */
static void eep_rank_teardown(eep_rank_t *r)
{
    if (r->rt != NULL) {
        eep_runtime_abort(r->rt);
    }
    eep_runtime_destroy(r->rt);
    r->rt = NULL;
    eep_bootstrap_destroy(r->bs);
    r->bs       = NULL;
    r->barriers = 0;
}

/* Drop the runtime and its view; build again only for a view newer than @p epoch_done. */
static void eep_rank_drop(eep_rank_t *r, eep_status_t why, uint64_t epoch_done)
{
    r->last_error = eep_status_name(why);
    eep_rank_teardown(r);
    eep_agent_view_free(r->view);
    r->view      = NULL;
    r->min_epoch = epoch_done + 1;
    r->status    = "waiting";
}

/*
 * A peer did not arrive (runtime fault record or bootstrap timeout).  If a newer view comes
 * within a moment, the peer most likely left through it: no report.  Otherwise report it, so that
 * eepd evicts it and publishes the view to rebuild for.
 */
static void eep_rank_suspect(eep_rank_t *r, int peer, const char *phase, eep_agent_view_t **newer_p)
{
    eep_agent_view_t *v = NULL;
    eep_status_t      status;

    status = eep_agent_wait(r->agent, 1000, &v);
    if (status == EEP_OK) {
        *newer_p = v;
        return;
    }
    if (status == EEP_ERR_LEASE_LOST || r->view == NULL || peer < 0 ||
        (uint32_t)peer >= r->view->n_ranks || peer == r->view->my_rank) {
        return;
    }
    eep_warn(EEP_SUBSYS_TOOL,
             "peer %d (member %s) did not arrive in %s of view %llu: reporting "
             "it",
             peer, r->view->members[peer].id, phase, (unsigned long long)r->view->epoch);
    eep_agent_report_fault(r->agent, r->view->members[peer].id, peer, r->view->epoch, phase,
                           "eep-rank");
}

/* Build the runtime for @p view (taken over).  On failure the view is dropped. */
static eep_status_t eep_rank_build(eep_rank_t *r, eep_agent_view_t *view,
                                   eep_agent_view_t **newer_p)
{
    eep_agent_bootstrap_params_t bp;
    eep_runtime_params_t         rp;
    eep_runtime_info_t           info;
    eep_status_t                 status;
    int                          missing;

    r->view   = view;
    r->status = "rebuilding";
    eep_log_set_rank(view->my_rank);
    eep_info(EEP_SUBSYS_TOOL, "building the runtime for view %llu: rank %d of %u",
             (unsigned long long)view->epoch, view->my_rank, view->n_ranks);
    memset(&bp, 0, sizeof(bp));
    bp.size       = sizeof(bp);
    bp.agent      = r->agent;
    bp.view       = view;
    bp.timeout_ms = r->boot_timeout_ms;
    status        = eep_agent_bootstrap_create(&bp, &r->bs);
    if (status != EEP_OK) {
        goto err;
    }
    memset(&rp, 0, sizeof(rp));
    rp.size      = sizeof(rp);
    rp.bootstrap = r->bs;
    rp.device    = -1; /* EEP_DEVICE, else rank modulo the visible GPUs */
    status       = eep_runtime_create(&rp, &r->rt);
    if (status != EEP_OK) {
        if (status == EEP_ERR_TIMEOUT && eep_agent_bootstrap_missing(r->bs, &missing) == EEP_OK) {
            eep_rank_suspect(r, missing, "bootstrap", newer_p);
        }
        goto err;
    }
    if (eep_runtime_query(r->rt, &info) == EEP_OK) {
        r->device = info.device;
    }
    r->rebuilds++;
    r->status     = "running";
    r->last_error = "";
    return EEP_OK;

err:
    eep_error(EEP_SUBSYS_TOOL, "view %llu: runtime not built (%s); waiting for a newer view",
              (unsigned long long)view->epoch, eep_status_name(status));
    eep_rank_drop(r, status, view->epoch);
    return status;
}

/* While the barrier runs: keep reading the view feed; a newer view, a lost lease or a signal
   makes the wait pointless (the runtime is rebuilt either way). */
typedef struct {
    eep_rank_t        *r;
    eep_agent_view_t **v_p;
    int                lease_lost;
} eep_rank_watch_t;

static int eep_rank_should_abort(void *ctx)
{
    eep_rank_watch_t *w = ctx;

    if (*w->v_p == NULL && !w->lease_lost) {
        w->lease_lost = eep_agent_poll(w->r->agent, w->v_p) == EEP_ERR_LEASE_LOST;
    }
    return eep_rank_stop || w->lease_lost ||
           (*w->v_p != NULL && (*w->v_p)->epoch > w->r->view->epoch);
}

/*
 * One barrier and its self-check: the runtime still matches the view it was built for.  The
 * barrier is waited for without blocking the view feed: when a newer view arrives (a peer left or
 * died), the lease is lost, or SIGTERM comes, the runtime is aborted so the kernel leaves at once
 * instead of at its deadline (EEP_TIMEOUT_MS, 30 s by default).  A view taken here is handed back
 * through @p v_p for the main loop to act on.
 */
static eep_status_t eep_rank_step(eep_rank_t *r, eep_agent_view_t **v_p)
{
    eep_runtime_info_t info;
    eep_rank_watch_t   watch = { r, v_p, 0 };
    eep_status_t       status;

    status = eep_barrier(r->rt, EEP_BARRIER_SEQUENTIAL, NULL);
    if (status == EEP_OK) {
        status = eep_runtime_stream_wait(r->rt, NULL, eep_rank_should_abort, &watch);
    }
    if (watch.lease_lost) {
        return EEP_ERR_LEASE_LOST;
    }
    if (status != EEP_OK) {
        return status;
    }
    status = eep_runtime_query(r->rt, &info);
    if (status == EEP_OK &&
        (info.rank != r->view->my_rank || info.nranks != (int)r->view->n_ranks)) {
        eep_error(EEP_SUBSYS_TOOL,
                  "self-check: the runtime is rank %d of %d, the view says %d "
                  "of %u",
                  info.rank, info.nranks, r->view->my_rank, r->view->n_ranks);
        status = EEP_ERR_INTERNAL;
    }
    if (status == EEP_OK) {
        r->barriers++;
    }
    return status;
}

static int eep_rank_usage(const char *bad)
{
    if (bad != NULL) {
        fprintf(stderr, "eep-rank: bad argument '%s'\n", bad);
    }
    fprintf(stderr, "usage: eep-rank [--interval-ms N] [--seconds N] [--join-timeout-s N] "
                    "[--boot-timeout-ms N] [-v]\n");
    return bad != NULL ? 2 : 0;
}

int main(int argc, char **argv)
{
    eep_rank_t         r;
    eep_agent_params_t ap;
    eep_agent_view_t  *v = NULL, *take;
    struct sigaction   sa;
    eep_status_t       status, exit_status   = EEP_OK;
    long long          start_ms, last_report = 0, waiting_since;
    int                a, verbose = 0, seen_view = 0;

    memset(&r, 0, sizeof(r));
    r.interval_ms    = 100;
    r.join_timeout_s = 300;
    r.device         = -1;
    r.status         = "joining";
    r.last_error     = "";
    for (a = 1; a < argc; a++) {
        int *slot = NULL;

        if (strcmp(argv[a], "--interval-ms") == 0) {
            slot = &r.interval_ms;
        } else if (strcmp(argv[a], "--seconds") == 0) {
            slot = &r.seconds;
        } else if (strcmp(argv[a], "--join-timeout-s") == 0) {
            slot = &r.join_timeout_s;
        } else if (strcmp(argv[a], "--boot-timeout-ms") == 0) {
            slot = &r.boot_timeout_ms;
        } else if (strcmp(argv[a], "-v") == 0) {
            verbose = 1;
            continue;
        } else if (strcmp(argv[a], "-h") == 0 || strcmp(argv[a], "--help") == 0) {
            return eep_rank_usage(NULL);
        } else {
            return eep_rank_usage(argv[a]);
        }
        if (a + 1 >= argc || (*slot = atoi(argv[a + 1])) < 0 ||
            (slot == &r.interval_ms && *slot < 1) || (slot == &r.join_timeout_s && *slot < 1)) {
            return eep_rank_usage(argv[a]);
        }
        a++;
    }
    eep_config_check_env();

    /* No GPU: one line and EEP_ERR_NO_DEVICE's code, before touching the control plane. */
    status = eep_rank_gpu_check(verbose);
    if (status != EEP_OK) {
        fprintf(stderr,
                "eep-rank: no usable GPU (no CUDA driver, or it sees no device): a rank "
                "needs one; exiting with code %d (%s)\n",
                EEP_RANK_EXIT(status), eep_status_name(status));
        return EEP_RANK_EXIT(status);
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = eep_rank_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);

    memset(&ap, 0, sizeof(ap));
    ap.size = sizeof(ap);
    status  = eep_agent_create(&ap, &r.agent);
    if (status != EEP_OK) {
        fprintf(stderr, "eep-rank: cannot join the job: %s\n", eep_status_string(status));
        return EEP_RANK_EXIT(status);
    }
    start_ms = waiting_since = eep_clock_wall_ms();
    while (!eep_rank_stop) {
        long long now = eep_clock_wall_ms();

        if (r.seconds > 0 && now - start_ms >= (long long)r.seconds * 1000) {
            break;
        }
        if (now - last_report >= 1000) {
            eep_rank_report(&r);
            last_report = now;
        }
        /* The newest view, a lost lease, or (no runtime) a bounded wait for either. */
        if (v == NULL) {
            status = r.rt != NULL ? eep_agent_poll(r.agent, &v) : eep_agent_wait(r.agent, 200, &v);
            if (status == EEP_ERR_LEASE_LOST) {
                /* The old member is gone: its rank in every view we know is someone else's. */
                eep_warn(EEP_SUBSYS_TOOL, "lease lost: dropping the runtime; waiting for a view "
                                          "holding the new member");
                eep_rank_drop(&r, status, eep_agent_epoch(r.agent));
                continue;
            }
        }
        if (v != NULL) {
            seen_view = 1;
            if (v->epoch < r.min_epoch || (r.view != NULL && v->epoch <= r.view->epoch)) {
                eep_agent_view_free(v);
                v = NULL;
            } else {
                /* A new view: today the group is rebuilt from scratch (in-place shrink: later). */
                uint64_t epoch = r.view != NULL ? r.view->epoch : 0;

                if (r.view != NULL) {
                    eep_rank_drop(&r, EEP_ERR_STALE_EPOCH, epoch);
                    r.last_error = "";
                }
                take = v;
                v    = NULL;
                if (take->my_rank < 0) {
                    r.status    = "standby";
                    r.min_epoch = take->epoch + 1;
                    eep_agent_view_free(take);
                    continue;
                }
                if (eep_rank_build(&r, take, &v) == EEP_OK) {
                    waiting_since = eep_clock_wall_ms();
                }
                continue;
            }
        }
        if (r.rt == NULL) {
            /* Only joining is given up on: a standby rank, or one waiting for the view after a
               failure, waits on (each wait is 200 ms; SIGTERM ends it). */
            if (!seen_view &&
                eep_clock_wall_ms() - waiting_since > (long long)r.join_timeout_s * 1000) {
                fprintf(stderr,
                        "eep-rank: no view at all for %d s (is eepd running for job "
                        "EEP_JOB?): giving up\n",
                        r.join_timeout_s);
                exit_status = EEP_ERR_TIMEOUT;
                break;
            }
            continue;
        }
        waiting_since = eep_clock_wall_ms();
        status        = eep_rank_step(&r, &v);
        if (status != EEP_OK) {
            eep_fault_record_t rec;
            /* A lost lease: wait for a view newer than any handed out (it holds the new id). */
            uint64_t epoch = status == EEP_ERR_LEASE_LOST ? eep_agent_epoch(r.agent)
                                                          : r.view->epoch;

            eep_error(EEP_SUBSYS_TOOL,
                      "view %llu: barrier failed (%s): rebuilding for the "
                      "newest view",
                      (unsigned long long)epoch, eep_status_name(status));
            if (status == EEP_ERR_PEER_TIMEOUT && eep_runtime_fault(r.rt, &rec) == EEP_OK) {
                eep_rank_suspect(&r, rec.peer, "barrier", &v);
            }
            eep_rank_drop(&r, status, epoch);
            continue;
        }
        eep_clock_sleep_ms(r.interval_ms);
    }
    r.status = exit_status == EEP_OK ? "leaving" : "failed";
    eep_rank_report(&r);
    eep_agent_view_free(v);
    eep_rank_teardown(&r);
    eep_agent_view_free(r.view);
    r.view = NULL;
    eep_agent_leave(r.agent);
    eep_agent_destroy(r.agent);
    return exit_status == EEP_OK ? 0 : EEP_RANK_EXIT(exit_status);
}
