/*
 * eepctl.c - the operator's CLI over eepd's EepControl API.
 *
 *   eepctl [--addr=host:port] [--ca=F [--cert=F --key=F]] [--json] [--timeout-ms=N] COMMAND ...
 *     status                        the current view and every member, as a table
 *     watch [--from=E] [--count=N]  print views as they are published
 *     drain|cordon|uncordon MEMBER
 *     report-fault SUSPECT [PHASE]
 *     inject-fault evict|revoke-lease|step-down|stale-publish [MEMBER]
 *     inject-fault data-plane MEMBER SPEC
 *     health
 *     top [--interval-ms=N] [--iterations=N] [--metrics=URL]   (eepctl_top.c)
 *
 * Options are getopt_long's (--opt=value or --opt value) and may follow the command too;
 * `eepctl COMMAND --help` prints that command's usage.  --addr, --ca, --cert and --key default to
 * EEP_EEPCTL_ADDR/CA/CERT/KEY (eepctl_knobs.c), the address to eepd's own default listen
 * address.  A MEMBER is a member id, or a rank of the current view as a plain number (ids are
 * <host>-<pid>-<lease>, never a number): eepctl asks GetStatus which id holds that rank.  Every
 * command takes --json (one JSON object per line).  Exit status: 0 ok, 1 the call failed (the
 * gRPC code and message are printed), 2 bad usage (the message names the flag or argument).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/eepctl/eepctl.h"
#include "control/eepctl/eepctl_knobs.h"
#include "control/rpc/rpc_client.h"
#include "control/tool/tool.h"
#include "eep/version.h"
#include "util/log.h"
#include "proto/eep.pb-c.h"

void eepctl_json_str(const char *s)
{
    eep_tool_json_str(stdout, s);
}

void eepctl_json_member(const Eep__V1__Member *m)
{
    size_t i;

    printf("{\"id\":");
    eepctl_json_str(m->id);
    printf(",\"host\":");
    eepctl_json_str(m->host);
    printf(",\"pid\":%d,\"gpu_uuid\":", m->pid);
    eepctl_json_str(m->gpu_uuid);
    printf(",\"rdma_nics\":[");
    for (i = 0; i < m->n_rdma_nics; i++) {
        printf(i ? "," : "");
        eepctl_json_str(m->rdma_nics[i]);
    }
    printf("],\"leaving\":%s,\"cordoned\":%s,\"join_revision\":%lld}",
           m->leaving ? "true" : "false", m->cordoned ? "true" : "false",
           (long long)m->join_revision);
}

void eepctl_json_view(const Eep__V1__View *v)
{
    size_t i, j;

    printf("{\"epoch\":%llu,\"reason\":", (unsigned long long)v->epoch);
    eepctl_json_str(v->reason);
    printf(",\"leader\":");
    eepctl_json_str(v->leader);
    printf(",\"root\":%u,\"created_unix_ms\":%lld,\"members\":[", v->root,
           (long long)v->created_unix_ms);
    for (i = 0; i < v->n_members; i++) {
        printf(i ? "," : "");
        eepctl_json_member(v->members[i]);
    }
    printf("],\"placement\":[");
    for (i = 0; i < v->n_placement; i++) {
        printf(i ? ",[" : "[");
        for (j = 0; j < v->placement[i]->n_ranks; j++) {
            printf(j ? ",%u" : "%u", v->placement[i]->ranks[j]);
        }
        printf("]");
    }
    printf("]}");
}

static void eepctl_print_view_line(const Eep__V1__View *v)
{
    size_t i;

    printf("epoch %llu  ranks %zu  reason %s  leader %s\n", (unsigned long long)v->epoch,
           v->n_members, v->reason, v->leader);
    for (i = 0; i < v->n_members; i++) {
        printf("  rank %-4zu %s\n", i, v->members[i]->id);
    }
    fflush(stdout);
}

static grpc_channel *eepctl_channel(const eepctl_opts_t *o)
{
    eep_rpc_channel_params_t p;
    grpc_channel            *ch = NULL;

    memset(&p, 0, sizeof(p));
    p.size      = sizeof(p);
    p.target    = o->addr;
    p.ca_file   = o->ca;
    p.cert_file = o->cert;
    p.key_file  = o->key;
    if (eep_rpc_channel_create(&p, &ch) != EEP_OK) {
        return NULL;
    }
    return ch;
}

/* One unary call; prints the failure (code and message) itself. */
int eepctl_unary(const eepctl_opts_t *o, const char *method, const ProtobufCMessage *req,
                 const ProtobufCMessageDescriptor *desc, ProtobufCMessage **resp_p)
{
    grpc_channel    *ch = eepctl_channel(o);
    eep_rpc_result_t res;
    eep_status_t     status;

    if (ch == NULL) {
        fprintf(stderr, "eepctl: cannot create a channel to %s\n", o->addr);
        return 1;
    }
    status = eep_rpc_unary(ch, method, req, desc, eep_rpc_deadline_ms(o->timeout_ms), resp_p, &res);
    eep_rpc_channel_destroy(ch);
    if (status != EEP_OK) {
        if (o->json) {
            printf("{\"error\":");
            eepctl_json_str(eep_rpc_code_name(res.code));
            printf(",\"message\":");
            eepctl_json_str(res.details);
            printf("}\n");
        }
        fprintf(stderr, "eepctl: %s: %s: %s\n", method, eep_rpc_code_name(res.code), res.details);
        return 1;
    }
    return 0;
}

