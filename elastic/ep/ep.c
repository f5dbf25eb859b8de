/*
 * ep.c - eep_dispatch / eep_combine: check, pick the kernel, fill its parameters, launch.
 *
 * Direct mode (every rank an NVLink/LSA peer) or hybrid mode (peers of other nodes over GIN,
 * kernels/ep/ep_gin.cuh), chosen from the runtime's teams and EEP_EP_MODE (elastic/ep/ep_mode.c)
 * at the first call and again after every view; at most EEP_EPK_MAX_WORLD ranks.  A call is
 * one kernel launch (CPU_SYNC dispatch: two, with the host wait for the counts between them), no
 * memset and no barrier: the kernels tag every signal with a call sequence kept on the device and
 * alternate two parities of every slot and region (docs/dispatch.md, section 3).  Kernels come
 * from the JIT (kernels/ep/dispatch.cuh, combine.cuh) through the per-runtime table of
 * ep_state.c, which also holds the runtime's state (rt->ep: the mode, the count mirror, the
 * placement tables).  The layout numbers come from ep_layout.c.
 * Several shapes share one runtime through one layout for the largest of them (its envelope:
 * eep_ep_reserve, or the first call's shape); the training forms of combine (unweighted, top-k
 * weight gradients) are eep_combine_ex.
 */
#include "eep/ep.h"

#include <stddef.h>
#include <string.h>

#include "util/clock.h"
#include "elastic/gpu/cuda_sym.h"
#include "elastic/ep/ep_args.h"
#include "elastic/ep/ep_handle.h"
#include "elastic/ep/ep_knobs.h"
#include "elastic/ep/ep_kernels.h"
#include "elastic/ep/ep_layout.h"
#include "elastic/ep/ep_mode.h"
#include "elastic/ep/ep_sm_model.h"
#include "elastic/ep/ep_solo.h"
#include "elastic/ep/ep_state.h"
#include "util/log.h"
#include "elastic/runtime/runtime.h"
#include "kernels/ep/ep_params.h"

/* The runtime rounds windows up to this (elastic/runtime/runtime.c). */
#define EEP_EP_WINDOW_GRANULARITY (2u << 20)
/* The first version of eep_combine_args_t ends with topk_grad. */
#define EEP_COMBINE_ARGS_V1_SIZE  (offsetof(eep_combine_args_t, topk_grad) + sizeof(float *))

#define EEP_EP_SMEM_BUDGET (160 * 1024) /* dynamic shared memory of the order masks */

/* Degraded mode: the peers the runtime's view machine knows dead (a fault named them) and no
   view has removed yet; 0 without membership. */
static uint32_t eep_ep_runtime_dead(const eep_runtime_t *rt)
{
    uint32_t mask = 0;

    for (int r = 0; rt->vm != NULL && r < rt->nranks && r < EEP_EPK_MAX_WORLD; r++) {
        if (r != rt->rank && eep_view_machine_dead(rt->vm, r)) {
            mask |= 1u << r;
        }
    }
    return mask;
}

/* The runtime as the argument checks see it: its membership epoch is that of the view its
   communicator was built from (eep_runtime_epoch). */
static void eep_ep_world_of(const eep_runtime_t *rt, eep_ep_world_t *world)
{
    world->runtime = rt;
    world->epoch   = rt->epoch;
    world->rank    = rt->rank;
    world->world   = rt->nranks;
    /* a view's placement (checked when the runtime took it; the default's stays implicit) */
    world->place_experts   = rt->placement != NULL ? rt->num_experts : 0;
    world->place_local_max = rt->place_local_max;
    world->placement       = rt->placement != NULL && !rt->place_default ? rt->placement : NULL;
    world->dead_mask       = eep_ep_runtime_dead(rt);
}

/* Degraded mode: @p p's dead set as the kernels use it (eep_ep_reach_masks, ep_args.h), with
   forwarding in hybrid mode over nodes of lsa_size GPUs. */
static void eep_ep_reach_masks_of(const eep_runtime_t *rt, const struct eep_ep_state *st,
                                  eep_epk_params_t *p)
{
    eep_ep_reach_masks(rt->nranks, rt->rank, st->hybrid ? rt->lsa_size : 1, p->dead_mask,
                       &p->drop_mask, &p->mute_mask);
}

static const char *eep_ep_dtype_name(eep_dtype_t dtype)
{
    return dtype == EEP_DTYPE_FP8_E4M3 ? "fp8" : "bf16";
}

/* The window holds the area laid out for @p env (else the error says how large it must be). */
static eep_status_t eep_ep_window_check(const eep_runtime_t *rt, const eep_ep_envelope_t *env)
{
    eep_ep_buffer_sizes_t z;
    size_t                ep_off = rt->layout.data_off;

    eep_ep_envelope_sizes(env, &z);
    if (ep_off + z.total_bytes > rt->window_bytes) {
        eep_error(EEP_SUBSYS_KERNEL,
                  "dispatch/combine: this shape needs %zu bytes of window "
                  "after the %zu-byte workspace, the window has %zu: create the runtime with "
                  "window_bytes >= %zu (or raise EEP_WINDOW_SIZE; eep_ep_window_size computes it)",
                  z.total_bytes, ep_off, rt->window_bytes, ep_off + z.total_bytes);
        return EEP_ERR_NO_RESOURCE;
    }
    return EEP_OK;
}

