/*
 * ep_args.c - host-side validation of dispatch and combine arguments.
 *
 * One function per call; each rule reports the first argument it finds wrong, by its field name,
 * and logs it once here (the callers only propagate).  Checks are ordered so that a message is
 * never about a consequence of an earlier mistake: the struct version, then the shape, then the
 * pointers, then the handle.
 */
#include "elastic/ep/ep_args.h"

#include <stddef.h>

#include "elastic/ep/ep_handle.h"
#include "util/log.h"

/* The first version of eep_dispatch_args_t ends with num_recv_rows_p. */
#define EEP_DISPATCH_ARGS_V1_SIZE                                                                  \
    (offsetof(eep_dispatch_args_t, num_recv_rows_p) + sizeof(int64_t *))

static eep_status_t eep_ep_bad(const char *call, const char *arg, const char *why)
{
    eep_error(EEP_SUBSYS_KERNEL, "%s: invalid argument %s: %s", call, arg, why);
    return EEP_ERR_INVALID_ARG;
}

/* A device tensor: non-NULL and 16-byte aligned. */
static eep_status_t eep_ep_check_ptr(const char *call, const char *arg, const void *ptr)
{
    if (ptr == NULL) {
        return eep_ep_bad(call, arg, "NULL pointer");
    }
    if ((uintptr_t)ptr % EEP_EP_PTR_ALIGN != 0) {
        eep_error(EEP_SUBSYS_KERNEL, "%s: invalid argument %s: pointer %p is not %d-byte aligned",
                  call, arg, ptr, EEP_EP_PTR_ALIGN);
        return EEP_ERR_INVALID_ARG;
    }
    return EEP_OK;
}

eep_status_t eep_ep_handle_check(const eep_ep_handle_t *h, const eep_ep_world_t *world,
                                 const char *what)
{
    if (h == NULL) {
        return eep_ep_bad(what, "handle", "NULL handle");
    }
    if (h->magic != EEP_EP_HANDLE_MAGIC) {
        return eep_ep_bad(what, "handle", "not a live dispatch handle (destroyed or corrupted)");
    }
    if (h->runtime != world->runtime) {
        return eep_ep_bad(what, "handle", "made by another runtime");
    }
    if (h->epoch != world->epoch) {
        eep_error(EEP_SUBSYS_KERNEL,
                  "%s: handle made in membership epoch %llu, the runtime is "
                  "in epoch %llu: dispatch again to get a handle of this epoch",
                  what, (unsigned long long)h->epoch, (unsigned long long)world->epoch);
        return EEP_ERR_STALE_EPOCH;
    }
    if (!h->has_layout) {
        return eep_ep_bad(what, "handle", "no dispatch has filled its layout yet");
    }
    return EEP_OK;
}

void eep_ep_world_place(const eep_ep_world_t *world, int num_experts, eep_ep_shape_t *shape)
{
    int own = world->placement != NULL && world->place_experts == num_experts;

    shape->placement = own ? world->placement : NULL;
    shape->local_max = own ? world->place_local_max : 0;
}