static int eepctl_status(const eepctl_opts_t *o)
{
    Eep__V1__GetStatusRequest req = EEP__V1__GET_STATUS_REQUEST__INIT;
    Eep__V1__GetStatusReply  *rep = NULL;
    size_t                    i, r;
    int                       ret;

    ret = eepctl_unary(o, "/eep.v1.EepControl/GetStatus", &req.base,
                       &eep__v1__get_status_reply__descriptor, (ProtobufCMessage **)&rep);
    if (ret != 0) {
        return ret;
    }
    if (o->json) {
        printf("{\"replica\":");
        eepctl_json_str(rep->replica);
        printf(",\"is_leader\":%s,\"leader\":", rep->is_leader ? "true" : "false");
        eepctl_json_str(rep->leader);
        printf(",\"views_published\":%llu,\"fault_injection\":%s,\"view\":",
               (unsigned long long)rep->views_published, rep->fault_injection ? "true" : "false");
        if (rep->view != NULL) {
            eepctl_json_view(rep->view);
        } else {
            printf("null");
        }
        printf(",\"members\":[");
        for (i = 0; i < rep->n_members; i++) {
            printf(i ? "," : "");
            eepctl_json_member(rep->members[i]);
        }
        printf("]}\n");
    } else {
        const Eep__V1__View *v = rep->view;

        printf("replica %s%s   leader %s\n", rep->replica, rep->is_leader ? " (leader)" : "",
               rep->leader[0] ? rep->leader : "(none)");
        printf("view    epoch %llu, %zu ranks, reason %s\n\n",
               (unsigned long long)(v ? v->epoch : 0), v ? v->n_members : 0,
               v && v->reason[0] ? v->reason : "-");
        printf("%-5s %-40s %-20s %-8s %-12s %-6s %s\n", "RANK", "MEMBER", "HOST", "PID", "GPU",
               "NICS", "STATE");
        for (i = 0; i < rep->n_members; i++) {
            const Eep__V1__Member *m     = rep->members[i];
            long                   rank  = -1;
            const char            *state = "standby";

            for (r = 0; v != NULL && r < v->n_members; r++) {
                if (strcmp(v->members[r]->id, m->id) == 0) {
                    rank  = (long)r;
                    state = "active";
                }
            }
            if (m->leaving) {
                state = "leaving";
            } else if (m->cordoned) {
                state = rank >= 0 ? "active,cordoned" : "cordoned";
            }
            char rank_s[24] = "-";

            if (rank >= 0) {
                snprintf(rank_s, sizeof(rank_s), "%ld", rank);
            }
            printf("%-5s %-40s %-20.20s %-8d %-12.12s %-6zu %s\n", rank_s, m->id, m->host, m->pid,
                   m->gpu_uuid[0] ? m->gpu_uuid : "-", m->n_rdma_nics, state);
        }
    }
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    return 0;
}