/* Everything common to dispatch and combine: state, direct mode, window, base parameters.
   @p combine_only: the call is a combine (only its rows must fit the layout). */
static eep_status_t eep_ep_prepare(eep_runtime_t *rt, const eep_ep_shape_t *shape, int combine_only,
                                   const eep_cuda_sym_t **cu_p, struct eep_ep_state **st_p,
                                   eep_epk_params_t *p)
{
    eep_status_t          status;
    size_t                ep_off = rt->layout.data_off, stage = 0;
    const char           *misfit;
    eep_ep_buffer_sizes_t z;

    if (__atomic_load_n(&rt->fault_host->abort_flag, __ATOMIC_ACQUIRE) != EEP_ABORT_NONE) {
        return eep_poll(rt);
    }
    if ((status = eep_cuda_sym_driver(cu_p)) != EEP_OK ||
        (status = eep_ep_state_get(rt, *cu_p, st_p)) != EEP_OK) {
        return status;
    }
    /* One layout per runtime, for the largest of its shapes (the envelope): after a change, a
       wait could find an older layout's bytes where it expects a tag, flag or count word (and
       accept them); nothing resets the area.  Within one layout every shape finds each tag,
       line flag, count word and call counter where the others put theirs, and the sequences
       they hold only grow.  A membership change (world size) is a layout change too: whatever
       shrinks or grows a runtime in place must zero this area on every rank (then a barrier)
       and clear have_env. */
    if (!(*st_p)->have_env) {
        eep_ep_envelope_t env;

        eep_ep_envelope_of(shape, &env);
        if ((status = eep_ep_window_check(rt, &env)) != EEP_OK) {
            return status;
        }
        (*st_p)->env      = env;
        (*st_p)->have_env = 1;
    }
    /* hybrid: the GIN area follows the dispatch/combine area (kernels/ep/ep_gin.cuh).  With one
       GPU a node it is the send staging only, laid out at the envelope's sizes: every shape of
       the envelope is served.  With NVLink forwarding (lsaSize > 1) the forwarding regions are
       peers' targets laid out by the call's max_tokens: one shape per runtime there. */
    if ((*st_p)->hybrid) {
        eep_ep_envelope_t one;

        eep_ep_envelope_of(shape, &one);
        if (rt->lsa_size > 1 && !eep_ep_envelope_equal(&one, &(*st_p)->env)) {
            eep_error(EEP_SUBSYS_KERNEL,
                      "dispatch/combine: a hybrid runtime with NVLink forwarding (%d GPUs a "
                      "node) serves one shape (its forwarding regions are laid out for it); "
                      "this call's (hidden %d, top-k %d, %s) differs: use a runtime per shape",
                      rt->lsa_size, shape->hidden, shape->num_topk,
                      eep_ep_dtype_name(shape->dtype));
            return EEP_ERR_UNSUPPORTED;
        }
        eep_ep_envelope_sizes(&(*st_p)->env, &z);
        stage = rt->lsa_size > 1 ? eep_ep_gin_stage_bytes(shape, rt->lsa_size)
                                 : eep_ep_gin_stage_bytes_env(&(*st_p)->env);
        if (ep_off + z.total_bytes + stage > rt->window_bytes) {
            eep_error(EEP_SUBSYS_KERNEL,
                      "dispatch/combine: this shape needs %zu bytes of window after the "
                      "%zu-byte workspace (hybrid mode: with the GIN staging), the window has "
                      "%zu: create the runtime with window_bytes >= %zu (or raise "
                      "EEP_WINDOW_SIZE)",
                      z.total_bytes + stage, ep_off, rt->window_bytes,
                      ep_off + z.total_bytes + stage);
            return EEP_ERR_NO_RESOURCE;
        }
    }
    misfit = eep_ep_envelope_misfit(&(*st_p)->env, shape, combine_only);
    if (misfit != NULL) {
        const eep_ep_envelope_t *o = &(*st_p)->env;

        eep_error(EEP_SUBSYS_KERNEL,
                  "dispatch/combine: this runtime's buffers are laid out for max_tokens_per_rank "
                  "%d, up to %zu record bytes, %zu scale bytes, top-k %d, %d experts a rank, "
                  "%zu combine row bytes; this call's shape (max_tokens_per_rank %d, hidden %d, "
                  "top-k %d, %d experts, %s) does not fit (%s): reserve every shape the runtime "
                  "serves with eep_ep_reserve before its first call (or use another runtime)",
                  o->max_tokens, o->hidden_bytes, o->scale_bytes, o->num_topk, o->num_local,
                  o->crow_data, shape->max_tokens, shape->hidden, shape->num_topk,
                  shape->num_experts, eep_ep_dtype_name(shape->dtype), misfit);
        return EEP_ERR_UNSUPPORTED;
    }
    /* shape->world is rt->nranks: the argument checks took it from this runtime */
    if ((status = eep_ep_params_layout_env(shape, &(*st_p)->env, rt->rank, ep_off, rt->buf, p)) !=
        EEP_OK) {
        return status;
    }
    /* the placement: arithmetic when even, else the device table */
    if (!p->place_even &&
        (status = eep_ep_place_dev(rt, *cu_p, *st_p, shape, &p->place)) != EEP_OK) {
        return status;
    }
    p->window      = rt->window;
    p->fault       = (eep_fault_page_t *)(uintptr_t)rt->fault_dev;
    p->fault_claim = (unsigned int *)((char *)rt->buf + rt->layout.counters_off);
    p->timeout_ns  = (unsigned long long)rt->timeout_ms * 1000000ull;
    p->wait_stats  = rt->wait_stats_dev; /* wait accounting (eep_runtime_stats) */
    /* the LSA team is a block of consecutive ranks (NCCL: node-major); the others are GIN's */
    p->lsa_base = rt->rank - rt->lsa_rank;
    if ((*st_p)->hybrid) {
        p->gin_mask   = eep_ep_gin_mask(rt->nranks, rt->rank, rt->lsa_rank, rt->lsa_size);
        p->gin        = (*st_p)->gin_dev;
        p->gstage_off = ep_off + z.total_bytes;
    }
    return EEP_OK;
}