static eep_status_t eep_ep_check_shape(const eep_dispatch_args_t *a, const eep_ep_world_t *world,
                                       eep_ep_shape_t *shape_p)
{
    static const char call[] = "dispatch";
    eep_ep_shape_t    s      = {
                .world       = world->world,
                .max_tokens  = a->max_tokens_per_rank,
                .hidden      = a->hidden,
                .num_topk    = a->num_topk,
                .num_experts = a->num_experts,
                .alignment   = a->expert_alignment,
                .dtype       = a->dtype,
    };
    const char *why = NULL;

    /* Name the rule, not only the field: the message must say how to fix it. */
    if (eep_ep_elem_bytes(a->dtype) == 0) {
        return eep_ep_bad(call, "dtype", "neither EEP_DTYPE_BF16 nor EEP_DTYPE_FP8_E4M3");
    }
    if (a->max_tokens_per_rank < 1) {
        return eep_ep_bad(call, "max_tokens_per_rank", "must be >= 1");
    }
    if (a->num_tokens < 0 || a->num_tokens > a->max_tokens_per_rank) {
        eep_error(EEP_SUBSYS_KERNEL,
                  "dispatch: invalid argument num_tokens: %d is outside "
                  "[0, max_tokens_per_rank = %d]",
                  a->num_tokens, a->max_tokens_per_rank);
        return EEP_ERR_INVALID_ARG;
    }
    if (a->hidden <= 0 || ((size_t)a->hidden * eep_ep_elem_bytes(a->dtype)) % 16 != 0) {
        eep_error(EEP_SUBSYS_KERNEL,
                  "dispatch: invalid argument hidden: %d channels of %zu "
                  "bytes is not a positive multiple of 16 bytes",
                  a->hidden, eep_ep_elem_bytes(a->dtype));
        return EEP_ERR_INVALID_ARG;
    }
    if (a->dtype == EEP_DTYPE_FP8_E4M3 && a->hidden % EEP_EP_FP8_BLOCK != 0) {
        eep_error(EEP_SUBSYS_KERNEL,
                  "dispatch: invalid argument hidden: %d is not a multiple of "
                  "%d (one fp8 scale per %d channels)",
                  a->hidden, EEP_EP_FP8_BLOCK, EEP_EP_FP8_BLOCK);
        return EEP_ERR_INVALID_ARG;
    }
    if (a->num_topk < 1 || a->num_topk > EEP_EP_MAX_TOPK) {
        eep_error(EEP_SUBSYS_KERNEL, "dispatch: invalid argument num_topk: %d is outside [1, %d]",
                  a->num_topk, EEP_EP_MAX_TOPK);
        return EEP_ERR_INVALID_ARG;
    }
    if (a->num_experts < 1 || a->num_experts > EEP_EP_MAX_EXPERTS || a->num_topk > a->num_experts) {
        eep_error(EEP_SUBSYS_KERNEL,
                  "dispatch: invalid argument num_experts: %d must be in [num_topk = %d, %d]",
                  a->num_experts, a->num_topk, EEP_EP_MAX_EXPERTS);
        return EEP_ERR_INVALID_ARG;
    }
    eep_ep_world_place(world, a->num_experts, &s);
    if (eep_ep_local_experts(&s) > EEP_EP_MAX_LOCAL_EXPERTS) {
        eep_error(EEP_SUBSYS_KERNEL,
                  "dispatch: invalid argument num_experts: %d experts on %d ranks put %d on one "
                  "rank (%s placement), more than %d",
                  a->num_experts, world->world, eep_ep_local_experts(&s),
                  s.placement != NULL ? "the view's" : "the default", EEP_EP_MAX_LOCAL_EXPERTS);
        return EEP_ERR_INVALID_ARG;
    }
    if (a->expert_alignment < 1 || (a->expert_alignment & (a->expert_alignment - 1)) != 0) {
        eep_error(EEP_SUBSYS_KERNEL,
                  "dispatch: invalid argument expert_alignment: %d is not a "
                  "power of two >= 1",
                  a->expert_alignment);
        return EEP_ERR_INVALID_ARG;
    }
    /* Whatever the rules above missed (limits of the layout itself). */
    if (eep_ep_shape_check(&s, &why) != EEP_OK) {
        return eep_ep_bad(call, why, "out of the supported range (see eep/ep.h limits)");
    }
    *shape_p = s;
    return EEP_OK;
}

/* The fourth version of the struct (degraded mode): dead_mask, dropped_topk, num_dropped. */
static int eep_ep_args_v4(const eep_dispatch_args_t *a)
{
    return a->size >= offsetof(eep_dispatch_args_t, num_dropped) + sizeof(a->num_dropped);
}

uint32_t eep_ep_args_dead_mask(const eep_dispatch_args_t *a, const eep_ep_world_t *world)
{
    return world->dead_mask | (eep_ep_args_v4(a) ? (uint32_t)a->dead_mask : 0u);
}

