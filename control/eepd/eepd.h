/*
 * eepd.h - the eepd controller's state, shared by its files (internal; not a public API).
 *
 * One loop thread owns everything below except the event queue (filled by the etcd client's
 * thread under @c lock) and the metrics text (read by the HTTP thread under @c metrics_lock).
 * Handlers in eepd_api.c run on the loop; with @c etcd NULL (the fuzzer) they never block.
 */
#ifndef EEP_EEPD_H
#define EEP_EEPD_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "control/eepd/eepd_knobs.h"
#include "control/eepd/eepd_view.h"
#include "control/etcd/etcd.h"
#include "control/rpc/rpc_server.h"
#include "eep/status.h"
#include "proto/eep.pb-c.h"

#define EEPD_KEY_MAX 768

typedef struct {
    char            *id;
    Eep__V1__Member *member; /* unpacked value, owned */
    int64_t          create_rev;
} eepd_member_t;

typedef struct eepd_event {
    struct eepd_event *next;
    int                type; /* EEPD_EV_* */
    char              *key;
    uint8_t           *value;
    size_t             value_len;
    int64_t            create_rev;
    int64_t            mod_rev;
    int64_t            revision;
} eepd_event_t;

enum { EEPD_EV_PUT, EEPD_EV_DELETE, EEPD_EV_WATCH_LOST, EEPD_EV_LEASE_LOST };

typedef struct {
    eep_rpc_call_t *call;
    uint64_t        from_epoch;
} eepd_watcher_t;

struct eepd;

/*
 * One piece of blocking etcd work, run on the helper thread (eepd_jobs.c): @c run sees only the
 * job's own fields (never the loop's state), @c done then runs on the loop and applies the
 * result.  So the loop never waits for etcd and answers reads and Health at once (issue 25 #10).
 */
typedef struct eepd_job {
    struct eepd_job *next;
    void (*run)(eep_etcd_t *etcd, struct eepd_job *job);
    void (*done)(struct eepd *eepd, struct eepd_job *job);
    void           *arg; /* callbacks' argument (the eepd), for watches and keepalives */
    eep_status_t    status;
    int             kind;
    int             flags;
    eep_rpc_call_t *call;      /* API jobs: answered by done */
    char            text[320]; /* API jobs: the ack; cron jobs: the reason */
    /* A txn of up to 4 compares and 4 ops (their keys live in keys[]). */
    size_t         n_cmps, n_ops;
    eep_etcd_cmp_t cmps[4];
    eep_etcd_op_t  ops[4];
    char           keys[8][EEPD_KEY_MAX];
    uint8_t       *value; /* owned */
    size_t         value_len;
    int64_t        lease, ttl;
    uint64_t       epoch;
    size_t         n_ranks;
    /* Results. */
    int               ok;
    int64_t           rev;
    eep_etcd_range_t  r1, r2;
    int               have_r1, have_r2;
    eep_etcd_watch_t *watch;
} eepd_job_t;

typedef struct {
    char **ids;
    size_t count, cap;
} eepd_idset_t;