static void eep_ep_params_handle(eep_epk_params_t *p, const eep_ep_handle_t *h)
{
    p->h_counts    = (uintptr_t)h->d_expert_counts;
    p->h_offsets   = (uintptr_t)h->d_expert_offsets;
    p->h_send_slot = (uintptr_t)h->d_send_slot;
    p->h_recv_n    = (uintptr_t)h->d_recv_n;
    p->h_recv_tok  = (uintptr_t)h->d_recv_tok;
    p->h_recv_ord  = (uintptr_t)h->d_recv_ord;
    p->h_recv_rows = (uintptr_t)h->d_recv_rows;
    p->h_recv_w    = (uintptr_t)h->d_recv_w;
    p->h_fwd_n     = (uintptr_t)h->d_fwd_n;
    p->h_fwd_tok   = (uintptr_t)h->d_fwd_tok;
    p->h_fwd_dm    = (uintptr_t)h->d_fwd_dm;
}

/* CPU_SYNC: wait (bounded, abortable) until the dispatch kernel has published the counts (the
   call's sequence, then every count and the rows with its tag: eep_ep_mirror_ready). */
static eep_status_t eep_ep_wait_counts(eep_runtime_t *rt, struct eep_ep_state *st, int El)
{
    const double deadline = eep_clock_ms() + (double)rt->timeout_ms;
    unsigned     spins;
    int          ready = 0; /* words [0, ready) carry the call's tag */

    for (spins = 0;; spins++) {
        if ((ready = eep_ep_mirror_ready(st->mirror, El, ready)) > El) {
            return EEP_OK;
        }
        if ((spins & 1023u) == 1023u) {
            if (__atomic_load_n(&rt->fault_host->abort_flag, __ATOMIC_ACQUIRE) != EEP_ABORT_NONE) {
                return eep_poll(rt);
            }
            if (eep_clock_ms() > deadline) {
                eep_error(EEP_SUBSYS_KERNEL, "dispatch: the counts did not arrive within %d ms",
                          rt->timeout_ms);
                return EEP_ERR_PEER_TIMEOUT;
            }
        }
    }
}

/* CPU_SYNC outputs: the alloc hook, or the caller's buffers checked against the exact size. */
static eep_status_t eep_ep_outputs(const eep_dispatch_args_t *a, int64_t rows, size_t hb, size_t sb,
                                   eep_epk_params_t *p)
{
    void  *ptrs[4];
    size_t bytes[4] = { (size_t)rows * hb, (size_t)rows * sb, (size_t)rows * a->num_topk * 4,
                        (size_t)rows * a->num_topk * 4 };
    static const char *const names[4] = { "recv_x", "recv_x_scales", "recv_topk_idx",
                                          "recv_topk_weights" };
    int                      i;

    if (a->alloc == NULL) {
        eep_status_t status = eep_ep_capacity_check(a, rows);

        if (status != EEP_OK) {
            return status;
        }
        ptrs[0] = a->recv_x;
        ptrs[1] = a->recv_x_scales;
        ptrs[2] = a->recv_topk_idx;
        ptrs[3] = a->recv_topk_weights;
    } else {
        for (i = 0; i < 4; i++) {
            ptrs[i] = NULL;
            if (i == 1 && sb == 0) {
                continue;
            }
            ptrs[i] = a->alloc(a->alloc_arg, bytes[i] > 0 ? bytes[i] : 16, names[i]);
            if (ptrs[i] == NULL) {
                eep_error(EEP_SUBSYS_KERNEL,
                          "dispatch: the alloc hook gave no memory for %s "
                          "(%zu bytes)",
                          names[i], bytes[i]);
                return EEP_ERR_NO_MEMORY;
            }
        }
    }
    p->recv_x            = (uintptr_t)ptrs[0];
    p->recv_x_scales     = (uintptr_t)ptrs[1];
    p->recv_topk_idx     = (uintptr_t)ptrs[2];
    p->recv_topk_weights = (uintptr_t)ptrs[3];
    return EEP_OK;
}

/* CPU_SYNC, once the dispatch kernel is launched: wait for its counts, give them to the caller
   (host_expert_counts), and the outputs for that many rows (eep_ep_outputs). */
eep_status_t eep_ep_take_counts(eep_runtime_t *rt, struct eep_ep_state *st,
                                const eep_dispatch_args_t *a, int El, size_t hb, size_t sb,
                                eep_epk_params_t *p, int64_t *rows_p)
{
    eep_status_t status = eep_ep_wait_counts(rt, st, El);
    int          e;

    if (status != EEP_OK) {
        return status;
    }
    *rows_p = (int64_t)(uint32_t)st->mirror[El];
    for (e = 0; a->host_expert_counts != NULL && e < El; e++) {
        a->host_expert_counts[e] = (int32_t)(uint32_t)st->mirror[e];
    }
    return eep_ep_outputs(a, *rows_p, hb, sb, p);
}