static int eepctl_ack(const eepctl_opts_t *o, const char *method, const ProtobufCMessage *req)
{
    Eep__V1__Ack *ack = NULL;
    int           ret;

    ret = eepctl_unary(o, method, req, &eep__v1__ack__descriptor, (ProtobufCMessage **)&ack);
    if (ret != 0) {
        return ret;
    }
    if (o->json) {
        printf("{\"ok\":true,\"message\":");
        eepctl_json_str(ack->message);
        printf("}\n");
    } else {
        printf("%s\n", ack->message);
    }
    protobuf_c_message_free_unpacked(&ack->base, NULL);
    return 0;
}

static int eepctl_health(const eepctl_opts_t *o)
{
    Eep__V1__HealthRequest req = EEP__V1__HEALTH_REQUEST__INIT;
    Eep__V1__HealthReply  *rep = NULL;
    int                    ret;

    ret = eepctl_unary(o, "/eep.v1.EepControl/Health", &req.base,
                       &eep__v1__health_reply__descriptor, (ProtobufCMessage **)&rep);
    if (ret != 0) {
        return ret;
    }
    if (o->json) {
        printf("{\"serving\":%s,\"etcd_ok\":%s,\"is_leader\":%s}\n",
               rep->serving ? "true" : "false", rep->etcd_ok ? "true" : "false",
               rep->is_leader ? "true" : "false");
    } else {
        printf("serving %s, etcd %s, %s\n", rep->serving ? "yes" : "no",
               rep->etcd_ok ? "ok" : "unreachable", rep->is_leader ? "leader" : "follower");
    }
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    return 0;
}

static int eepctl_watch(const eepctl_opts_t *o, uint64_t from, long count)
{
    Eep__V1__WatchViewsRequest req = EEP__V1__WATCH_VIEWS_REQUEST__INIT;
    grpc_channel              *ch  = eepctl_channel(o);
    grpc_completion_queue     *cq;
    eep_rpc_stream_t          *stream = NULL, *s;
    eep_rpc_stream_event_t     ev;
    long                       seen = 0;
    int                        ret = 0, cancelled = 0;

    if (ch == NULL) {
        fprintf(stderr, "eepctl: cannot create a channel to %s\n", o->addr);
        return 1;
    }
    cq = grpc_completion_queue_create_for_next(NULL);
    if (eep_rpc_stream_create(ch, cq, "/eep.v1.EepControl/WatchViews", &eep__v1__view__descriptor,
                              NULL, &stream) != EEP_OK) {
        ret = 1;
        goto out_cq;
    }
    req.from_epoch = from;
    if (eep_rpc_stream_send(stream, &req.base) != EEP_OK) {
        eep_rpc_stream_cancel(stream);
        cancelled = 1;
    }
    for (;;) {
        grpc_event e = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);

        if (e.type != GRPC_OP_COMPLETE) {
            ret = 1;
            break;
        }
        eep_rpc_stream_event(e.tag, e.success, &s, &ev);
        if (ev.message != NULL) {
            const Eep__V1__View *v = (const Eep__V1__View *)ev.message;

            if (o->json) {
                eepctl_json_view(v);
                printf("\n");
                fflush(stdout);
            } else {
                eepctl_print_view_line(v);
            }
            protobuf_c_message_free_unpacked(ev.message, NULL);
            if (count > 0 && ++seen >= count && !cancelled) {
                eep_rpc_stream_cancel(stream);
                cancelled = 1;
            }
        }
        if (ev.closed) {
            if (!cancelled) {
                fprintf(stderr, "eepctl: watch ended: %s: %s\n", eep_rpc_code_name(ev.result.code),
                        ev.result.details);
                ret = 1;
            }
            break;
        }
    }
    eep_rpc_stream_destroy(stream);
