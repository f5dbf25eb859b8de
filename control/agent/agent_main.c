/*
 * agent_main.c - eep-agent: one agent as a process, printing what the runtime would see.
 *
 *   eep-agent [--job=J] [--ttl=S] [--gpu=UUID] [--endpoint=URL] [--help] [--version]
 *
 * One JSON object per line on stdout, each with the wall clock in ms: "registered" (and again
 * with a new id after a lost lease), "view" (epoch, my rank, member ids), "lease_lost", "fault"
 * (a data-plane fault spec eepd sent this member: what eep-rank --agent-faults arms).  SIGTERM
 * or SIGINT leave gracefully.  Used by `make run` and the control-plane tests.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "control/agent/agent.h"
#include "control/tool/tool.h"
#include "eep/version.h"
#include "util/clock.h"
#include "util/config.h"
#include "util/log.h"

static volatile sig_atomic_t eep_agent_main_stop;

static int eep_agent_main_usage(FILE *out)
{
    fprintf(out, "usage: eep-agent [--job=J] [--ttl=S] [--gpu=UUID] [--endpoint=URL] [--help] "
                 "[--version]\n"
                 "  --job=J     the job (default EEP_JOB)\n"
                 "  --ttl=S     lease TTL in seconds, 1..3600 (default EEP_AGENT_LEASE_TTL_S)\n"
                 "  --gpu=UUID  the GPU uuid published in the member key (EEP_AGENT_GPU_UUID)\n"
                 "  --endpoint=URL  the address published in the member key (a rank's metrics "
                 "URL, read by eepctl top)\n"
                 "one JSON object per line on stdout; SIGTERM or SIGINT leave gracefully\n");
    return out == stderr ? 2 : 0;
}

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
    static const struct option longopts[] = {
        { "job", required_argument, NULL, 'j' },
        { "ttl", required_argument, NULL, 't' },
        { "gpu", required_argument, NULL, 'g' },
        { "endpoint", required_argument, NULL, 'e' },
        { "version", no_argument, NULL, 'V' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    eep_agent_params_t p;
    eep_agent_t       *agent = NULL;
    eep_agent_view_t  *view;
    eep_status_t       status;
    struct sigaction   sa;
    char               id[256] = "", now_id[256], spec[256];
    uint32_t           i;
    int                a;

    memset(&p, 0, sizeof(p));
    p.size = sizeof(p);
    opterr = 0;
    while ((a = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
        int64_t ttl = 0;

        switch (a) {
        case 'j':
            p.job = optarg;
            break;
        case 't':
            /* 0, -1 or "abc" once meant the knob's default: now a usage error. */
            if (eep_tool_parse_i64("eep-agent", "--ttl", optarg, 1, 3600, &ttl) != EEP_OK) {
                return 2;
            }
            p.lease_ttl_s = (int)ttl;
            break;
        case 'g':
            p.gpu_uuid = optarg;
            break;
        case 'e':
            if (strlen(optarg) > 256) { /* eepd ignores a member whose endpoint is longer */
                fprintf(stderr, "eep-agent: --endpoint is over 256 bytes\n");
                return 2;
            }
            p.endpoint = optarg;
            break;
        case 'V':
            printf("eep-agent (ElasticEP) %s\n", eep_version());
            return 0;
        case 'h':
            return eep_agent_main_usage(stdout);
        case ':':
            fprintf(stderr, "eep-agent: %s needs a value\n", argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, "eep-agent: unknown option '%s'\n", argv[optind - 1]);
            return eep_agent_main_usage(stderr);
        }
    }
    if (optind < argc) {
        fprintf(stderr, "eep-agent: unexpected argument '%s'\n", argv[optind]);
        return eep_agent_main_usage(stderr);
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
        if (eep_agent_take_fault(agent, spec, sizeof(spec)) == EEP_OK) {
            eep_agent_main_event("fault", id);
            printf(",\"spec\":");
            eep_tool_json_str(stdout, spec);
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
