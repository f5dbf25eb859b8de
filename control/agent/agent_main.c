/*
 * agent_main.c - eep-agent: one agent as a process, printing what the runtime would see.
 *
 *   eep-agent [--job J] [--ttl S] [--gpu UUID]
 *
 * One JSON object per line on stdout, each with the wall clock in ms: "registered" (and again
 * with a new id after a lost lease), "view" (epoch, my rank, member ids), "lease_lost".  SIGTERM
 * or SIGINT leave gracefully.  Used by `make run` and the control-plane tests.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "control/agent/agent.h"
#include "control/tool/tool.h"
#include "util/clock.h"
#include "util/config.h"
#include "util/log.h"

static volatile sig_atomic_t eep_agent_main_stop;

static void eep_agent_main_signal(int sig)
{
    (void)sig;
    eep_agent_main_stop = 1;
}

/* The start of one event line: {"t_ms":..,"event":..,"member":.. (the caller closes it). */
static void eep_agent_main_event(const char *event, const char *member)
{
    printf("{\"t_ms\":%lld,\"event\":", eep_clock_wall_ms());
    eep_tool_json_str(stdout, event);
    printf(",\"member\":");
    eep_tool_json_str(stdout, member);
}

int main(int argc, char **argv)
{
    eep_agent_params_t p;
    eep_agent_t       *agent = NULL;
    eep_agent_view_t  *view;
    eep_status_t       status;
    struct sigaction   sa;
    char               id[256] = "", now_id[256];
    uint32_t           i;
    int                a;

    memset(&p, 0, sizeof(p));
    p.size = sizeof(p);
    for (a = 1; a < argc; a++) {
        if (a + 1 < argc && strcmp(argv[a], "--job") == 0) {
            p.job = argv[++a];
        } else if (strcmp(argv[a], "--ttl") == 0) {
            int64_t ttl = 0;

            if (a + 1 >= argc) {
                fprintf(stderr, "eep-agent: --ttl needs a value\n");
                return 2;
            }
            /* 0, -1 or "abc" once meant the knob's default: now a usage error. */
            if (eep_tool_parse_i64("eep-agent", "--ttl", argv[++a], 1, 3600, &ttl) != EEP_OK) {
                return 2;
            }
            p.lease_ttl_s = (int)ttl;
        } else if (a + 1 < argc && strcmp(argv[a], "--gpu") == 0) {
            p.gpu_uuid = argv[++a];
        } else {
            fprintf(stderr, "usage: eep-agent [--job J] [--ttl S] [--gpu UUID]\n");
            return strcmp(argv[a], "--help") == 0 ? 0 : 2;
        }
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = eep_agent_main_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    eep_config_check_env();
    status = eep_agent_create(&p, &agent);
    if (status != EEP_OK) {
        fprintf(stderr, "eep-agent: cannot join: %s\n", eep_status_string(status));
        return 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    while (!eep_agent_main_stop) {
        if (eep_agent_member_id(agent, now_id, sizeof(now_id)) == EEP_OK &&
            strcmp(now_id, id) != 0) {
            snprintf(id, sizeof(id), "%s", now_id);
            eep_agent_main_event("registered", id);
            printf("}\n");
        }
        status = eep_agent_wait(agent, 100, &view);
        if (status == EEP_ERR_LEASE_LOST) {
            eep_agent_main_event("lease_lost", id);
            printf("}\n");
        } else if (status == EEP_OK) {
            eep_agent_main_event("view", id);
            printf(",\"epoch\":%llu,\"rank\":%d,\"n\":%u,\"reason\":",
                   (unsigned long long)view->epoch, view->my_rank, view->n_ranks);
            eep_tool_json_str(stdout, view->reason);
            printf(",\"members\":[");
            for (i = 0; i < view->n_ranks; i++) {
                printf("%s", i ? "," : "");
                eep_tool_json_str(stdout, view->members[i].id);
            }
            printf("]}\n");
            eep_agent_view_free(view);
        }
    }
    eep_agent_leave(agent);
    eep_agent_main_event("left", id);
    printf("}\n");
    eep_agent_destroy(agent);
    return 0;
}