/* The general kernel's launches (kernels/ep/dispatch.cuh): senders and the counter, then (CPU_SYNC,
   once the host has the counts) the copy blocks; @p rows_p and @p owed as eep_ep_solo_dispatch's. */
static eep_status_t eep_ep_general_dispatch(eep_runtime_t *rt, struct eep_ep_state *st,
                                            const eep_cuda_sym_t *cu, const eep_ep_shape_t *shape,
                                            const eep_dispatch_args_t *a,
                                            const eep_ep_sm_plan_t *plan, int idx_bits, size_t hb,
                                            size_t sb, size_t dyn, void *stream,
                                            eep_epk_params_t *p, int64_t *rows_p, int *owed)
{
    const int         El = p->num_local, sms = plan->send, copy = plan->copy;
    eep_jit_kernel_t *kernel = NULL, *copy_kernel = NULL;
    eep_status_t      status;
    unsigned          grid;
    int               ce_overlap = 0;

    /* both phases' kernels before the first launch: no module load while phase 0 spins */
    if ((status = eep_ep_kernel(rt, st, 0, idx_bits, (int)a->mode, 0, shape, stream, &kernel)) !=
            EEP_OK ||
        (a->mode == EEP_EP_MODE_CPU_SYNC &&
         (status = eep_ep_kernel(rt, st, 0, idx_bits, (int)a->mode, 1, shape, stream,
                                 &copy_kernel)) != EEP_OK)) {
        return status;
    }
    if (a->mode == EEP_EP_MODE_CPU_SYNC) {
        __atomic_store_n(&st->mirror[El + 1], 0, __ATOMIC_RELEASE);
        ce_overlap = a->alloc == NULL && a->recv_capacity >= a->num_tokens &&
                     eep_ep_ce_wanted(st, shape, a, hb, plan->budget, 1);
        if (ce_overlap && (status = eep_ep_ce_fork(cu, st, p, (size_t)a->num_tokens, hb, sb, stream,
                                                   owed)) != EEP_OK) {
            return status;
        }
    }
    /* Senders, then the counter; without CPU sync the copy blocks too (the counter is one). */
    grid   = (unsigned)(sms + (a->mode == EEP_EP_MODE_CPU_SYNC ? 1 : copy));
    status = eep_jit_launch_ex(kernel, grid, EEP_EPK_THREADS, dyn, stream, p, sizeof(*p),
                               st->launch_flags);
    if (status != EEP_OK) {
        return status;
    }
    *rows_p = eep_ep_layout_rows_max(shape, eep_ep_args_layout(a));
    if (a->mode == EEP_EP_MODE_CPU_SYNC) {
        if ((status = eep_ep_take_counts(rt, st, a, El, hb, sb, p, rows_p)) != EEP_OK) {
            return status;
        }
        if (ce_overlap) { /* a token not received: its successors' rows are rewritten after it */
            p->ce_copied = *owed;
            if (*rows_p != (int64_t)a->num_tokens &&
                (status = eep_ep_ce_join(cu, st, stream, owed)) != EEP_OK) {
                return status;
            }
        } else if ((status = eep_ep_copy_engine(cu, st, shape, a, *rows_p, hb, sb, plan->budget,
                                                stream, p)) != EEP_OK) {
            return status;
        }
        if ((status = eep_jit_launch_ex(copy_kernel, (unsigned)copy, EEP_EPK_THREADS, dyn, stream,
                                        p, sizeof(*p), st->launch_flags)) != EEP_OK ||
            (status = eep_ep_ce_join(cu, st, stream, owed)) != EEP_OK) {
            /* The data is on its way and the peers wait for nothing more: the copy is lost,
               the protocol is not (the next dispatch's kernel reads fresh slots). */
            return status;
        }
    }
    return EEP_OK;
}

