/*
 * eep_bench_ep_floor.c - the bandwidth model behind each row's floor: the bytes a rank must move
 * per call (to other ranks over the link, through its own HBM), counted from the world's inputs;
 * the HBM copy rate measured on this GPU; the link rate from the ep knobs.
 *
 * A call's floor is the longer of its link bytes at the link rate and its HBM bytes at the HBM
 * rate (eep_bench_ep_print_row).
 */
#include "eep_bench_ep_parts.h"

#include <string.h>

#include "util/config.h"
#include "elastic/ep/ep_knobs.h"
#include "elastic/ep/ep_sm_model.h"

/* The rank that holds expert @p e (the shape's placement). */
static int rank_of_expert(const eep_ep_shape_t *s, int64_t e)
{
    int r, slot;

    eep_ep_expert_place(s, (int)e, &r, &slot);
    return r;
}

/* Bytes of the tokens @p rank receives per dispatch (hidden + scales, its own included). */
double eep_bench_ep_recv_token_bytes(const eep_ep_shape_t *s, const eep_ref_input_t *in, int rank)
{
    eep_ep_wire_t w;
    int           src, t, k;
    double        b = 0;

    eep_ep_wire_layout(s, &w);
    for (src = 0; src < s->world; src++) {
        for (t = 0; t < in[src].num_tokens; t++) {
            for (k = 0; k < s->num_topk; k++) {
                int64_t e = in[src].topk_idx[(size_t)t * (size_t)s->num_topk + (size_t)k];

                if (e >= 0 && rank_of_expert(s, e) == rank) {
                    b += (double)(w.hidden_bytes + w.scale_bytes);
                    break;
                }
            }
        }
    }
    return b;
}

/* The fewest HBM bytes of this rank's dispatch (read x once, write each row of the layout once:
   expert-major, a row per (token, local expert); rank-major, a row per received token) and
   combine (read each row once, write out once): the floor's numerator.  Padding rows are not
   counted (a layout that needs them pays for them above the floor). */
void eep_bench_ep_hbm_bytes(const eep_ep_shape_t *s, const eep_ref_input_t *in, int rank,
                            eep_ep_layout_t layout, double *d_p, double *c_p)
{
    eep_ep_wire_t w;
    int           src, t, k;
    double        rows = 0, row_b, out_b = (double)s->hidden * 2;

    eep_ep_wire_layout(s, &w);
    row_b = (double)(w.hidden_bytes + w.scale_bytes);
    for (src = 0; src < s->world; src++) {
        for (t = 0; t < in[src].num_tokens; t++) {
            for (k = 0; k < s->num_topk; k++) {
                int64_t e = in[src].topk_idx[(size_t)t * (size_t)s->num_topk + (size_t)k];

                if (e >= 0 && rank_of_expert(s, e) == rank) {
                    rows++;
                    if (layout == EEP_EP_LAYOUT_RANK_MAJOR) {
                        break; /* one row per received token */
                    }
                }
            }
        }
    }
    *d_p = (double)in[rank].num_tokens * row_b + rows * row_b;
    *c_p = rows * out_b + (double)in[rank].num_tokens * out_b;
}

/* Device-to-device copy rate of this GPU (GB/s, bytes read + written), measured now. */
double eep_bench_ep_measure_hbm_gbps(eep_bench_ctx_t *ctx)
{
    const size_t bytes = (size_t)512 << 20;
    CUdeviceptr  a = 0, b = 0;
    double       t0, best = 0;
    int          i;

    if (ctx->cu->cuMemAlloc(&a, bytes) != CUDA_SUCCESS ||
        ctx->cu->cuMemAlloc(&b, bytes) != CUDA_SUCCESS) {
        goto out;
    }
    for (i = 0; i < 6; i++) {
        t0 = eep_bench_ep_now_us();
        if (ctx->cu->cuMemcpyDtoDAsync(b, a, bytes, ctx->stream) != CUDA_SUCCESS ||
            ctx->cu->cuStreamSynchronize(ctx->stream) != CUDA_SUCCESS) {
            goto out;
        }
        if (i > 0) { /* the first warms up */
            double g = 2.0 * (double)bytes / (eep_bench_ep_now_us() - t0) / 1e3;

            best = g > best ? g : best;
        }
    }
out:
    if (a != 0) {
        ctx->cu->cuMemFree(a);
    }
    if (b != 0) {
        ctx->cu->cuMemFree(b);
    }
    return best;
}

/* Wire bytes this rank sends to other ranks per dispatch, bf16 bytes per combine (the same
   definitions as the baseline's counters). */
void eep_bench_ep_traffic(const eep_ep_shape_t *s, const eep_ref_input_t *in, int rank, double *d_p,
                          double *c_p)
{
    eep_ep_wire_t w;
    int           src, t, k, r;
    double        d = 0, c = 0;

    eep_ep_wire_layout(s, &w);
    for (src = 0; src < s->world; src++) {
        for (t = 0; t < in[src].num_tokens; t++) {
            uint64_t hit = 0;

            for (k = 0; k < s->num_topk; k++) {
                int64_t e = in[src].topk_idx[(size_t)t * (size_t)s->num_topk + (size_t)k];

                if (e >= 0) {
                    hit |= 1ull << rank_of_expert(s, e);
                }
            }
            for (r = 0; r < s->world; r++) {
                if (((hit >> r) & 1) && r != src) {
                    if (src == rank) {
                        d += (double)w.token_bytes;
                    }
                    if (r == rank) {
                        c += (double)s->hidden * 2;
                    }
                }
            }
        }
    }
    *d_p = d;
    *c_p = c;
}

/* The ep knobs as this process sees them (loaded once). */
const eep_ep_config_t *eep_bench_ep_knobs(void)
{
    static eep_ep_config_t cfg;
    static int             loaded;

    if (!loaded) {
        if (eep_config_load(&eep_ep_knob_table, &cfg) != EEP_OK) {
            memset(&cfg, 0, sizeof(cfg));
        }
        loaded = 1;
    }
    return &cfg;
}

/* The link rate of the floor: EEP_EP_LINK_GBPS when set, else the model's H200 default. */
double eep_bench_link_gbps(void)
{
    const double g = eep_bench_ep_knobs()->link_gbps;

    return g > 0.0 ? g : EEP_EP_DEFAULT_LINK_GBPS;
}
