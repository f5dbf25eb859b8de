/*
 * tools/eep_rank_fault.c - eep-rank's fault injection (tools/eep_rank.h): the specs of
 * tools/eep_fault.h queued by --fault, --arm-file + SIGUSR1 and --agent-faults, each fired at
 * its step and phase, logged as an "inject" JSON line and counted.
 */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include "tools/eep_rank.h"
#include "util/clock.h"
#include "util/log.h"

eep_rank_phase_t eep_rank_first_phase(const eep_rank_t *r)
{
    return r->moe ? EEP_RANK_PH_DISPATCH : EEP_RANK_PH_BARRIER;
}

/*
 * Arm one fault @p spec (from @p from: "--fault" or the arm file) for the step it names, else the
 * next one.  @return 0, or -1 after one line on stderr saying what is wrong with it.
 */
int eep_rank_fault_arm(eep_rank_t *r, const char *spec, const char *from)
{
    eep_fault_t f;
    char        err[320];

    if (eep_fault_parse(spec, &f, err, sizeof(err)) != EEP_OK) {
        fprintf(stderr, "eep-rank: %s: %s\n", from, err);
        return -1;
    }
    if (f.phase == EEP_FAULT_PH_FIRST) {
        f.phase = (eep_fault_phase_t)eep_rank_first_phase(r);
    }
    if (f.phase == EEP_FAULT_PH_BARRIER ? r->moe && !r->moe_barrier : !r->moe) {
        fprintf(stderr, "eep-rank: %s: fault '%s' has no %s kernel to act on with --steps %s\n",
                from, spec, eep_fault_phase_name(f.phase), r->moe ? "moe" : "barrier");
        return -1;
    }
    if (f.action == EEP_FAULT_CORRUPT_ID) {
        if (!f.has_expert) {
            f.expert = r->experts; /* the first id out of range */
        } else if (f.expert >= -1 && f.expert < r->experts) {
            /* a valid id would move a token to another expert: the checker would call the step
               wrong, which is not what this fault tests (the dispatch's refusal of bad ids) */
            fprintf(stderr,
                    "eep-rank: %s: corrupt-id expert=%d is a valid id (-1..%d): give one out of "
                    "range, which dispatch must refuse (eep/ep.h)\n",
                    from, f.expert, r->experts - 1);
            return -1;
        }
    }
    if (eep_fault_queue_add(&r->fq, &f, r->step + 1) != EEP_OK) {
        fprintf(stderr, "eep-rank: %s: more than %d faults armed at once\n", from,
                EEP_FAULT_QUEUE_MAX);
        return -1;
    }
    return 0;
}

/* SIGUSR1 asked: arm the fault spec the arm file holds (one line). */
void eep_rank_arm_read(eep_rank_t *r)
{
    char  line[256];
    FILE *f;

    eep_rank_arm_req = 0;
    if (r->arm_file == NULL || (f = fopen(r->arm_file, "r")) == NULL) {
        eep_warn(EEP_SUBSYS_TOOL, "SIGUSR1 without a readable --arm-file: ignored");
        return;
    }
    if (fgets(line, sizeof(line), f) == NULL) {
        line[0] = '\0';
    }
    fclose(f);
    if (eep_rank_fault_arm(r, line, r->arm_file) != 0) {
        eep_warn(EEP_SUBSYS_TOOL, "arm file: fault not armed (see the line above)");
    }
}

/* @return the index of the first armed fault due now at @p phase with an action in @p mask. */
static int eep_rank_fault_due(const eep_rank_t *r, eep_rank_phase_t phase, unsigned mask)
{
    return eep_fault_queue_due(&r->fq, r->step, (eep_fault_phase_t)phase, mask);
}

/* Fire fault @p i: it leaves the queue (a delay of several steps comes back next step). */
static eep_fault_t eep_rank_fault_pop(eep_rank_t *r, int i, const char *extra)
{
    eep_fault_t f = eep_fault_queue_take(&r->fq, i, r->step);

    r->injected++;
    printf("{\"t_ms\":%lld,\"event\":\"inject\",\"action\":\"%s\",\"phase\":\"%s\",\"epoch\":%llu,"
           "\"rank\":%d,\"world\":%d,\"step\":%llu,\"ms\":%d,\"injected\":%llu%s}\n",
           eep_clock_wall_ms(), eep_fault_action_name(f.action), eep_fault_phase_name(f.phase),
           (unsigned long long)r->info.epoch, r->info.rank, r->info.world,
           (unsigned long long)r->step, f.ms, (unsigned long long)r->injected, extra);
    fflush(stdout);
    return f;
}