eep_status_t eep_dispatch(eep_runtime_t *rt, const eep_dispatch_args_t *args,
                          eep_ep_handle_t **handle_p, void *stream)
{
    const eep_cuda_sym_t *cu = NULL;
    struct eep_ep_state  *st = NULL;
    eep_ep_world_t        world;
    eep_ep_shape_t        shape;
    eep_epk_params_t      p;
    eep_ep_handle_t      *h, *created = NULL;
    eep_status_t          status;
    eep_ep_sm_plan_t      plan;
    int                   El, NC, sw, sms, copy, idx_bits;
    size_t                dyn, hb, sb;
    int64_t               rows    = 0;
    int                   ce_owed = 0;
    /* EEP_EP_TRACE's host parts (the state, and so the knob, exist from the first call on) */
    const double called_ms = rt != NULL && rt->ep != NULL && rt->ep->cfg.trace ? eep_clock_ms() : 0;

    if (rt == NULL) {
        eep_error(EEP_SUBSYS_KERNEL, "dispatch: invalid argument rt: NULL runtime");
        return EEP_ERR_INVALID_ARG;
    }
    if (handle_p == NULL) {
        eep_error(EEP_SUBSYS_KERNEL, "dispatch: invalid argument handle_p: NULL pointer");
        return EEP_ERR_INVALID_ARG;
    }
    eep_ep_world_of(rt, &world);
    status = eep_ep_dispatch_args_check(args, &world, *handle_p, &shape);
    if (status != EEP_OK) {
        return status;
    }
    if ((status = eep_ep_prepare(rt, &shape, 0, &cu, &st, &p)) != EEP_OK) {
        return status;
    }
    if (st->cfg.trace) {
        st->host_at = called_ms > 0 ? called_ms : eep_clock_ms();
    }
    p.dead_mask = eep_ep_args_dead_mask(args, &world);
    eep_ep_reach_masks_of(rt, st, &p);
    if (args->size >= offsetof(eep_dispatch_args_t, num_dropped) + sizeof(args->num_dropped)) {
        p.dropped_topk = (uintptr_t)args->dropped_topk;
        p.num_dropped  = (uintptr_t)args->num_dropped;
    }
    El = p.num_local;
    /* Senders and copiers within the call's SM budget (docs/dispatch.md 5). */
    if (eep_ep_plan_sms(&st->cfg, &shape, st->device_sms, 0.0, args->num_sms,
                        (args->mode == EEP_EP_MODE_CPU_SYNC ? EEP_EP_PLAN_CPU_SYNC : 0u) |
                            (eep_ep_args_layout(args) == EEP_EP_LAYOUT_RANK_MAJOR
                                 ? EEP_EP_PLAN_RANK_MAJOR
                                 : 0u) |
                            (st->hybrid ? EEP_EP_PLAN_HYBRID : 0u),
                        EEP_EPK_MAX_SEND_BLOCKS, &plan) != 0) {
        eep_error(EEP_SUBSYS_KERNEL, "dispatch: no SM plan for this shape on %d SMs",
                  st->device_sms);
        return EEP_ERR_INVALID_ARG;
    }
    sms  = plan.send;
    copy = plan.copy;
    h    = *handle_p;
    if (h == NULL) {
        status = eep_ep_handle_create(rt, world.epoch, rt->rank, &created);
        if (status != EEP_OK) {
            return status;
        }
        h = created;
    }
    if ((status = eep_ep_handle_arrays(cu, h, &shape)) != EEP_OK) {
        goto fail;
    }
    /* Order masks: as many warps as the shared-memory budget allows (E + world counters each). */
    NC  = shape.num_experts + shape.world;
    sw  = (int)((EEP_EP_SMEM_BUDGET / 4 / (size_t)NC - 1) / 2);
    sw  = sw < 1 ? 1 : sw > EEP_EPK_WARPS ? EEP_EPK_WARPS : sw;
    dyn = (size_t)(1 + 2 * sw) * (size_t)NC * 4;
    /* the copy blocks' rows of each expert from lower sources take [world * El] of it */
    if (dyn < (size_t)shape.world * (size_t)El * 4) {
        dyn = (size_t)shape.world * (size_t)El * 4;
    }
    p.scan_warps        = sw;
    p.send_blocks       = sms;
    p.rank_major        = eep_ep_args_layout(args) == EEP_EP_LAYOUT_RANK_MAJOR;
    p.skip_pad_x        = args->size >= offsetof(eep_dispatch_args_t, skip_padding_x) + sizeof(int)
                              ? args->skip_padding_x
                              : 0;
    p.trace             = st->trace[0];
    p.chunk_totals      = st->chunk;
    p.chunk_flags       = st->chunk + EEP_EP_CHUNK_TOTALS_BYTES;
    p.num_tokens        = args->num_tokens;
    p.x                 = (uintptr_t)args->x;
    p.x_scales          = (uintptr_t)args->x_scales;
    p.topk_idx          = (uintptr_t)args->topk_idx;
    p.topk_weights      = (uintptr_t)args->topk_weights;
    p.recv_x            = (uintptr_t)args->recv_x;
    p.recv_x_scales     = (uintptr_t)args->recv_x_scales;
    p.recv_topk_idx     = (uintptr_t)args->recv_topk_idx;
    p.recv_topk_weights = (uintptr_t)args->recv_topk_weights;
    p.recv_counts       = (uintptr_t)args->recv_expert_counts;
    p.recv_offsets      = (uintptr_t)args->recv_expert_offsets;
    p.host_mirror       = st->mirror_dev;
    eep_ep_params_handle(&p, h);
    idx_bits = args->topk_idx_dtype == EEP_INDEX_INT64 ? 64 : 32;

    hb = (size_t)shape.hidden * eep_ep_elem_bytes(shape.dtype);
    sb = shape.dtype == EEP_DTYPE_FP8_E4M3 ? (size_t)shape.hidden / 128 * 4 : 0;
    eep_ep_host_mark(st, EEP_EP_HOST_CHECKS);
    status = eep_ep_solo_wanted(st, &shape, args)
                 ? eep_ep_solo_dispatch(rt, st, cu, &shape, args, h, idx_bits, plan.budget, hb, sb,
                                        stream, &p, &rows, &ce_owed)
                 : eep_ep_general_dispatch(rt, st, cu, &shape, args, &plan, idx_bits, hb, sb, dyn,
                                           stream, &p, &rows, &ce_owed);
    if (status != EEP_OK) {
        goto fail;
    }
    if (args->num_recv_rows_p != NULL) {
        *args->num_recv_rows_p = rows;
    }
    if (args->mode != EEP_EP_MODE_CACHED) {
        h->shape         = shape;
        h->num_tokens    = args->num_tokens;
        h->num_sms       = sms;
        h->copy_sms      = copy;
        h->combine_sms   = plan.combine;
        h->num_recv_rows = rows;
        h->rows_exact    = args->mode == EEP_EP_MODE_CPU_SYNC;
        h->rows_tag      = (uint32_t)p.rows_tag;
        h->has_layout    = 1;
        h->layout        = (int)eep_ep_args_layout(args);
        h->epoch         = world.epoch;
        h->rank          = rt->rank;
        h->dead_mask     = p.dead_mask;
    }
    h->seq++;
    *handle_p = h;
    eep_ep_host_mark(st, EEP_EP_HOST_REST);
    st->host_calls++;
    rt->n_dispatch++;
    rt->dispatch_bytes += (uint64_t)args->num_tokens * shape.num_topk * shape.hidden *
                          eep_ep_elem_bytes(shape.dtype);
    return EEP_OK;
fail:
    eep_ep_ce_join(cu, st, stream, &ce_owed); /* the copy reads x: done before the caller's next */
    eep_ep_handle_destroy(created);
    return status;
}