/* The caller's dead ranks: inside the world, never this rank. */
static eep_status_t eep_ep_check_dead_mask(const eep_dispatch_args_t *a,
                                           const eep_ep_world_t      *world)
{
    const uint64_t m = eep_ep_args_v4(a) ? a->dead_mask : 0;

    if (world->world < 64 && (m >> world->world) != 0) {
        eep_error(EEP_SUBSYS_KERNEL,
                  "dispatch: invalid argument dead_mask: 0x%llx names a rank at or above the "
                  "world size %d",
                  (unsigned long long)m, world->world);
        return EEP_ERR_INVALID_ARG;
    }
    if (world->rank >= 0 && world->rank < 64 && ((m >> world->rank) & 1u)) {
        eep_error(EEP_SUBSYS_KERNEL,
                  "dispatch: invalid argument dead_mask: 0x%llx names this rank (%d): a rank "
                  "that runs is not dead",
                  (unsigned long long)m, world->rank);
        return EEP_ERR_INVALID_ARG;
    }
    return EEP_OK;
}

void eep_ep_reach_masks(int world, int rank, int lsa_size, uint32_t dead, uint32_t *drop_p,
                        uint32_t *mute_p)
{
    const int L    = lsa_size > 1 ? lsa_size : 1;
    uint32_t  drop = dead, mute = dead;

    for (int o = 0; L > 1 && dead != 0 && o < world && o < 32; o++) {
        const int to = (o / L) * L + rank % L, from = (rank / L) * L + o % L;

        if (o / L == rank / L) {
            continue; /* the same node: over NVLink, no forwarder */
        }
        if (to < 32 && ((dead >> to) & 1u)) {
            drop |= 1u << o; /* this rank's forwarder to o's node is dead */
        }
        if (from < 32 && ((dead >> from) & 1u)) {
            mute |= 1u << o; /* o's forwarder to this node is dead */
        }
    }
    *drop_p = drop;
    *mute_p = mute;
}

eep_ep_layout_t eep_ep_args_layout(const eep_dispatch_args_t *a)
{
    return a->size >= offsetof(eep_dispatch_args_t, layout) + sizeof(a->layout)
               ? a->layout
               : EEP_EP_LAYOUT_EXPERT_MAJOR;
}

int64_t eep_ep_layout_rows_max(const eep_ep_shape_t *s, eep_ep_layout_t layout)
{
    return layout == EEP_EP_LAYOUT_RANK_MAJOR ? (int64_t)s->world * s->max_tokens
                                              : eep_ep_rows_max(s);
}

