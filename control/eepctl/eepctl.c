/*
 * eepctl.c - the operator's CLI over eepd's EepControl API.
 *
 *   eepctl [--addr host:port] [--ca F [--cert F --key F]] [--json] [--timeout-ms N] COMMAND
 *     status                       the current view and every member, as a table
 *     watch [--from E] [--count N] print views as they are published
 *     drain|cordon|uncordon MEMBER
 *     report-fault SUSPECT [PHASE]
 *     inject-fault evict|revoke-lease|step-down|stale-publish [MEMBER]
 *     health
 *
 * Every command takes --json (one JSON object per line).  Exit status: 0 ok, 1 the call failed
 * (the gRPC code and message are printed), 2 bad usage.  Calls go through rpc_client's glue.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/rpc/rpc_client.h"
#include "control/tool/tool.h"
#include "util/log.h"
#include "proto/eep.pb-c.h"

typedef struct {
    const char *addr;
    const char *ca, *cert, *key;
    int         json;
    int         timeout_ms;
} eepctl_opts_t;

static int eepctl_usage(FILE *out)
{
    fprintf(out, "usage: eepctl [--addr host:port] [--ca F [--cert F --key F]] [--json] "
                 "[--timeout-ms N] COMMAND\n"
                 "  status                        current view and members (table)\n"
                 "  watch [--from E] [--count N]  print views as they are published\n"
                 "  drain MEMBER                  remove a member from the next view at once\n"
                 "  cordon MEMBER | uncordon MEMBER\n"
                 "  report-fault SUSPECT [PHASE]  report a suspected member\n"
                 "  inject-fault evict|revoke-lease|step-down|stale-publish [MEMBER]\n"
                 "                                (eepd must enable it)\n"
                 "  health\n");
    return out == stderr ? 2 : 0;
}

static void eepctl_json_str(const char *s)
{
    eep_tool_json_str(stdout, s);
}

static void eepctl_json_member(const Eep__V1__Member *m)
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

static void eepctl_json_view(const Eep__V1__View *v)
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
static int eepctl_unary(const eepctl_opts_t *o, const char *method, const ProtobufCMessage *req,
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

int main(int argc, char **argv)
{
    eepctl_opts_t o       = { "127.0.0.1:7070", NULL, NULL, NULL, 0, 5000 };
    uint64_t      from    = 0;
    long          count   = 0;
    const char   *cmd     = NULL;
    const char   *args[3] = { NULL, NULL, NULL };
    int           n_args  = 0, i, ret;

    for (i = 1; i < argc; i++) {
        const char *a = argv[i];

        if (strcmp(a, "--json") == 0) {
            o.json = 1;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            return eepctl_usage(stdout);
        } else if (i + 1 < argc && strcmp(a, "--addr") == 0) {
            o.addr = argv[++i];
        } else if (i + 1 < argc && strcmp(a, "--ca") == 0) {
            o.ca = argv[++i];
        } else if (i + 1 < argc && strcmp(a, "--cert") == 0) {
            o.cert = argv[++i];
        } else if (i + 1 < argc && strcmp(a, "--key") == 0) {
            o.key = argv[++i];
        } else if (strcmp(a, "--timeout-ms") == 0 || strcmp(a, "--from") == 0 ||
                   strcmp(a, "--count") == 0) {
            /* Whole numbers in range or usage error: "abc" or "-1" once meant a default, or
             * (--from -1) 2^64-1, a watch that waited for ever. */
            int64_t lo = strcmp(a, "--from") == 0 ? 0 : 1, v = 0;
            int64_t hi = strcmp(a, "--timeout-ms") == 0 ? 3600000 : INT64_MAX;

            if (i + 1 >= argc) {
                fprintf(stderr, "eepctl: %s needs a value\n", a);
                return 2;
            }
            if (eep_tool_parse_i64("eepctl", a, argv[++i], lo, hi, &v) != EEP_OK) {
                return 2;
            }
            if (a[2] == 't') {
                o.timeout_ms = (int)v;
            } else if (a[2] == 'f') {
                from = (uint64_t)v;
            } else {
                count = (long)v;
            }
        } else if (a[0] == '-') {
            fprintf(stderr, "eepctl: unknown option '%s'\n", a);
            return eepctl_usage(stderr);
        } else if (cmd == NULL) {
            cmd = a;
        } else if (n_args < 3) {
            args[n_args++] = a;
        } else {
            return eepctl_usage(stderr);
        }
    }
    if (cmd == NULL) {
        return eepctl_usage(stderr);
    }
    eep_rpc_init();
    if (strcmp(cmd, "status") == 0) {
        ret = eepctl_status(&o);
    } else if (strcmp(cmd, "watch") == 0) {
        ret = eepctl_watch(&o, from, count);
    } else if (strcmp(cmd, "health") == 0) {
        ret = eepctl_health(&o);
    } else if ((strcmp(cmd, "drain") == 0 || strcmp(cmd, "cordon") == 0 ||
                strcmp(cmd, "uncordon") == 0) &&
               n_args == 1) {
        Eep__V1__MemberRequest req = EEP__V1__MEMBER_REQUEST__INIT;
        char                   method[64];

        req.member = (char *)args[0];
        snprintf(method, sizeof(method), "/eep.v1.EepControl/%s",
                 cmd[0] == 'd'   ? "Drain"
                 : cmd[0] == 'c' ? "Cordon"
                                 : "Uncordon");
        ret = eepctl_ack(&o, method, &req.base);
    } else if (strcmp(cmd, "report-fault") == 0 && n_args >= 1) {
        Eep__V1__Fault req = EEP__V1__FAULT__INIT;

        req.reporter     = "eepctl";
        req.suspect      = (char *)args[0];
        req.suspect_rank = -1;
        req.phase        = (char *)(n_args > 1 ? args[1] : "operator");
        ret              = eepctl_ack(&o, "/eep.v1.EepControl/ReportFault", &req.base);
    } else if (strcmp(cmd, "inject-fault") == 0 && n_args >= 1) {
        Eep__V1__InjectFaultRequest req = EEP__V1__INJECT_FAULT_REQUEST__INIT;

        if (strcmp(args[0], "evict") == 0) {
            req.kind = EEP__V1__FAULT_KIND__FAULT_EVICT;
        } else if (strcmp(args[0], "revoke-lease") == 0) {
            req.kind = EEP__V1__FAULT_KIND__FAULT_REVOKE_LEASE;
        } else if (strcmp(args[0], "step-down") == 0) {
            req.kind = EEP__V1__FAULT_KIND__FAULT_LEADER_STEP_DOWN;
        } else if (strcmp(args[0], "stale-publish") == 0) {
            req.kind = EEP__V1__FAULT_KIND__FAULT_STALE_PUBLISH;
        } else {
            eep_rpc_shutdown();
            return eepctl_usage(stderr);
        }
        req.member = (char *)(n_args > 1 ? args[1] : "");
        ret        = eepctl_ack(&o, "/eep.v1.EepControl/InjectFault", &req.base);
    } else {
        eep_rpc_shutdown();
        return eepctl_usage(stderr);
    }
    eep_rpc_shutdown();
    return ret;
}