/* Check what eep_combine_ex adds to eep_combine's checks; @p shape_p: the combine's shape. */
static eep_status_t eep_ep_combine_ex_check(const eep_combine_args_t *a, const eep_ep_handle_t *h,
                                            eep_ep_shape_t *shape_p)
{
    static const char call[] = "combine";

    if (a->size < EEP_COMBINE_ARGS_V1_SIZE || a->size > sizeof(*a)) {
        eep_error(EEP_SUBSYS_KERNEL,
                  "combine: invalid argument args->size: %zu, expected "
                  "sizeof(eep_combine_args_t) = %zu",
                  a->size, sizeof(*a));
        return EEP_ERR_INVALID_ARG;
    }
    if (a->weighted != 0 && a->weighted != 1) {
        eep_error(EEP_SUBSYS_KERNEL, "%s: invalid argument weighted: %d is not 0 or 1", call,
                  a->weighted);
        return EEP_ERR_INVALID_ARG;
    }
    if (a->size >= offsetof(eep_combine_args_t, num_sms) + sizeof(int) &&
        (a->num_sms < 0 || a->num_sms == 1 || a->num_sms > 1024)) {
        eep_error(EEP_SUBSYS_KERNEL,
                  "%s: invalid argument num_sms: %d is not 0 (the dispatch's budget) or a budget "
                  "of 2..1024 SMs",
                  call, a->num_sms);
        return EEP_ERR_INVALID_ARG;
    }
    if (a->topk_grad != NULL && h->layout == EEP_EP_LAYOUT_RANK_MAJOR) {
        eep_error(EEP_SUBSYS_KERNEL,
                  "%s: invalid argument topk_grad: a rank-major handle has one row per token, "
                  "the caller's sum over its experts, so there is no row per (token, k) to take "
                  "the weight gradient from (the caller has it before summing)",
                  call);
        return EEP_ERR_INVALID_ARG;
    }
    if ((a->y_grad == NULL) != (a->topk_grad == NULL)) {
        eep_error(EEP_SUBSYS_KERNEL,
                  "%s: invalid argument %s: the top-k weight gradients need both y_grad and "
                  "topk_grad",
                  call, a->y_grad == NULL ? "y_grad" : "topk_grad");
        return EEP_ERR_INVALID_ARG;
    }
    if (a->out == NULL && a->topk_grad == NULL && h->num_tokens > 0) {
        eep_error(EEP_SUBSYS_KERNEL, "%s: invalid argument out: NULL, and no topk_grad either",
                  call);
        return EEP_ERR_INVALID_ARG;
    }
    *shape_p = h->shape;
    if (a->hidden != 0) {
        if (a->hidden < 0 || a->hidden % 8 != 0) {
            eep_error(EEP_SUBSYS_KERNEL,
                      "%s: invalid argument hidden: %d is not a positive multiple of 8 (16 "
                      "bytes of bf16)",
                      call, a->hidden);
            return EEP_ERR_INVALID_ARG;
        }
        shape_p->hidden = a->hidden;
        shape_p->dtype  = EEP_DTYPE_BF16; /* combines move bf16 whatever the dispatch moved */
    }
    return EEP_OK;
}

/* A device tensor of eep_combine_ex: non-NULL and 16-byte aligned. */
static eep_status_t eep_ep_combine_ptr(const char *arg, const void *ptr)
{
    if (ptr == NULL || (uintptr_t)ptr % EEP_EP_PTR_ALIGN != 0) {
        eep_error(EEP_SUBSYS_KERNEL, "combine: invalid argument %s: %s", arg,
                  ptr == NULL ? "NULL pointer" : "pointer is not 16-byte aligned");
        return EEP_ERR_INVALID_ARG;
    }
    return EEP_OK;
}