eep_status_t eep_ep_dispatch_args_check(const eep_dispatch_args_t *a, const eep_ep_world_t *world,
                                        const eep_ep_handle_t *handle, eep_ep_shape_t *shape_p)
{
    static const char call[] = "dispatch";
    eep_ep_shape_t    s;
    eep_status_t      status;
    int               fp8, outputs_now;

    if (a == NULL) {
        return eep_ep_bad(call, "args", "NULL pointer");
    }
    if (a->size < EEP_DISPATCH_ARGS_V1_SIZE || a->size > sizeof(*a)) {
        eep_error(EEP_SUBSYS_KERNEL,
                  "dispatch: invalid argument args->size: %zu, expected "
                  "sizeof(eep_dispatch_args_t) = %zu (set it before filling the struct)",
                  a->size, sizeof(*a));
        return EEP_ERR_INVALID_ARG;
    }
    if (a->size >= offsetof(eep_dispatch_args_t, skip_padding_x) + sizeof(int) &&
        a->skip_padding_x != 0 && a->skip_padding_x != 1) {
        return eep_ep_bad("dispatch", "args->skip_padding_x", "must be 0 or 1");
    }
    if (eep_ep_args_layout(a) != EEP_EP_LAYOUT_EXPERT_MAJOR &&
        eep_ep_args_layout(a) != EEP_EP_LAYOUT_RANK_MAJOR) {
        return eep_ep_bad(call, "layout",
                          "neither EEP_EP_LAYOUT_EXPERT_MAJOR nor EEP_EP_LAYOUT_RANK_MAJOR");
    }
    if (a->mode != EEP_EP_MODE_CPU_SYNC && a->mode != EEP_EP_MODE_NO_CPU_SYNC &&
        a->mode != EEP_EP_MODE_CACHED) {
        return eep_ep_bad(call, "mode", "not one of CPU_SYNC, NO_CPU_SYNC, CACHED");
    }
    if (a->topk_idx_dtype != EEP_INDEX_INT32 && a->topk_idx_dtype != EEP_INDEX_INT64) {
        return eep_ep_bad(call, "topk_idx_dtype", "neither EEP_INDEX_INT32 nor EEP_INDEX_INT64");
    }
    if (a->num_sms < 0 || a->num_sms == 1 || a->num_sms > 1024) {
        return eep_ep_bad(call, "num_sms",
                          "must be 0 (the model, the whole device) or a budget of 2..1024 SMs "
                          "(senders and copiers together)");
    }
    status = eep_ep_check_shape(a, world, &s);
    if (status != EEP_OK) {
        return status;
    }
    if ((status = eep_ep_check_dead_mask(a, world)) != EEP_OK) {
        return status;
    }
    fp8 = a->dtype == EEP_DTYPE_FP8_E4M3;

    /* Inputs: a rank with no tokens may pass NULL. */
    if (a->num_tokens > 0) {
        if ((status = eep_ep_check_ptr(call, "x", a->x)) != EEP_OK ||
            (status = eep_ep_check_ptr(call, "topk_idx", a->topk_idx)) != EEP_OK ||
            (status = eep_ep_check_ptr(call, "topk_weights", a->topk_weights)) != EEP_OK) {
            return status;
        }
        if (fp8 && a->x_scales == NULL) {
            return eep_ep_bad(call, "x_scales", "fp8 e4m3 input needs its per-128-channel scales");
        }
        if (fp8 && (status = eep_ep_check_ptr(call, "x_scales", a->x_scales)) != EEP_OK) {
            return status;
        }
    }

    /* Outputs: in CPU_SYNC with an alloc hook, the row outputs come later from the hook. */
    outputs_now = !(a->mode == EEP_EP_MODE_CPU_SYNC && a->alloc != NULL);
    if (outputs_now) {
        if ((status = eep_ep_check_ptr(call, "recv_x", a->recv_x)) != EEP_OK ||
            (status = eep_ep_check_ptr(call, "recv_topk_idx", a->recv_topk_idx)) != EEP_OK ||
            (status = eep_ep_check_ptr(call, "recv_topk_weights", a->recv_topk_weights)) !=
                EEP_OK) {
            return status;
        }
        if (fp8 && (status = eep_ep_check_ptr(call, "recv_x_scales", a->recv_x_scales)) != EEP_OK) {
            return status;
        }
    }
    if ((status = eep_ep_check_ptr(call, "recv_expert_counts", a->recv_expert_counts)) != EEP_OK ||
        (status = eep_ep_check_ptr(call, "recv_expert_offsets", a->recv_expert_offsets)) !=
            EEP_OK) {
        return status;
    }
    if (a->mode != EEP_EP_MODE_CPU_SYNC) {
        int64_t rows_max = eep_ep_layout_rows_max(&s, eep_ep_args_layout(a));

        if (a->recv_capacity < rows_max) {
            eep_error(EEP_SUBSYS_KERNEL,
                      "dispatch: invalid argument recv_capacity: %lld rows, "
                      "but without CPU sync the outputs must hold the worst case, %lld rows "
                      "(eep_ep_recv_rows_max)",
                      (long long)a->recv_capacity, (long long)rows_max);
            return EEP_ERR_INVALID_ARG;
        }
    } else if (a->recv_capacity < 0) {
        return eep_ep_bad(call, "recv_capacity", "negative");
    }

    /* Handle. */
    if (a->mode == EEP_EP_MODE_CACHED) {
        if (handle == NULL) {
            return eep_ep_bad(call, "handle",
                              "cached mode needs the handle of an earlier dispatch");
        }
        status = eep_ep_handle_check(handle, world, call);
        if (status != EEP_OK) {
            return status;
        }
        if (handle->num_tokens != a->num_tokens || handle->shape.num_topk != a->num_topk ||
            handle->shape.num_experts != a->num_experts ||
            handle->shape.alignment != a->expert_alignment ||
            handle->shape.max_tokens != a->max_tokens_per_rank ||
            handle->layout != (int)eep_ep_args_layout(a)) {
            eep_error(EEP_SUBSYS_KERNEL,
                      "dispatch: invalid argument handle: cached mode needs the "
                      "shape of the dispatch that made it (num_tokens %d/%d, num_topk %d/%d, "
                      "num_experts %d/%d, expert_alignment %d/%d, max_tokens_per_rank %d/%d, "
                      "layout %d/%d)",
                      a->num_tokens, handle->num_tokens, a->num_topk, handle->shape.num_topk,
                      a->num_experts, handle->shape.num_experts, a->expert_alignment,
                      handle->shape.alignment, a->max_tokens_per_rank, handle->shape.max_tokens,
                      (int)eep_ep_args_layout(a), handle->layout);
            return EEP_ERR_INVALID_ARG;
        }
        /* the layout excludes the handle's dead ranks, and only those */
        if (handle->dead_mask != eep_ep_args_dead_mask(a, world)) {
            const uint32_t now = eep_ep_args_dead_mask(a, world);

            eep_error(EEP_SUBSYS_KERNEL,
                      "dispatch: invalid argument handle: cached mode needs the dead ranks of the "
                      "dispatch that made it (0x%x), this call's are 0x%x%s",
                      handle->dead_mask, now,
                      (now & ~handle->dead_mask) != 0
                          ? ": a rank was found dead since; dispatch again without CACHED"
                          : "");
            return (now & ~handle->dead_mask) != 0 ? EEP_ERR_PEER_LOST : EEP_ERR_INVALID_ARG;
        }
    } else if (handle != NULL) {
        /* Refilled in place: its epoch may be old, but it must be ours and alive. */
        if (handle->magic != EEP_EP_HANDLE_MAGIC) {
            return eep_ep_bad(call, "handle",
                              "not a live dispatch handle (destroyed or corrupted)");
        }
        if (handle->runtime != world->runtime) {
            return eep_ep_bad(call, "handle", "made by another runtime");
        }
    }
    if (shape_p != NULL) {
        *shape_p = s;
    }
    return EEP_OK;
}