out_cq:
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
    eep_rpc_channel_destroy(ch);
    return ret;
}

/* ---- members named by rank ---------------------------------------------------------------- */

/* @return whether @p arg names a rank (a plain whole number) rather than a member id. */
static int eepctl_is_rank(const char *arg)
{
    size_t i;

    for (i = 0; arg[i] != '\0'; i++) {
        if (arg[i] < '0' || arg[i] > '9') {
            return 0;
        }
    }
    return i > 0;
}

/*
 * MEMBER as given (an id), or the id holding that rank in the current view (GetStatus), into
 * @p id_p; @p rank_p gets the rank, or -1 for an id.  @return 0, 1 when the call failed, 2 when
 * the view has no such rank.
 */
static int eepctl_resolve(const eepctl_opts_t *o, const char *arg, char *id_p, size_t len,
                          int *rank_p)
{
    Eep__V1__GetStatusRequest req = EEP__V1__GET_STATUS_REQUEST__INIT;
    Eep__V1__GetStatusReply  *rep = NULL;
    int64_t                   rank;
    int                       ret;

    *rank_p = -1;
    if (!eepctl_is_rank(arg)) {
        snprintf(id_p, len, "%s", arg);
        return 0;
    }
    if (eep_tool_parse_i64("eepctl", "MEMBER (a rank)", arg, 0, 1000000, &rank) != EEP_OK) {
        return 2;
    }
    ret = eepctl_unary(o, "/eep.v1.EepControl/GetStatus", &req.base,
                       &eep__v1__get_status_reply__descriptor, (ProtobufCMessage **)&rep);
    if (ret != 0) {
        return ret;
    }
    if (rep->view == NULL || (size_t)rank >= rep->view->n_members) {
        fprintf(stderr, "eepctl: the current view (epoch %llu) has no rank %lld\n",
                (unsigned long long)(rep->view != NULL ? rep->view->epoch : 0), (long long)rank);
        protobuf_c_message_free_unpacked(&rep->base, NULL);
        return 2;
    }
    snprintf(id_p, len, "%s", rep->view->members[rank]->id);
    if (!o->json) {
        fprintf(stderr, "eepctl: rank %lld of epoch %llu is member %s\n", (long long)rank,
                (unsigned long long)rep->view->epoch, id_p);
    }
    *rank_p = (int)rank;
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    return 0;
}

/* ---- commands ------------------------------------------------------------------------------ */

enum { EEPCTL_WATCH_OPTS = 1, EEPCTL_TOP_OPTS = 2 };

typedef struct eepctl_cmd {
    const char *name;
    const char *args; /* positional arguments, for the usage line */
    const char *help; /* what it does, and its own options */
    int         min_args, max_args;
    int         cmd_opts; /* EEPCTL_WATCH_OPTS (--from, --count), EEPCTL_TOP_OPTS */
    int (*run)(const struct eepctl_cmd *cmd, const eepctl_opts_t *o, char **args, int n_args);
} eepctl_cmd_t;

static int eepctl_run_status(const eepctl_cmd_t *cmd, const eepctl_opts_t *o, char **args, int n)
{
    (void)cmd, (void)args, (void)n;
    return eepctl_status(o);
}

static int eepctl_run_health(const eepctl_cmd_t *cmd, const eepctl_opts_t *o, char **args, int n)
{
    (void)cmd, (void)args, (void)n;
    return eepctl_health(o);
}

static int eepctl_run_watch(const eepctl_cmd_t *cmd, const eepctl_opts_t *o, char **args, int n)
{
    (void)cmd, (void)args, (void)n;
    return eepctl_watch(o, o->from, o->count);
}

static int eepctl_run_top(const eepctl_cmd_t *cmd, const eepctl_opts_t *o, char **args, int n)
{
    (void)cmd, (void)args, (void)n;
    return eepctl_top(o);
}