typedef struct eepd {
    eepd_config_t     cfg;
    char              replica_id[256];
    char              prefix[256]; /* "/eep/<job>/" */
    eep_etcd_t       *etcd;        /* NULL: no etcd (fuzzer, unit tests) */
    eep_rpc_server_t *rpc;

    /* Membership, mirrored from etcd through one prefix watch. */
    eepd_member_t *members;
    size_t         n_members, cap_members;
    eepd_idset_t   cordoned, drained, faults;

    /* Current view (any replica follows it). */
    Eep__V1__View *view;
    int64_t        view_mod_rev;     /* of view/current whatever it holds; 0 if absent */
    int64_t        own_publish_rev;  /* revision of our last successful publish */
    int64_t        view_adopted_rev; /* mod revision at which @c view was adopted */
    int            current_bad;      /* view/current absent, corrupt or foreign: leader repairs */
    uint64_t       max_epoch;        /* highest plausible epoch ever seen; never goes back */
    uint64_t       corrupt_views;    /* view/current or views/<N> values ignored as corrupt */
    uint64_t       members_rejected; /* member values over their bounds */
    int            view_size_warned;

    /* Election. */
    int64_t lease; /* our replica lease, 0 if none */
    int     is_leader;
    int64_t leader_create_rev;
    int64_t leader_seen_rev; /* newest revision of the leader key applied: older events are stale */
    char    leader_id[256];
    int64_t no_campaign_until_ms;
    int64_t last_campaign_ms;
    int     inject_stale_publish;       /* InjectFault FAULT_STALE_PUBLISH pending */
    int     inject_stale_publish_now;   /* eepd_publish: this one is the injected one */
    int     publishing;                 /* our publish Txn is in flight */
    uint64_t publishing_epoch;          /* ... for this epoch */
    int      adopting_own;              /* eepd_publish_done adopts the view it wrote */
    int      late_changes, late_urgent; /* changes noted while publishing */
    char     late_reason[32];

    /* Settle window. */
    eepd_settle_t settle;
    int           urgent;
    char          reason[32];
    int           below_min_warned;

    /* WatchViews streams. */
    eepd_watcher_t *watchers;
    size_t          n_watchers, cap_watchers;

    /* Events from the etcd thread. */
    pthread_mutex_t   lock;
    eepd_event_t     *ev_head, *ev_tail;
    eep_etcd_watch_t *watch;
    int               watch_lost;
    int               etcd_failing; /* the loop's last etcd call found no endpoint */
    int64_t           next_sync_ms;

    /* Statistics (the loop writes; metrics text is a snapshot). */
    uint64_t views_published;
    uint64_t publish_conflicts;
    uint64_t etcd_round_trips;
    uint64_t elections_won;
    uint64_t faults_reported;
    uint64_t rpc_requests;
    uint64_t rpc_errors;
    double   last_publish_ms; /* first change seen -> view committed */
    uint64_t last_view_round_trips;
    uint64_t round_trips_at_publish;

    pthread_mutex_t metrics_lock;
    char           *metrics_text;
    void           *metrics_daemon; /* eep_http_server_t (control/tool/http_page.h) */
    /* Health for /healthz and /livez, a snapshot the loop takes with the metrics text. */
    int      health_etcd_ok, health_leader;
    uint64_t health_epoch;
    int64_t  health_loop_ms; /* eepd_now_ms() of the loop's last snapshot; 0: none yet */

    /* One (eepd, method) pair per RPC method: the handlers' argument. */
    struct eepd_api_slot {
        struct eepd *eepd;
        int          method;
    } api_slots[16];

    /* The helper thread for blocking etcd work (eepd_jobs.c). */
    pthread_t       jobs_thread;
    int             jobs_started;
    pthread_mutex_t jobs_lock;
    pthread_cond_t  jobs_cond;
    eepd_job_t     *jobs_head, *jobs_tail; /* to run */
    eepd_job_t     *done_head, *done_tail; /* run, for the loop */
    int             jobs_stop;
    int             jobs_in_flight; /* queued or running, not yet drained (loop only) */
    int             cron_busy; /* a cron job (sync, campaign, publish, eviction) is in flight */
    int             syncing;   /* a sync is in flight: hold the new watch's events until done */

    volatile int stop;
} eepd_t;