/* Make no call for @p ms (0: until SIGTERM/SIGINT).  @return EEP_ERR_ABORTED once asked to stop. */
static eep_status_t eep_rank_idle(int ms)
{
    double end = eep_clock_ms() + ms;

    while (!eep_rank_stop && (ms == 0 || eep_clock_ms() < end)) {
        eep_clock_sleep_ms(5);
    }
    return eep_rank_stop ? EEP_ERR_ABORTED : EEP_OK;
}

/*
 * Before @p phase's kernel is launched: hang, delay (peers wait for this rank).  A view that came
 * meanwhile stops the step (EEP_ERR_ABORTED), as it stops a device wait.
 */
eep_status_t eep_rank_fault_before(eep_rank_t *r, eep_rank_phase_t phase)
{
    const unsigned mask = EEP_FAULT_BIT(EEP_FAULT_HANG) | EEP_FAULT_BIT(EEP_FAULT_DELAY);
    eep_status_t   status;
    int            i;

    while ((i = eep_rank_fault_due(r, phase, mask)) >= 0) {
        eep_fault_t f = eep_rank_fault_pop(r, i, "");

        if ((status = eep_rank_idle(f.ms)) != EEP_OK) {
            return status;
        }
        if (eep_rank_view_flag) {
            return EEP_ERR_ABORTED;
        }
    }
    return EEP_OK;
}

/*
 * Right after @p phase's kernel was enqueued: kill, stop, exit (a death mid-kernel), or stall
 * (this host makes no call for ms while its kernel is in flight; a stall longer than the peers'
 * device-wait deadline makes them time out on this rank in the next phase).
 */
void eep_rank_fault_after(eep_rank_t *r, eep_rank_phase_t phase)
{
    const unsigned mask = EEP_FAULT_BIT(EEP_FAULT_KILL) | EEP_FAULT_BIT(EEP_FAULT_STOP) |
                          EEP_FAULT_BIT(EEP_FAULT_EXIT) | EEP_FAULT_BIT(EEP_FAULT_STALL);
    int i;

    while (!eep_rank_stop && (i = eep_rank_fault_due(r, phase, mask)) >= 0) {
        eep_fault_t f = eep_rank_fault_pop(r, i, "");

        if (f.action == EEP_FAULT_STALL) {
            (void)eep_rank_idle(f.ms); /* a stop request ends it: the wait then aborts */
            continue;
        }
        printf("{\"t_ms\":%lld,\"event\":\"dying\",\"epoch\":%llu,\"rank\":%d,\"phase\":\"%s\","
               "\"signal\":\"%s\"}\n",
               eep_clock_wall_ms(), (unsigned long long)r->info.epoch, r->info.rank,
               eep_rank_phase_names[phase],
               f.action == EEP_FAULT_STOP   ? "STOP"
               : f.action == EEP_FAULT_EXIT ? "EXIT"
                                            : "KILL");
        fflush(stdout);
        if (f.action == EEP_FAULT_EXIT) {
            _exit(EEP_FAULT_EXIT_CODE); /* no cleanup: the kernel is still in flight */
        }
        raise(f.action == EEP_FAULT_STOP ? SIGSTOP : SIGKILL); /* STOP: goes on after SIGCONT */
    }
}

/*
 * After the step's routing was made, before it goes to the GPU: corrupt-id writes its id into one
 * token that only this rank's own experts take (eep_fault_corrupt_pick), so that whatever the
 * kernel does with the token no peer's checked step changes; a step without such a token leaves
 * the fault armed for the next one.
 */
void eep_rank_fault_corrupt(eep_rank_t *r, const eep_step_shape_t *s)
{
    char extra[96];
    int  i, t;

    r->corrupted = 0;
    if ((i = eep_rank_fault_due(r, EEP_RANK_PH_DISPATCH, EEP_FAULT_BIT(EEP_FAULT_CORRUPT_ID))) <
        0) {
        return;
    }
    t = eep_fault_corrupt_pick(r->h_idx, s->tokens, s->topk, s->experts / s->world, s->rank);
    if (t < 0) {
        return;
    }
    snprintf(extra, sizeof(extra), ",\"token\":%d,\"expert\":%d,\"was\":%lld", t, r->fq.f[i].expert,
             (long long)r->h_idx[(size_t)t * s->topk]);
    r->h_idx[(size_t)t * s->topk] = r->fq.f[i].expert;
    eep_rank_fault_pop(r, i, extra);
    r->corrupted = 1;
}
