/*
 * eepd_jobs.c - eepd's helper thread for blocking etcd work (STYLE.md habit 13, Redis's bio.c).
 *
 * The loop thread owns all state and never waits for etcd: it packs what a call needs into an
 * eepd_job_t, queues it, and keeps serving RPCs; one helper thread runs the jobs in order (so
 * writes keep their order) and hands them back; the loop applies each result in the job's done
 * callback at its next turn (within 1/EEP_EEPD_HZ s).  Before, the loop made the calls itself and
 * every RPC, Health included, waited behind a 2 s etcd deadline during an outage (issue 25 #10).
 */
#include <stdlib.h>
#include <string.h>

#include "control/eepd/eepd.h"
#include "util/log.h"

/* Appends @p job to the queue (*head_p, *tail_p); the caller holds jobs_lock. */
static void eepd_job_append(eepd_job_t **head_p, eepd_job_t **tail_p, eepd_job_t *job)
{
    if (*tail_p != NULL) {
        (*tail_p)->next = job;
    } else {
        *head_p = job;
    }
    *tail_p = job;
}

static void *eepd_jobs_main(void *arg)
{
    eepd_t     *eepd = arg;
    eepd_job_t *job;

    pthread_mutex_lock(&eepd->jobs_lock);
    for (;;) {
        while (eepd->jobs_head == NULL && !eepd->jobs_stop) {
            pthread_cond_wait(&eepd->jobs_cond, &eepd->jobs_lock);
        }
        if (eepd->jobs_stop) {
            break;
        }
        job             = eepd->jobs_head;
        eepd->jobs_head = job->next;
        if (eepd->jobs_head == NULL) {
            eepd->jobs_tail = NULL;
        }
        job->next = NULL;
        pthread_mutex_unlock(&eepd->jobs_lock);
        job->run(eepd->etcd, job);
        pthread_mutex_lock(&eepd->jobs_lock);
        eepd_job_append(&eepd->done_head, &eepd->done_tail, job);
    }
    pthread_mutex_unlock(&eepd->jobs_lock);
    return NULL;
}

eep_status_t eepd_jobs_start(eepd_t *eepd)
{
    pthread_mutex_init(&eepd->jobs_lock, NULL);
    pthread_cond_init(&eepd->jobs_cond, NULL);
    if (pthread_create(&eepd->jobs_thread, NULL, eepd_jobs_main, eepd) != 0) {
        eep_error(EEP_SUBSYS_EEPD, "cannot start the etcd helper thread");
        pthread_cond_destroy(&eepd->jobs_cond);
        pthread_mutex_destroy(&eepd->jobs_lock);
        return EEP_ERR_NO_RESOURCE;
    }
    eepd->jobs_started = 1;
    return EEP_OK;
}

eepd_job_t *eepd_job_new(void (*run)(eep_etcd_t *, eepd_job_t *),
                         void (*done)(eepd_t *, eepd_job_t *))
{
    eepd_job_t *job = calloc(1, sizeof(*job));

    if (job != NULL) {
        job->run  = run;
        job->done = done;
    }
    return job;
}

void eepd_job_free(eepd_job_t *job)
{
    if (job == NULL) {
        return;
    }
    if (job->have_r1) {
        eep_etcd_range_free(&job->r1);
    }
    if (job->have_r2) {
        eep_etcd_range_free(&job->r2);
    }
    free(job->value);
    free(job);
}

void eepd_jobs_submit(eepd_t *eepd, eepd_job_t *job)
{
    eepd->jobs_in_flight++;
    pthread_mutex_lock(&eepd->jobs_lock);
    eepd_job_append(&eepd->jobs_head, &eepd->jobs_tail, job);
    pthread_cond_signal(&eepd->jobs_cond);
    pthread_mutex_unlock(&eepd->jobs_lock);
}

void eepd_jobs_drain(eepd_t *eepd)
{
    eepd_job_t *job, *next;

    if (!eepd->jobs_started) {
        return;
    }
    pthread_mutex_lock(&eepd->jobs_lock);
    job             = eepd->done_head;
    eepd->done_head = eepd->done_tail = NULL;
    pthread_mutex_unlock(&eepd->jobs_lock);
    for (; job != NULL; job = next) {
        next = job->next;
        eepd->jobs_in_flight--;
        job->done(eepd, job);
        eepd_job_free(job);
    }
}

static void eepd_jobs_abandon(eepd_job_t *job)
{
    if (job->call != NULL) {
        eep_rpc_call_fail(job->call, EEP_RPC_UNAVAILABLE, "eepd is shutting down");
    }
    if (job->watch != NULL) {
        eep_etcd_watch_cancel(job->watch);
    }
    eepd_job_free(job);
}

void eepd_jobs_stop(eepd_t *eepd)
{
    eepd_job_t *job, *next;

    if (!eepd->jobs_started) {
        return;
    }
    pthread_mutex_lock(&eepd->jobs_lock);
    eepd->jobs_stop = 1;
    pthread_cond_signal(&eepd->jobs_cond);
    pthread_mutex_unlock(&eepd->jobs_lock);
    pthread_join(eepd->jobs_thread, NULL);
    eepd->jobs_started = 0;
    /* Finished jobs still apply (a won election's lease is then revoked by eepd_destroy). */
    pthread_mutex_lock(&eepd->jobs_lock);
    job             = eepd->done_head;
    eepd->done_head = eepd->done_tail = NULL;
    pthread_mutex_unlock(&eepd->jobs_lock);
    for (; job != NULL; job = next) {
        next = job->next;
        job->done(eepd, job);
        eepd_job_free(job);
    }
    for (job = eepd->jobs_head; job != NULL; job = next) {
        next = job->next;
        eepd_jobs_abandon(job);
    }
    eepd->jobs_head = eepd->jobs_tail = NULL;
    pthread_cond_destroy(&eepd->jobs_cond);
    pthread_mutex_destroy(&eepd->jobs_lock);
}

void eepd_job_run_writes(eep_etcd_t *etcd, eepd_job_t *job)
{
    size_t i;

    job->status = EEP_OK;
    if (job->lease != 0) {
        job->status = eep_etcd_lease_revoke(etcd, job->lease);
        return;
    }
    for (i = 0; i < job->n_ops && job->status == EEP_OK; i++) {
        if (job->ops[i].type == EEP_ETCD_OP_PUT) {
            job->status = eep_etcd_put(etcd, job->ops[i].key, job->ops[i].value,
                                       job->ops[i].value_len, job->ops[i].lease, NULL);
        } else {
            job->status = eep_etcd_delete(etcd, job->ops[i].key, 0, NULL);
        }
    }
}
