/*
 * eep_fault.c - eep-rank's fault specs: parsing and the corrupt-id token choice (eep_fault.h).
 * Strict: every word must be known and every number whole and in range, so a typo in a schedule
 * is a clear error at the start rather than a fault that silently never fires.
 */
#include "tools/eep_fault.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const eep_fault_action_names[] = {
    [EEP_FAULT_NONE] = "none",   [EEP_FAULT_KILL] = "kill",
    [EEP_FAULT_STOP] = "stop",   [EEP_FAULT_EXIT] = "exit",
    [EEP_FAULT_STALL] = "stall", [EEP_FAULT_HANG] = "hang",
    [EEP_FAULT_DELAY] = "delay", [EEP_FAULT_CORRUPT_ID] = "corrupt-id",
};

static const char *const eep_fault_phase_names[] = { "first", "barrier", "dispatch", "combine" };

#define EEP_FAULT_N_ACTIONS (sizeof(eep_fault_action_names) / sizeof(eep_fault_action_names[0]))

const char *eep_fault_action_name(eep_fault_action_t action)
{
    return (unsigned)action < EEP_FAULT_N_ACTIONS ? eep_fault_action_names[action] : "none";
}

const char *eep_fault_phase_name(eep_fault_phase_t phase)
{
    return (unsigned)phase <= EEP_FAULT_PH_COMBINE ? eep_fault_phase_names[phase] : "first";
}