static int eepctl_run_member(const eepctl_cmd_t *cmd, const eepctl_opts_t *o, char **args, int n)
{
    Eep__V1__MemberRequest req = EEP__V1__MEMBER_REQUEST__INIT;
    char                   method[64], id[256];
    int                    rank, ret;

    (void)n;
    ret = eepctl_resolve(o, args[0], id, sizeof(id), &rank);
    if (ret != 0) {
        return ret;
    }
    req.member = id;
    snprintf(method, sizeof(method), "/eep.v1.EepControl/%s",
             cmd->name[0] == 'd'   ? "Drain"
             : cmd->name[0] == 'c' ? "Cordon"
                                   : "Uncordon");
    return eepctl_ack(o, method, &req.base);
}

static int eepctl_run_report(const eepctl_cmd_t *cmd, const eepctl_opts_t *o, char **args, int n)
{
    Eep__V1__Fault req = EEP__V1__FAULT__INIT;
    char           id[256];
    int            rank, ret;

    (void)cmd;
    ret = eepctl_resolve(o, args[0], id, sizeof(id), &rank);
    if (ret != 0) {
        return ret;
    }
    req.reporter     = "eepctl";
    req.suspect      = id;
    req.suspect_rank = rank;
    req.phase        = n > 1 ? args[1] : "operator";
    return eepctl_ack(o, "/eep.v1.EepControl/ReportFault", &req.base);
}

static int eepctl_run_inject(const eepctl_cmd_t *cmd, const eepctl_opts_t *o, char **args, int n)
{
    static const struct {
        const char        *name;
        Eep__V1__FaultKind kind;
    } kinds[] = {
        { "evict", EEP__V1__FAULT_KIND__FAULT_EVICT },
        { "revoke-lease", EEP__V1__FAULT_KIND__FAULT_REVOKE_LEASE },
        { "step-down", EEP__V1__FAULT_KIND__FAULT_LEADER_STEP_DOWN },
        { "stale-publish", EEP__V1__FAULT_KIND__FAULT_STALE_PUBLISH },
        { "data-plane", EEP__V1__FAULT_KIND__FAULT_DATA_PLANE },
    };
    Eep__V1__InjectFaultRequest req     = EEP__V1__INJECT_FAULT_REQUEST__INIT;
    char                        id[256] = "";
    size_t                      i;
    int                         rank, ret;

    for (i = 0; i < sizeof(kinds) / sizeof(kinds[0]) && strcmp(kinds[i].name, args[0]) != 0; i++) {
    }
    if (i == sizeof(kinds) / sizeof(kinds[0])) {
        fprintf(stderr,
                "eepctl %s: unknown fault kind '%s' (evict, revoke-lease, step-down, "
                "stale-publish, data-plane)\n",
                cmd->name, args[0]);
        return 2;
    }
    req.kind = kinds[i].kind;
    if ((req.kind == EEP__V1__FAULT_KIND__FAULT_DATA_PLANE) != (n == 3)) {
        fprintf(stderr, "eepctl %s: %s\n", cmd->name,
                n == 3 ? "only data-plane takes a SPEC"
                       : "data-plane wants MEMBER and SPEC, e.g. 2 \"stall ms=800\"");
        return 2;
    }
    req.spec = n == 3 ? args[2] : "";
    if (n > 1) {
        ret = eepctl_resolve(o, args[1], id, sizeof(id), &rank);
        if (ret != 0) {
            return ret;
        }
    }
    req.member = id;
    return eepctl_ack(o, "/eep.v1.EepControl/InjectFault", &req.base);
}

