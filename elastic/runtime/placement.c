/*
 * placement.c - expert placement as data (include/eep/membership.h): the default policy, the
 * placement checker and the check of a whole view.
 *
 * The checker is what stands between a provider (or an application's own policy) and the
 * kernels: everything it accepts is a placement the kernels can index without a bounds check of
 * their own.  It needs no sort: counting experts per rank first makes "slots dense per rank" the
 * same as "no two experts of a rank share a slot below its count" (pigeonhole).
 */
#include "eep/membership.h"

#include <stdlib.h>
#include <string.h>

#include "eep/ep.h"
#include "eep/layout.h"
#include "util/log.h"

static eep_status_t eep_placement_check_dims(const char *call, int num_experts, int world)
{
    if (num_experts < 1 || num_experts > EEP_EP_MAX_EXPERTS) {
        eep_error(EEP_SUBSYS_RUNTIME, "%s: invalid argument num_experts: %d outside [1, %d]", call,
                  num_experts, EEP_EP_MAX_EXPERTS);
        return EEP_ERR_INVALID_ARG;
    }
    if (world < 1 || world > EEP_MAX_RANKS) {
        eep_error(EEP_SUBSYS_RUNTIME, "%s: invalid argument world: %d outside [1, %d]", call, world,
                  EEP_MAX_RANKS);
        return EEP_ERR_INVALID_ARG;
    }
    return EEP_OK;
}

eep_status_t eep_placement_default(int num_experts, int world, eep_expert_place_t *placement_p)
{
    eep_status_t status;
    int          e, r, first;

    status = eep_placement_check_dims("eep_placement_default", num_experts, world);
    if (status != EEP_OK) {
        return status;
    }
    if (placement_p == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "eep_placement_default: invalid argument placement_p: NULL");
        return EEP_ERR_INVALID_ARG;
    }
    for (e = 0; e < num_experts; e++) {
        /* The same integer formula as eepd_view_place, so both sides agree on every expert. */
        r     = (int)(((int64_t)e * world) / num_experts);
        first = (int)(((int64_t)r * num_experts + world - 1) / world);

        placement_p[e].rank = r;
        placement_p[e].slot = e - first;
    }
    return EEP_OK;
}

eep_status_t eep_placement_check(const eep_expert_place_t *placement, int num_experts, int world,
                                 int *counts_p)
{
    const char  *call = "eep_placement_check";
    int         *counts, *offs, *owner;
    eep_status_t status;
    int          e, r;

    status = eep_placement_check_dims(call, num_experts, world);
    if (status != EEP_OK) {
        return status;
    }
    if (placement == NULL) {
        eep_error(EEP_SUBSYS_RUNTIME, "%s: invalid argument placement: NULL", call);
        return EEP_ERR_INVALID_ARG;
    }
    counts = calloc((size_t)world * 2 + (size_t)num_experts, sizeof(int));
    if (counts == NULL) {
        return EEP_ERR_NO_MEMORY;
    }
    offs   = counts + world;
    owner  = offs + world;
    status = EEP_ERR_INVALID_ARG;
    for (e = 0; e < num_experts; e++) {
        if (placement[e].rank < 0 || placement[e].rank >= world) {
            eep_error(EEP_SUBSYS_RUNTIME, "%s: expert %d is placed on rank %d, outside [0, %d)",
                      call, e, placement[e].rank, world);
            goto out;
        }
        if (placement[e].slot < 0) {
            eep_error(EEP_SUBSYS_RUNTIME, "%s: expert %d has a negative slot %d on rank %d", call,
                      e, placement[e].slot, placement[e].rank);
            goto out;
        }
        counts[placement[e].rank]++;
    }
    for (r = 1; r < world; r++) {
        offs[r] = offs[r - 1] + counts[r - 1];
    }
    for (e = 0; e < num_experts; e++) {
        const eep_expert_place_t *p = &placement[e];
        int                      *o;

        if (p->slot >= counts[p->rank]) {
            eep_error(EEP_SUBSYS_RUNTIME,
                      "%s: expert %d is in slot %d of rank %d, which holds %d experts: its "
                      "slots must be 0..%d",
                      call, e, p->slot, p->rank, counts[p->rank], counts[p->rank] - 1);
            goto out;
        }
        o = &owner[offs[p->rank] + p->slot];
        if (*o != 0) {
            eep_error(EEP_SUBSYS_RUNTIME,
                      "%s: expert %d and expert %d are both in slot %d of rank %d", call, *o - 1, e,
                      p->slot, p->rank);
            goto out;
        }
        *o = e + 1;
    }
    if (counts_p != NULL) {
        memcpy(counts_p, counts, (size_t)world * sizeof(int));
    }
    status = EEP_OK;
out:
    free(counts);
    return status;
}

static eep_status_t eep_view_bad(const char *field, const char *why, long long value)
{
    eep_error(EEP_SUBSYS_RUNTIME, "membership view: invalid %s: %s (%lld)", field, why, value);
    return EEP_ERR_INVALID_ARG;
}

eep_status_t eep_view_check(const eep_view_t *v)
{
    int i, j;

    if (v == NULL) {
        return eep_view_bad("view", "NULL", 0);
    }
    if (v->size < offsetof(eep_view_t, placement) + sizeof(v->placement) ||
        v->size > sizeof(eep_view_t)) {
        return eep_view_bad("size", "not sizeof(eep_view_t) of this library", (long long)v->size);
    }
    if (v->epoch == 0) {
        return eep_view_bad("epoch", "views are numbered from 1", 0);
    }
    if (v->world < 1 || v->world > EEP_MAX_RANKS) {
        return eep_view_bad("world", "outside [1, EEP_MAX_RANKS]", v->world);
    }
    if (v->my_rank < -1 || v->my_rank >= v->world) {
        return eep_view_bad("my_rank", "outside [-1, world)", v->my_rank);
    }
    if (v->root < 0 || v->root >= v->world) {
        return eep_view_bad("root", "outside [0, world)", v->root);
    }
    if (v->member_ids == NULL) {
        return eep_view_bad("member_ids", "NULL", 0);
    }
    for (i = 0; i < v->world; i++) {
        if (v->member_ids[i] == NULL || v->member_ids[i][0] == '\0') {
            return eep_view_bad("member_ids", "missing id of rank", i);
        }
        for (j = 0; j < i; j++) {
            if (strcmp(v->member_ids[i], v->member_ids[j]) == 0) {
                eep_error(EEP_SUBSYS_RUNTIME,
                          "membership view: invalid member_ids: ranks %d and %d are both "
                          "member %s",
                          j, i, v->member_ids[i]);
                return EEP_ERR_INVALID_ARG;
            }
        }
    }
    if (v->num_experts < 0) {
        return eep_view_bad("num_experts", "negative", v->num_experts);
    }
    if (v->num_experts == 0) {
        return EEP_OK;
    }
    return eep_placement_check(v->placement, v->num_experts, v->world, NULL);
}
