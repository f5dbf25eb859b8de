/*
 * agent.c - libeep_agent: a rank's agent, its life (create, leave, destroy) and its faults.
 *
 * create connects to etcd, follows views (agent_view.c), registers the member under a lease
 * (agent_lease.c) and starts the agent's own thread; leave announces the leave and drops the
 * lease.  Faults go both ways: eep_agent_report_fault writes faults/<suspect> straight into etcd
 * (eepd's leader watches it), and the inject/<member id> watch keeps the newest data-plane fault
 * spec eepd sent for eep_agent_take_fault.  NICs come from libibverbs; none is fine.
 */
#include "control/agent/agent_int.h"

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "control/agent/agent_knobs.h"
#include "control/etcd/etcd.h"
#include "util/log.h"
#include "proto/eep.pb-c.h"

int64_t eep_agent_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

eep_status_t eep_agent_find_nics(char ***names_p, size_t *count_p)
{
    struct ibv_device **list;
    char              **names;
    int                 n = 0, i;

    if (names_p == NULL || count_p == NULL) {
        return EEP_ERR_INVALID_ARG;
    }
    list = ibv_get_device_list(&n);
    if (list == NULL || n <= 0) {
        /* No RDMA stack or no device: a member without NICs, not an error. */
        if (list != NULL) {
            ibv_free_device_list(list);
        }
        eep_debug(EEP_SUBSYS_AGENT, "no rdma devices found");
        *names_p = NULL;
        *count_p = 0;
        return EEP_OK;
    }
    names = calloc((size_t)n + 1, sizeof(*names));
    if (names == NULL) {
        ibv_free_device_list(list);
        return EEP_ERR_NO_MEMORY;
    }
    for (i = 0; i < n; i++) {
        const char *name = ibv_get_device_name(list[i]);

        names[i] = strdup(name != NULL ? name : "?");
    }
    ibv_free_device_list(list);
    *names_p = names;
    *count_p = (size_t)n;
    return EEP_OK;
}

void eep_agent_notify(eep_agent_t *agent)
{
    if (agent->notify != NULL) {
        agent->notify(agent->notify_arg);
    }
}