static const eepctl_cmd_t eepctl_cmds[] = {
    { "status", "", "the current view and every member (a table: rank, id, host, state)", 0, 0, 0,
      eepctl_run_status },
    { "watch", "",
      "print views as they are published\n"
      "  --from=E   start at epoch E (default: the current view)\n"
      "  --count=N  stop after N views (default: run until interrupted)",
      0, 0, EEPCTL_WATCH_OPTS, eepctl_run_watch },
    { "drain", "MEMBER",
      "remove a member from the next view at once\n  (graceful: node maintenance)", 1, 1, 0,
      eepctl_run_member },
    { "cordon", "MEMBER", "keep a member out of later views (a standby is not admitted)", 1, 1, 0,
      eepctl_run_member },
    { "uncordon", "MEMBER", "undo cordon", 1, 1, 0, eepctl_run_member },
    { "report-fault", "SUSPECT [PHASE]",
      "report a suspected member (the leader evicts it)\n"
      "  it rejoins as a new member; PHASE defaults to \"operator\"",
      1, 2, 0, eepctl_run_report },
    { "inject-fault", "KIND [MEMBER [SPEC]]",
      "testing only: inject a fault (eepd must enable it)\n"
      "  KIND: evict, revoke-lease (MEMBER's lease), step-down (the leader), stale-publish\n"
      "  (a follower publishes once as if it led), data-plane (MEMBER's rank arms SPEC,\n"
      "  e.g. \"stall phase=combine ms=800\": docs/fault-schedule.md; eep-rank needs\n"
      "  --agent-faults); eepd needs EEP_EEPD_FAULT_INJECTION=1",
      1, 3, 0, eepctl_run_inject },
    { "health", "", "whether the replica serves, reaches etcd, and leads", 0, 0, 0,
      eepctl_run_health },
    { "top", "",
      "the view's ranks, each rank's own metrics (step, epoch, p50s, time waited, the peer\n"
      "  it waits for most; at the URL its member key publishes) and eepd's counters, refreshed\n"
      "  --interval-ms=N  refresh period (default 1000)\n"
      "  --iterations=N   stop after N refreshes (default: until interrupted)\n"
      "  --metrics=URL    also read eepd's counters, http://HOST:PORT/metrics",
      0, 0, EEPCTL_TOP_OPTS, eepctl_run_top },
};

#define EEPCTL_N_CMDS (sizeof(eepctl_cmds) / sizeof(eepctl_cmds[0]))

static const char eepctl_global_help[] =
    "options (before or after COMMAND):\n"
    "  --addr=HOST:PORT  an eepd replica (default EEP_EEPCTL_ADDR, else eepd's default\n"
    "                    listen address 127.0.0.1:7070)\n"
    "  --ca=FILE         TLS: CA of eepd's certificate (EEP_EEPCTL_CA)\n"
    "  --cert=FILE       TLS client certificate, needed by mutating calls (EEP_EEPCTL_CERT)\n"
    "  --key=FILE        its private key (EEP_EEPCTL_KEY)\n"
    "  --json            one JSON object per line\n"
    "  --timeout-ms=N    deadline of each call (default 5000)\n"
    "  --help, --version\n"
    "MEMBER: a member id, or a rank of the current view (a number).\n"
    "exit status: 0 ok, 1 the call failed, 2 bad usage.\n";

static int eepctl_usage(FILE *out)
{
    size_t i;

    fprintf(out, "usage: eepctl [OPTIONS] COMMAND [ARGS]   (eepctl COMMAND --help for one)\n");
    for (i = 0; i < EEPCTL_N_CMDS; i++) {
        const char *nl = strchr(eepctl_cmds[i].help, '\n');
        int         w  = nl != NULL ? (int)(nl - eepctl_cmds[i].help) : 1000;
        char        line[64];

        snprintf(line, sizeof(line), "%s %s", eepctl_cmds[i].name, eepctl_cmds[i].args);
        fprintf(out, "  %-30s %.*s\n", line, w, eepctl_cmds[i].help);
    }
    fputs(eepctl_global_help, out);
    return out == stderr ? 2 : 0;
}

static int eepctl_cmd_usage(const eepctl_cmd_t *cmd, FILE *out)
{
    fprintf(out, "usage: eepctl [OPTIONS] %s%s%s\n  %s\n", cmd->name, cmd->args[0] ? " " : "",
            cmd->args, cmd->help);
    fputs(eepctl_global_help, out);
    return out == stderr ? 2 : 0;
}