/* One combine launch: @p kind EEP_EP_KERNEL_COMBINE or EEP_EP_KERNEL_TOPK_GRAD. */
static eep_status_t eep_ep_combine_launch(eep_runtime_t *rt, const eep_combine_args_t *a,
                                          const eep_ep_handle_t *handle,
                                          const eep_ep_shape_t *shape, int kind, void *stream)
{
    const eep_cuda_sym_t *cu = NULL;
    struct eep_ep_state  *st = NULL;
    eep_epk_params_t      p;
    eep_jit_kernel_t     *kernel;
    eep_status_t          status;

    if ((status = eep_ep_prepare(rt, shape, 1, &cu, &st, &p)) != EEP_OK) {
        return status;
    }
    if (kind == EEP_EP_KERNEL_TOPK_GRAD && st->hybrid && rt->lsa_size > 1) {
        eep_error(EEP_SUBSYS_KERNEL,
                  "combine: invalid argument topk_grad: the top-k weight gradients are built for "
                  "direct mode and for hybrid mode with one GPU a node (this runtime forwards "
                  "records over NVLink within nodes of %d GPUs)",
                  rt->lsa_size);
        return EEP_ERR_UNSUPPORTED;
    }
    p.num_tokens    = handle->num_tokens;
    p.trace         = st->trace[1];
    p.y             = (uintptr_t)a->y;
    p.out           = (uintptr_t)a->out;
    p.y_grad        = (uintptr_t)a->y_grad;
    p.topk_grad     = (uintptr_t)a->topk_grad;
    p.combine_flags = a->weighted ? 0 : EEP_EPK_COMBINE_UNWEIGHTED;
    /* the handle's dead ranks (eep_ep_combine_args_check refused any found dead since) */
    p.dead_mask = handle->dead_mask;
    eep_ep_reach_masks_of(rt, st, &p);
    eep_ep_params_handle(&p, handle);
    /* the one-row path only where rows of weight 1 come (rank-major, unweighted): compiled in,
       it slows the weighted expert-major combine that never takes it */
    if ((status = eep_ep_kernel(rt, st, kind, 0,
                                kind == EEP_EP_KERNEL_COMBINE &&
                                        (handle->layout == EEP_EP_LAYOUT_RANK_MAJOR || !a->weighted)
                                    ? EEP_EP_COMBINE_ONE_ROW
                                    : 0,
                                0, shape, stream, &kernel)) != EEP_OK) {
        return status;
    }
    {
        int grid   = handle->combine_sms;
        int usable = eep_ep_usable_sms(st->device_sms, st->hybrid);

        if (a->size >= offsetof(eep_combine_args_t, num_sms) + sizeof(int) && a->num_sms > 0) {
            grid = a->num_sms < usable ? a->num_sms : usable;
        }
        return eep_jit_launch_ex(kernel, (unsigned)grid, EEP_EPK_THREADS, 0, stream, &p, sizeof(p),
                                 st->launch_flags);
    }
}

eep_status_t eep_combine_ex(eep_runtime_t *rt, const eep_combine_args_t *args,
                            const eep_ep_handle_t *handle, void *stream)
{
    eep_ep_world_t world;
    eep_ep_shape_t shape;
    eep_status_t   status;

    if (rt == NULL) {
        eep_error(EEP_SUBSYS_KERNEL, "combine: invalid argument rt: NULL runtime");
        return EEP_ERR_INVALID_ARG;
    }
    if (args == NULL) {
        eep_error(EEP_SUBSYS_KERNEL, "combine: invalid argument args: NULL pointer");
        return EEP_ERR_INVALID_ARG;
    }
    eep_ep_world_of(rt, &world);
    /* the handle and y first (as eep_combine), then out where one is asked for */
    status = eep_ep_combine_args_check(args->y, handle, args->out != NULL ? args->out : args->y,
                                       &world);
    if (status != EEP_OK) {
        return status;
    }
    if ((status = eep_ep_combine_ex_check(args, handle, &shape)) != EEP_OK) {
        return status;
    }
    /* the runtime's placement of this epoch (the handle's, which the epoch check made sure of) */
    eep_ep_world_place(&world, shape.num_experts, &shape);
    if (args->topk_grad != NULL &&
        ((handle->num_recv_rows > 0 &&
          (status = eep_ep_combine_ptr("y_grad", args->y_grad)) != EEP_OK) ||
         (handle->num_tokens > 0 &&
          (status = eep_ep_combine_ptr("topk_grad", args->topk_grad)) != EEP_OK))) {
        return status;
    }
    /* out, unless only the gradients were asked for (out may be NULL without tokens) */
    if (args->out != NULL || args->topk_grad == NULL) {
        status = eep_ep_combine_launch(rt, args, handle, &shape, EEP_EP_KERNEL_COMBINE, stream);
        if (status != EEP_OK) {
            return status;
        }
    }
    if (args->topk_grad != NULL) {
        status = eep_ep_combine_launch(rt, args, handle, &shape, EEP_EP_KERNEL_TOPK_GRAD, stream);
    }
    if (status == EEP_OK) {
        rt->n_combine++;
        rt->combine_bytes += (uint64_t)handle->num_tokens * shape.num_topk * shape.hidden * 2;
    }
    return status;
}

eep_status_t eep_combine(eep_runtime_t *rt, const void *y, const eep_ep_handle_t *handle, void *out,
                         void *stream)
{
    eep_combine_args_t a;

    memset(&a, 0, sizeof(a));
    a.size     = sizeof(a);
    a.y        = y;
    a.out      = out;
    a.weighted = 1;
    return eep_combine_ex(rt, &a, handle, stream);
}