eep_status_t eep_ep_combine_args_check(const void *y, const eep_ep_handle_t *handle,
                                       const void *out, const eep_ep_world_t *world)
{
    static const char call[] = "combine";
    eep_status_t      status;

    status = eep_ep_handle_check(handle, world, call);
    if (status != EEP_OK) {
        return status;
    }
    /* Degraded mode: the handle's layout skips its dead ranks; one found dead since would owe
       partials it never sends (and this combine would wait for them). */
    if ((world->dead_mask & ~handle->dead_mask) != 0) {
        eep_error(EEP_SUBSYS_KERNEL,
                  "combine: the handle's dispatch sent tokens to ranks known dead since (0x%x; "
                  "it knew 0x%x): their partials never come, nothing enqueued; dispatch again",
                  world->dead_mask & ~handle->dead_mask, handle->dead_mask);
        return EEP_ERR_PEER_LOST;
    }
    if (handle->num_recv_rows > 0 && (status = eep_ep_check_ptr(call, "y", y)) != EEP_OK) {
        return status;
    }
    if (handle->num_tokens > 0 && (status = eep_ep_check_ptr(call, "out", out)) != EEP_OK) {
        return status;
    }
    return EEP_OK;
}

eep_status_t eep_ep_capacity_check(const eep_dispatch_args_t *args, int64_t rows)
{
    if (args->alloc == NULL && args->recv_capacity < rows) {
        eep_error(EEP_SUBSYS_KERNEL,
                  "dispatch: invalid argument recv_capacity: %lld rows, but "
                  "this dispatch receives %lld (padded) rows",
                  (long long)args->recv_capacity, (long long)rows);
        return EEP_ERR_INVALID_ARG;
    }
    return EEP_OK;
}