eep_status_t eep_agent_create(const eep_agent_params_t *params, eep_agent_t **agent_p)
{
    eep_agent_t *agent;
    eep_status_t status;

    if (params == NULL || params->size < sizeof(*params) || agent_p == NULL) {
        eep_error(EEP_SUBSYS_AGENT, "eep_agent_create: params (with size set) and agent_p are "
                                    "required");
        return EEP_ERR_INVALID_ARG;
    }
    eep_config_check_env_once();
    agent = calloc(1, sizeof(*agent));
    if (agent == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    status = eep_config_load(&eep_agent_knob_table, &agent->cfg);
    if (status != EEP_OK) {
        goto err_free;
    }
    if (params->job != NULL) {
        snprintf(agent->cfg.job, sizeof(agent->cfg.job), "%s", params->job);
    } else {
        status = eep_etcd_job_name(agent->cfg.job, sizeof(agent->cfg.job));
        if (status != EEP_OK) {
            goto err_free;
        }
    }
    if (agent->cfg.job[0] == '\0' || strchr(agent->cfg.job, '/') != NULL) {
        eep_error(EEP_SUBSYS_AGENT, "job must be a non-empty name without '/'");
        status = EEP_ERR_INVALID_ARG;
        goto err_free;
    }
    snprintf(agent->prefix, sizeof(agent->prefix), "/eep/%.200s/", agent->cfg.job);
    snprintf(agent->gpu_uuid, sizeof(agent->gpu_uuid), "%.127s",
             params->gpu_uuid != NULL ? params->gpu_uuid : agent->cfg.gpu_uuid);
    snprintf(agent->endpoint, sizeof(agent->endpoint), "%s",
             params->endpoint != NULL ? params->endpoint : "");
    if (gethostname(agent->host, sizeof(agent->host)) != 0) {
        snprintf(agent->host, sizeof(agent->host), "unknown");
    }
    agent->host[sizeof(agent->host) - 1] = '\0';
    agent->ttl_s      = params->lease_ttl_s > 0 ? params->lease_ttl_s : agent->cfg.lease_ttl_s;
    agent->notify     = params->notify;
    agent->notify_arg = params->notify_arg;
    if (agent->cfg.rdma) {
        status = eep_agent_find_nics(&agent->nics, &agent->n_nics);
        if (status != EEP_OK) {
            goto err_free;
        }
    }
    pthread_mutex_init(&agent->lock, NULL);
    pthread_mutex_init(&agent->reg_lock, NULL);
    pthread_cond_init(&agent->cond, NULL);
    /* NULL params: every setting from the EEP_ETCD_* knobs (endpoints, timeouts, TLS files). */
    status = eep_etcd_create(NULL, &agent->etcd);
    if (status != EEP_OK) {
        goto err_sync;
    }
    status = eep_agent_follow_views(agent);
    if (status != EEP_OK) {
        goto err_etcd;
    }
    pthread_mutex_lock(&agent->reg_lock);
    status = eep_agent_register(agent);
    pthread_mutex_unlock(&agent->reg_lock);
    if (status != EEP_OK) {
        goto err_watch;
    }
    if (pthread_create(&agent->thread, NULL, eep_agent_main, agent) != 0) {
        status = EEP_ERR_NO_RESOURCE;
        goto err_unregister;
    }
    agent->thread_started = 1;
    *agent_p              = agent;
    return EEP_OK;

err_unregister:
    eep_agent_drop_registration(agent);
err_watch:
    eep_etcd_watch_cancel(agent->view_watch);
err_etcd:
    eep_etcd_destroy(agent->etcd);
err_sync:
    pthread_cond_destroy(&agent->cond);
    pthread_mutex_destroy(&agent->reg_lock);
    pthread_mutex_destroy(&agent->lock);
err_free:
    if (agent->nics != NULL) {
        size_t i;

        for (i = 0; i < agent->n_nics; i++) {
            free(agent->nics[i]);
        }
        free(agent->nics);
    }
    free(agent);
    return status;
}

eep_status_t eep_agent_leave(eep_agent_t *agent)
{
    Eep__V1__Member m      = EEP__V1__MEMBER__INIT;
    eep_status_t    status = EEP_OK;
    char            id[256], key[EEP_AGENT_KEY_MAX];
    int64_t         lease;
    int             registered;
    uint8_t        *buf;
    size_t          len;

    if (agent == NULL) {
        return EEP_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&agent->reg_lock);
    pthread_mutex_lock(&agent->lock);
    if (agent->left) {
        pthread_mutex_unlock(&agent->lock);
        pthread_mutex_unlock(&agent->reg_lock);
        return EEP_OK;
    }
    agent->left = 1;
    registered  = agent->registered;
    lease       = agent->lease;
    snprintf(id, sizeof(id), "%s", agent->member_id);
    snprintf(key, sizeof(key), "%s", agent->member_key);
    agent->registered = 0;
    pthread_mutex_unlock(&agent->lock);
    if (registered) {
        /* Announce the leave (eepd skips its settle window for it), then drop the lease,
         * which deletes the key. */
        m.id      = id;
        m.host    = agent->host;
        m.pid     = (int32_t)getpid();
        m.lease   = lease;
        m.leaving = 1;
        len       = eep__v1__member__get_packed_size(&m);
        buf       = malloc(len ? len : 1);
        if (buf != NULL) {
            eep__v1__member__pack(&m, buf);
            status = eep_etcd_put(agent->etcd, key, buf, len, lease, NULL);
            free(buf);
        }
        eep_info(EEP_SUBSYS_AGENT, "member %s leaves", id);
    }
    eep_agent_drop_registration(agent);
    pthread_mutex_unlock(&agent->reg_lock);
    return status;
}

void eep_agent_destroy(eep_agent_t *agent)
{
    size_t i;

    if (agent == NULL) {
        return;
    }
    eep_agent_leave(agent);
    pthread_mutex_lock(&agent->lock);
    agent->stop = 1;
    pthread_cond_broadcast(&agent->cond);
    pthread_mutex_unlock(&agent->lock);
    if (agent->thread_started) {
        pthread_join(agent->thread, NULL);
    }
    if (agent->view_watch != NULL) {
        eep_etcd_watch_cancel(agent->view_watch);
    }
    eep_etcd_destroy(agent->etcd);
    for (i = 0; i < agent->n_nics; i++) {
        free(agent->nics[i]);
    }
    free(agent->nics);
    free(agent->latest);
    pthread_cond_destroy(&agent->cond);
    pthread_mutex_destroy(&agent->reg_lock);
    pthread_mutex_destroy(&agent->lock);
    free(agent);
}

/* eepd put a data-plane fault spec for this member (eepctl inject-fault data-plane): keep the
   newest for eep_agent_take_fault; no notify (that would stop the rank's running kernel). */
void eep_agent_on_inject(const eep_etcd_event_t *events, size_t count, int64_t revision,
                         eep_status_t status, void *arg)
{
    eep_agent_t *agent = arg;
    size_t       i;

    (void)revision;
    (void)status;
    pthread_mutex_lock(&agent->lock);
    for (i = 0; events != NULL && i < count; i++) {
        size_t n = events[i].kv.value_len;

        if (events[i].type != EEP_ETCD_EVENT_PUT || n == 0) {
            continue;
        }
        if (n >= sizeof(agent->inject_spec)) {
            eep_warn(EEP_SUBSYS_AGENT, "fault spec of %zu bytes for this member: ignored", n);
            continue;
        }
        memcpy(agent->inject_spec, events[i].kv.value, n);
        agent->inject_spec[n] = '\0';
        eep_info(EEP_SUBSYS_AGENT, "data-plane fault for this rank: %s", agent->inject_spec);
    }
    pthread_mutex_unlock(&agent->lock);
}

eep_status_t eep_agent_take_fault(eep_agent_t *agent, char *spec, size_t len)
{
    eep_status_t status = EEP_ERR_NOT_FOUND;

    if (agent == NULL || spec == NULL || len == 0) {
        return EEP_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&agent->lock);
    if (agent->inject_spec[0] != '\0') {
        snprintf(spec, len, "%s", agent->inject_spec);
        agent->inject_spec[0] = '\0';
        status                = EEP_OK;
    }
    pthread_mutex_unlock(&agent->lock);
    return status;
}

eep_status_t eep_agent_member_id(eep_agent_t *agent, char *buf, size_t len)
{
    eep_status_t status = EEP_OK;

    if (agent == NULL || buf == NULL) {
        return EEP_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&agent->lock);
    if (!agent->registered) {
        status = EEP_ERR_BUSY;
    } else if (strlen(agent->member_id) >= len) {
        status = EEP_ERR_INVALID_ARG;
    } else {
        snprintf(buf, len, "%s", agent->member_id);
    }
    pthread_mutex_unlock(&agent->lock);
    return status;
}

eep_status_t eep_agent_report_fault(eep_agent_t *agent, const char *suspect, int suspect_rank,
                                    uint64_t epoch, const char *phase, const char *detail)
{
    Eep__V1__Fault f = EEP__V1__FAULT__INIT;
    char           key[EEP_AGENT_KEY_MAX], me[256];
    uint8_t       *buf;
    size_t         len, i;
    eep_status_t   status;

    if (agent == NULL || suspect == NULL || suspect[0] == '\0' || strlen(suspect) > 200) {
        eep_error(EEP_SUBSYS_AGENT, "eep_agent_report_fault: suspect must be a member id");
        return EEP_ERR_INVALID_ARG;
    }
    for (i = 0; suspect[i] != '\0'; i++) {
        if (suspect[i] == '/') {
            eep_error(EEP_SUBSYS_AGENT, "eep_agent_report_fault: bad suspect id '%s'", suspect);
            return EEP_ERR_INVALID_ARG;
        }
    }
    pthread_mutex_lock(&agent->lock);
    snprintf(me, sizeof(me), "%s", agent->member_id);
    pthread_mutex_unlock(&agent->lock);
    f.reporter     = me;
    f.suspect      = (char *)suspect;
    f.suspect_rank = suspect_rank;
    f.epoch        = epoch;
    f.phase        = (char *)(phase != NULL ? phase : "");
    f.detail       = (char *)(detail != NULL ? detail : "");
    len            = eep__v1__fault__get_packed_size(&f);
    buf            = malloc(len ? len : 1);
    if (buf == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    eep__v1__fault__pack(&f, buf);
    /* Straight into etcd: eepd's leader watches faults/, and a failover loses no report. */
    snprintf(key, sizeof(key), "%sfaults/%s", agent->prefix, suspect);
    status = eep_etcd_put(agent->etcd, key, buf, len, 0, NULL);
    free(buf);
    if (status == EEP_OK) {
        eep_warn(EEP_SUBSYS_AGENT, "reported fault: suspect %s (rank %d) in %s at epoch %llu",
                 suspect, suspect_rank, f.phase, (unsigned long long)epoch);
    }
    return status;
}