/* The shapes of @p d as the layout sees them (alignment 1: it sizes no buffer of the area). */
static eep_status_t eep_ep_envelope_build(int world, const eep_ep_world_t *placed,
                                          const eep_ep_shape_desc_t *d, int n, const char *call,
                                          eep_ep_envelope_t *env_p)
{
    eep_ep_envelope_t env;
    const char       *why = NULL;
    int               i;

    if (d == NULL || n < 1) {
        eep_error(EEP_SUBSYS_KERNEL, "%s: invalid argument shapes: %s", call,
                  d == NULL ? "NULL pointer" : "num_shapes must be >= 1");
        return EEP_ERR_INVALID_ARG;
    }
    for (i = 0; i < n; i++) {
        eep_ep_shape_t s = { .world       = world,
                             .max_tokens  = d[i].max_tokens_per_rank,
                             .hidden      = d[i].hidden,
                             .num_topk    = d[i].num_topk,
                             .num_experts = d[i].num_experts,
                             .alignment   = 1,
                             .dtype       = d[i].dtype };

        if (placed != NULL) {
            eep_ep_world_place(placed, s.num_experts, &s);
        }
        if (eep_ep_shape_check(&s, &why) != EEP_OK) {
            break;
        }
        if (i == 0) {
            eep_ep_envelope_of(&s, &env);
        } else if (eep_ep_envelope_add(&env, &s, &why) != EEP_OK) {
            break;
        }
    }
    if (i < n) {
        eep_error(EEP_SUBSYS_KERNEL,
                  "%s: invalid argument shapes[%d].%s: out of range (eep/ep.h limits), or "
                  "unlike shapes[0]'s (shapes that share a runtime share world and "
                  "max_tokens_per_rank)",
                  call, i, why);
        return EEP_ERR_INVALID_ARG;
    }
    *env_p = env;
    return EEP_OK;
}

eep_status_t eep_ep_window_size(int world, const eep_ep_shape_desc_t *shapes, int num_shapes,
                                size_t *bytes_p)
{
    eep_workspace_layout_t ws;
    eep_ep_buffer_sizes_t  z;
    eep_ep_envelope_t      env;
    eep_status_t           status;
    size_t                 bytes;

    if (bytes_p == NULL) {
        eep_error(EEP_SUBSYS_KERNEL, "window size: invalid argument bytes_p: NULL pointer");
        return EEP_ERR_INVALID_ARG;
    }
    if (world < 1 || world > EEP_EPK_MAX_WORLD) {
        eep_error(EEP_SUBSYS_KERNEL, "window size: invalid argument world: %d is outside [1, %d]",
                  world, EEP_EPK_MAX_WORLD);
        return EEP_ERR_INVALID_ARG;
    }
    status = eep_ep_envelope_build(world, NULL, shapes, num_shapes, "window size", &env);
    if (status != EEP_OK) {
        return status;
    }
    /* the workspace's size does not depend on the window's (only checked against it) */
    if ((status = eep_workspace_layout(world, 1, (size_t)-1, &ws)) != EEP_OK) {
        return status;
    }
    eep_ep_envelope_sizes(&env, &z);
    bytes = ws.data_off + z.total_bytes;
    /* more than one rank may be hybrid (every rank a node of its own in the one-GPU cluster):
       its GIN send staging follows (with NVLink forwarding the call names what it needs) */
    bytes += world > 1 ? eep_ep_gin_stage_bytes_env(&env) : 0;
    *bytes_p = (bytes + EEP_EP_WINDOW_GRANULARITY - 1) / EEP_EP_WINDOW_GRANULARITY *
               EEP_EP_WINDOW_GRANULARITY;
    return EEP_OK;
}

eep_status_t eep_ep_reserve(eep_runtime_t *rt, const eep_ep_shape_desc_t *shapes, int num_shapes)
{
    const eep_cuda_sym_t *cu = NULL;
    struct eep_ep_state  *st = NULL;
    eep_ep_envelope_t     env;
    eep_ep_world_t        world;
    eep_status_t          status;

    if (rt == NULL) {
        eep_error(EEP_SUBSYS_KERNEL, "reserve: invalid argument rt: NULL runtime");
        return EEP_ERR_INVALID_ARG;
    }
    eep_ep_world_of(rt, &world);
    status = eep_ep_envelope_build(rt->nranks, &world, shapes, num_shapes, "reserve", &env);
    if (status != EEP_OK) {
        return status;
    }
    if ((status = eep_cuda_sym_driver(&cu)) != EEP_OK ||
        (status = eep_ep_state_get(rt, cu, &st)) != EEP_OK) {
        return status;
    }
    if (st->have_env) {
        int i, fit = 1;

        for (i = 0; i < num_shapes && fit; i++) {
            eep_ep_shape_t s = { .world       = rt->nranks,
                                 .max_tokens  = shapes[i].max_tokens_per_rank,
                                 .hidden      = shapes[i].hidden,
                                 .num_topk    = shapes[i].num_topk,
                                 .num_experts = shapes[i].num_experts,
                                 .alignment   = 1,
                                 .dtype       = shapes[i].dtype };

            eep_ep_world_place(&world, s.num_experts, &s);
            fit = eep_ep_envelope_misfit(&st->env, &s, 0) == NULL;
        }
        if (fit) {
            return EEP_OK;
        }
        eep_error(EEP_SUBSYS_KERNEL,
                  "reserve: the runtime's buffers are already laid out for smaller shapes (by an "
                  "earlier reserve or call): reserve every shape before the first dispatch");
        return EEP_ERR_BUSY;
    }
    if ((status = eep_ep_window_check(rt, &env)) != EEP_OK) {
        return status;
    }
    st->env      = env;
    st->have_env = 1;
    return EEP_OK;
}