static eep_status_t eep_fault_bad(char *err, size_t err_len, const char *fmt, ...)
{
    va_list ap;

    if (err != NULL && err_len > 0) {
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return EEP_ERR_INVALID_ARG;
}

/* A whole decimal in [min, max]: optional sign, digits, nothing else. */
static int eep_fault_int(const char *text, int64_t min, int64_t max, int64_t *v_p)
{
    char     *end = NULL;
    long long v;

    errno = 0;
    v     = strtoll(text, &end, 10);
    if (text[0] == '\0' || *end != '\0' || errno != 0 || v < min || v > max) {
        return -1;
    }
    *v_p = v;
    return 0;
}

static int eep_fault_phase_find(const char *name)
{
    int i;

    for (i = EEP_FAULT_PH_BARRIER; i <= EEP_FAULT_PH_COMBINE; i++) {
        if (strcmp(name, eep_fault_phase_names[i]) == 0) {
            return i;
        }
    }
    return -1;
}

eep_status_t eep_fault_parse(const char *spec, eep_fault_t *fault_p, char *err, size_t err_len)
{
    char        buf[256], *words[16], *save = NULL, *w;
    eep_fault_t f;
    int         n = 0, i, has_ms = 0;
    size_t      a;

    if (spec == NULL || strlen(spec) >= sizeof(buf)) {
        return eep_fault_bad(err, err_len, "fault spec missing or longer than %zu bytes",
                             sizeof(buf) - 1);
    }
    strcpy(buf, spec);
    for (w = strtok_r(buf, " \t\r\n", &save); w != NULL; w = strtok_r(NULL, " \t\r\n", &save)) {
        if (n == (int)(sizeof(words) / sizeof(words[0]))) {
            return eep_fault_bad(err, err_len, "fault '%s': too many words", spec);
        }
        words[n++] = w;
    }
    if (n == 0) {
        return eep_fault_bad(err, err_len, "empty fault spec: want ACTION [key=value ...]");
    }
    memset(&f, 0, sizeof(f));
    f.step  = -1;
    f.steps = 1;
    /* make gpu-elastic's arm-file line: "PHASE KILL|STOP" */
    if (n == 2 && eep_fault_phase_find(words[0]) > 0 &&
        (strcmp(words[1], "KILL") == 0 || strcmp(words[1], "STOP") == 0)) {
        f.action = strcmp(words[1], "KILL") == 0 ? EEP_FAULT_KILL : EEP_FAULT_STOP;
        f.phase  = (eep_fault_phase_t)eep_fault_phase_find(words[0]);
        *fault_p = f;
        return EEP_OK;
    }
    if (strcmp(words[0], "exit-dispatch") == 0 || strcmp(words[0], "exit-combine") == 0) {
        f.action = EEP_FAULT_EXIT;
        f.phase  = words[0][5] == 'd' ? EEP_FAULT_PH_DISPATCH : EEP_FAULT_PH_COMBINE;
    } else {
        for (a = 1; a < EEP_FAULT_N_ACTIONS; a++) {
            if (strcmp(words[0], eep_fault_action_names[a]) == 0) {
                f.action = (eep_fault_action_t)a;
            }
        }
    }
    if (f.action == EEP_FAULT_NONE) {
        return eep_fault_bad(err, err_len,
                             "fault '%s': unknown action '%s' (kill, stop, exit, exit-dispatch, "
                             "exit-combine, stall, hang, delay, corrupt-id)",
                             spec, words[0]);
    }
    for (i = 1; i < n; i++) {
        char   *eq = strchr(words[i], '=');
        int64_t v;

        if (eq == NULL || eq == words[i]) {
            return eep_fault_bad(err, err_len, "fault '%s': '%s' is not key=value", spec, words[i]);
        }
        *eq++ = '\0';
        if (strcmp(words[i], "phase") == 0) {
            int p = eep_fault_phase_find(eq);

            if (p < 0) {
                return eep_fault_bad(err, err_len,
                                     "fault '%s': phase '%s' is not barrier, dispatch or combine",
                                     spec, eq);
            }
            if (f.action == EEP_FAULT_EXIT && words[0][4] == '-' && p != (int)f.phase) {
                return eep_fault_bad(err, err_len, "fault '%s': %s names its phase already", spec,
                                     words[0]);
            }
            f.phase = (eep_fault_phase_t)p;
        } else if (strcmp(words[i], "ms") == 0) {
            if (eep_fault_int(eq, 0, EEP_FAULT_MAX_MS, &v) != 0) {
                return eep_fault_bad(err, err_len, "fault '%s': ms wants a whole number 0..%d",
                                     spec, EEP_FAULT_MAX_MS);
            }
            f.ms   = (int)v;
            has_ms = 1;
        } else if (strcmp(words[i], "step") == 0) {
            if (eep_fault_int(eq, 1, INT64_MAX / 2, &v) != 0) {
                return eep_fault_bad(err, err_len, "fault '%s': step wants a whole number >= 1",
                                     spec);
            }
            f.step = v;
        } else if (strcmp(words[i], "steps") == 0) {
            if (eep_fault_int(eq, 1, 1000000, &v) != 0) {
                return eep_fault_bad(err, err_len,
                                     "fault '%s': steps wants a whole number 1..1000000", spec);
            }
            f.steps = (int)v;
        } else if (strcmp(words[i], "expert") == 0) {
            if (eep_fault_int(eq, INT32_MIN, INT32_MAX, &v) != 0) {
                return eep_fault_bad(err, err_len, "fault '%s': expert wants a whole number", spec);
            }
            f.expert     = (int)v;
            f.has_expert = 1;
        } else {
            return eep_fault_bad(err, err_len,
                                 "fault '%s': unknown key '%s' (phase, step, ms, steps, expert)",
                                 spec, words[i]);
        }
        /* each key belongs to some actions only: a stray one is a typo */
        if ((strcmp(words[i], "ms") == 0 && f.action != EEP_FAULT_STALL &&
             f.action != EEP_FAULT_HANG && f.action != EEP_FAULT_DELAY) ||
            (strcmp(words[i], "steps") == 0 && f.action != EEP_FAULT_DELAY) ||
            (strcmp(words[i], "expert") == 0 && f.action != EEP_FAULT_CORRUPT_ID) ||
            (strcmp(words[i], "phase") == 0 && f.action == EEP_FAULT_CORRUPT_ID)) {
            return eep_fault_bad(err, err_len, "fault '%s': %s does not take '%s'", spec, words[0],
                                 words[i]);
        }
    }
    if ((f.action == EEP_FAULT_STALL || f.action == EEP_FAULT_DELAY) && (!has_ms || f.ms < 1)) {
        return eep_fault_bad(err, err_len, "fault '%s': %s wants ms=N (N >= 1)", spec, words[0]);
    }
    if (f.action == EEP_FAULT_CORRUPT_ID) {
        f.phase = EEP_FAULT_PH_DISPATCH;
    }
    *fault_p = f;
    return EEP_OK;
}

eep_status_t eep_fault_queue_add(eep_fault_queue_t *q, const eep_fault_t *fault, uint64_t next_step)
{
    if (q->n == EEP_FAULT_QUEUE_MAX) {
        return EEP_ERR_NO_MEMORY;
    }
    q->f[q->n] = *fault;
    if (q->f[q->n].step < 0) {
        q->f[q->n].step = (int64_t)next_step;
    }
    q->n++;
    return EEP_OK;
}

int eep_fault_queue_due(const eep_fault_queue_t *q, uint64_t step, eep_fault_phase_t phase,
                        unsigned mask)
{
    int i;

    for (i = 0; i < q->n; i++) {
        if (q->f[i].phase == phase && (mask & EEP_FAULT_BIT(q->f[i].action)) &&
            (uint64_t)q->f[i].step <= step) {
            return i;
        }
    }
    return -1;
}

eep_fault_t eep_fault_queue_take(eep_fault_queue_t *q, int i, uint64_t step)
{
    eep_fault_t f = q->f[i];

    if (f.action == EEP_FAULT_DELAY && f.steps > 1) {
        q->f[i].steps--;
        q->f[i].step = (int64_t)step + 1;
    } else {
        memmove(&q->f[i], &q->f[i + 1], (size_t)(q->n - i - 1) * sizeof(q->f[0]));
        q->n--;
    }
    return f;
}

int eep_fault_corrupt_pick(const int64_t *idx, int tokens, int topk, int local_experts, int rank)
{
    int t, k;

    if (idx == NULL || tokens < 1 || topk < 1 || local_experts < 1) {
        return -1;
    }
    for (t = 0; t < tokens; t++) {
        for (k = 0; k < topk; k++) {
            int64_t e = idx[(size_t)t * topk + k];

            if (e < 0 || e / local_experts != rank) {
                break;
            }
        }
        if (k == topk) {
            return t;
        }
    }
    return -1;
}