enum {
    EEPCTL_OPT_TIMEOUT = 256,
    EEPCTL_OPT_FROM,
    EEPCTL_OPT_COUNT,
    EEPCTL_OPT_VERSION,
    EEPCTL_OPT_INTERVAL,
    EEPCTL_OPT_ITERATIONS,
    EEPCTL_OPT_METRICS
};

static const struct option eepctl_longopts[] = {
    { "addr", required_argument, NULL, 'a' },
    { "ca", required_argument, NULL, 'C' },
    { "cert", required_argument, NULL, 'c' },
    { "key", required_argument, NULL, 'k' },
    { "json", no_argument, NULL, 'j' },
    { "timeout-ms", required_argument, NULL, EEPCTL_OPT_TIMEOUT },
    { "from", required_argument, NULL, EEPCTL_OPT_FROM },
    { "count", required_argument, NULL, EEPCTL_OPT_COUNT },
    { "interval-ms", required_argument, NULL, EEPCTL_OPT_INTERVAL },
    { "iterations", required_argument, NULL, EEPCTL_OPT_ITERATIONS },
    { "metrics", required_argument, NULL, EEPCTL_OPT_METRICS },
    { "help", no_argument, NULL, 'h' },
    { "version", no_argument, NULL, EEPCTL_OPT_VERSION },
    { NULL, 0, NULL, 0 },
};

/*
 * One getopt_long pass over @p argv (the whole line with @p cmd NULL: stop at the command; a
 * command's words with @p cmd set).  @return -1 to go on, else the exit status.
 */
static int eepctl_parse(int argc, char **argv, const eepctl_cmd_t *cmd, eepctl_opts_t *o)
{
    const char *prog = cmd != NULL ? cmd->name : "eepctl";
    int64_t     v;
    int         c;

    optind = 0; /* GNU: start afresh (the second pass parses another vector) */
    opterr = 0;
    while ((c = getopt_long(argc, argv, cmd != NULL ? ":h" : "+:h", eepctl_longopts, NULL)) != -1) {
        switch (c) {
        case 'a':
            o->addr = optarg;
            break;
        case 'C':
            o->ca = optarg;
            break;
        case 'c':
            o->cert = optarg;
            break;
        case 'k':
            o->key = optarg;
            break;
        case 'j':
            o->json = 1;
            break;
        case EEPCTL_OPT_TIMEOUT:
            if (eep_tool_parse_i64("eepctl", "--timeout-ms", optarg, 1, 3600000, &v) != EEP_OK) {
                return 2;
            }
            o->timeout_ms = (int)v;
            break;
        case EEPCTL_OPT_FROM:
        case EEPCTL_OPT_COUNT:
            if (cmd == NULL || !(cmd->cmd_opts & EEPCTL_WATCH_OPTS)) {
                fprintf(stderr, "eepctl: %s belongs to watch (eepctl watch %s=N)\n",
                        c == EEPCTL_OPT_FROM ? "--from" : "--count",
                        c == EEPCTL_OPT_FROM ? "--from" : "--count");
                return 2;
            }
            /* Whole numbers in range or usage error: "abc" or "-1" once meant a default, or
             * (--from -1) 2^64-1, a watch that waited for ever. */
            if (eep_tool_parse_i64("eepctl", c == EEPCTL_OPT_FROM ? "--from" : "--count", optarg,
                                   c == EEPCTL_OPT_FROM ? 0 : 1, INT64_MAX, &v) != EEP_OK) {
                return 2;
            }
            if (c == EEPCTL_OPT_FROM) {
                o->from = (uint64_t)v;
            } else {
                o->count = (long)v;
            }
            break;
        case EEPCTL_OPT_INTERVAL:
        case EEPCTL_OPT_ITERATIONS:
        case EEPCTL_OPT_METRICS: {
            const char *flag = c == EEPCTL_OPT_INTERVAL     ? "--interval-ms"
                               : c == EEPCTL_OPT_ITERATIONS ? "--iterations"
                                                            : "--metrics";

            if (cmd == NULL || !(cmd->cmd_opts & EEPCTL_TOP_OPTS)) {
                fprintf(stderr, "eepctl: %s belongs to top (eepctl top %s=...)\n", flag, flag);
                return 2;
            }
            if (c == EEPCTL_OPT_METRICS) {
                if (eepctl_top_check_url(optarg) != 0) {
                    return 2;
                }
                o->metrics = optarg;
                break;
            }
            if (eep_tool_parse_i64("eepctl", flag, optarg, c == EEPCTL_OPT_INTERVAL ? 10 : 1,
                                   c == EEPCTL_OPT_INTERVAL ? 3600000 : INT64_MAX, &v) != EEP_OK) {
                return 2;
            }
            if (c == EEPCTL_OPT_INTERVAL) {
                o->interval_ms = (int)v;
            } else {
                o->count = (long)v;
            }
            break;
        }
        case 'h':
            return cmd != NULL ? eepctl_cmd_usage(cmd, stdout) : eepctl_usage(stdout);
        case EEPCTL_OPT_VERSION:
            printf("eepctl (ElasticEP) %s\n", eep_version());
            return 0;
        case ':':
            fprintf(stderr, "eepctl: %s needs a value\n", argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, "eepctl: %s: unknown option '%s'\n", prog, argv[optind - 1]);
            return cmd != NULL ? eepctl_cmd_usage(cmd, stderr) : eepctl_usage(stderr);
        }
    }
    return -1;
}