/* eepd.c */
eep_status_t eepd_create(const eepd_config_t *cfg, int with_etcd, eepd_t **eepd_p);
void         eepd_destroy(eepd_t *eepd);
eep_status_t eepd_run(eepd_t *eepd);
int64_t      eepd_now_ms(void);
void         eepd_key(const eepd_t *eepd, char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* eepd_mirror.c */
eepd_member_t *eepd_member_find(eepd_t *eepd, const char *id);
int            eepd_idset_has(const eepd_idset_t *set, const char *id);
/** @return 1 if @p id was in @p set (now removed). */
int eepd_idset_del(eepd_idset_t *set, const char *id);
/** Empty @p set and free its storage. */
void eepd_idset_clear(eepd_idset_t *set);
/** Drop member @p id from the table (no-op if absent). */
void eepd_member_remove(eepd_t *eepd, const char *id);
void eepd_members_clear(eepd_t *eepd);
/** @return 1 if @p id is a member of the current view. */
int eepd_in_view(const eepd_t *eepd, const char *id);
/** Membership changed for @p reason: start (or extend) the settle window; @p urgent skips it. */
void eepd_note_change(eepd_t *eepd, const char *reason, int urgent);
/** view/current seen at @p mod_rev (@p value NULL: absent): adopt it, or mark it for repair. */
void eepd_adopt_view(eepd_t *eepd, const uint8_t *value, size_t len, int64_t mod_rev);
/** One key under our prefix changed (EEPD_EV_PUT / EEPD_EV_DELETE), or was read at startup. */
void eepd_apply(eepd_t *eepd, int type, const char *key, const uint8_t *value, size_t len,
                int64_t create_rev, int64_t mod_rev);

/* eepd_watch.c */
/** The replica lease's keepalive callback (etcd's thread): queues EEPD_EV_LEASE_LOST. */
void eepd_on_lease_lost(int64_t lease, eep_status_t status, void *arg);
/** On the loop: apply the queued etcd events in order (held while a sync is in flight). */
void eepd_drain_events(eepd_t *eepd);
/** Queue a sync: read the whole prefix, then watch it from the next revision. */
void eepd_sync(eepd_t *eepd);
/** @return 1 when etcd answers: the mirror is live, the loop's last call got through, and our
 * lease's last keepalive answer is under 2/3 TTL old (what Health reports as etcd_ok). */
int eepd_etcd_ok(eepd_t *eepd);

/* eepd_election.c */
/** Queue a campaign for the leader key (granting the replica lease first if there is none). */
void eepd_campaign(eepd_t *eepd);
/** After a publish lost its race: whether we still lead, and the current view, from its reads. */
void eepd_refresh_apply(eepd_t *eepd, eepd_job_t *job);

/* eepd_publish.c */
/** Build the next view and queue its Txn: EEP_INPROGRESS, or EEP_OK when nothing is to be
 * published (@p force: publish even if the ranks are unchanged), or an error. */
eep_status_t eepd_publish(eepd_t *eepd, int force);
/** The leader acts on the newest fault report: evict the suspect. */
void eepd_handle_faults(eepd_t *eepd);

/* eepd_jobs.c */
eep_status_t eepd_jobs_start(eepd_t *eepd);
/** Queue @p job (allocated with eepd_job_new) for the helper thread. */
void        eepd_jobs_submit(eepd_t *eepd, eepd_job_t *job);
eepd_job_t *eepd_job_new(void (*run)(eep_etcd_t *, eepd_job_t *),
                         void (*done)(eepd_t *, eepd_job_t *));
void        eepd_job_free(eepd_job_t *job);
/** On the loop: run @c done of every finished job. */
void eepd_jobs_drain(eepd_t *eepd);
/** Stop the helper (after its current job) and end every job left (API calls: UNAVAILABLE). */
void eepd_jobs_stop(eepd_t *eepd);
/** API writes: up to 4 puts (each on its op's lease) / deletes of @p job->ops, or a lease
 * revoke (@p job->lease). */
void eepd_job_run_writes(eep_etcd_t *etcd, eepd_job_t *job);

/* eepd_api.c */
eep_status_t eepd_api_register(eepd_t *eepd);
/** Adopt a newer view and send it to every watcher. */
void eepd_api_broadcast(eepd_t *eepd);
void eepd_api_drop_watchers(eepd_t *eepd);

/* The handlers by number, for the fuzzer: decode @p req, act, reply through @p call (NULL:
 * only decode and act, and return the gRPC code that would be sent). */
enum {
    EEPD_M_GET_STATUS,
    EEPD_M_WATCH_VIEWS,
    EEPD_M_DRAIN,
    EEPD_M_CORDON,
    EEPD_M_UNCORDON,
    EEPD_M_REPORT_FAULT,
    EEPD_M_INJECT_FAULT,
    EEPD_M_HEALTH,
    EEPD_M_COUNT
};
int eepd_api_handle(eepd_t *eepd, int method, eep_rpc_call_t *call, const uint8_t *req, size_t len,
                    int authenticated);

/* eepd_metrics.c */
eep_status_t eepd_metrics_start(eepd_t *eepd);
void         eepd_metrics_update(eepd_t *eepd);
void         eepd_metrics_stop(eepd_t *eepd);

#endif