int main(int argc, char **argv)
{
    eepctl_config_t     cfg;
    eepctl_opts_t       o   = { .timeout_ms = 5000 };
    const eepctl_cmd_t *cmd = NULL;
    size_t              i;
    int                 ret, n_args, first;

    /* Knobs first (the defaults), flags over them. */
    if (eep_config_load(&eepctl_knob_table, &cfg) != EEP_OK) {
        return 2;
    }
    eep_config_check_env();
    o.addr = cfg.addr;
    o.ca   = cfg.ca[0] != '\0' ? cfg.ca : NULL;
    o.cert = cfg.cert[0] != '\0' ? cfg.cert : NULL;
    o.key  = cfg.key[0] != '\0' ? cfg.key : NULL;
    ret    = eepctl_parse(argc, argv, NULL, &o);
    if (ret >= 0) {
        return ret;
    }
    first = optind;
    if (first >= argc) {
        fprintf(stderr, "eepctl: no COMMAND given\n");
        return eepctl_usage(stderr);
    }
    for (i = 0; i < EEPCTL_N_CMDS; i++) {
        if (strcmp(argv[first], eepctl_cmds[i].name) == 0) {
            cmd = &eepctl_cmds[i];
        }
    }
    if (cmd == NULL) {
        fprintf(stderr, "eepctl: unknown command '%s'\n", argv[first]);
        return eepctl_usage(stderr);
    }
    /* The command's words (argv[first] plays argv[0]); GNU getopt moves the options first. */
    ret = eepctl_parse(argc - first, argv + first, cmd, &o);
    if (ret >= 0) {
        return ret;
    }
    n_args = argc - first - optind;
    if (n_args < cmd->min_args || n_args > cmd->max_args) {
        fprintf(stderr, "eepctl %s: %s%s\n", cmd->name,
                n_args < cmd->min_args ? "missing " : "too many arguments; usage: ",
                cmd->args[0] ? cmd->args : "no arguments");
        return eepctl_cmd_usage(cmd, stderr);
    }
    if ((o.cert != NULL) != (o.key != NULL)) {
        fprintf(stderr, "eepctl: --cert and --key go together\n");
        return 2;
    }
    eep_rpc_init();
    ret = cmd->run(cmd, &o, argv + first + optind, n_args);
    eep_rpc_shutdown();
    return ret;
}
