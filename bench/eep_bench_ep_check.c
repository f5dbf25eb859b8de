/*
 * eep_bench_ep_check.c - the correctness half of `eep-bench ep`: the expert outputs (y) combine
 * gets, every output poisoned before a run, every element compared after it.
 *
 * Poison is 0xa5 in every byte, so a row, count or offset the GPU did not write shows as one;
 * rows past the end must still hold it after the run.
 */
#include "eep_bench_ep_parts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Expert outputs: a function of (source rank, source token, expert, channel), so any correct
   layout gives the same y; padding rows are NaN, which combine must never read.  One hash per
   row picks a start and an odd stride into a table of random bf16 values: cheap enough that the
   CPU reference does not eat GPU-machine time. */
#define Y_TABLE 4096
static uint16_t y_table[Y_TABLE];

void eep_bench_ep_y_table_init(void)
{
    uint64_t st = 0x5eed;
    int      i;

    for (i = 0; i < Y_TABLE; i++) {
        y_table[i] = eep_ref_f32_to_bf16(
            (float)(eep_ref_rand(&st) >> 40) * (1.0f / 16777216.0f) * 4.0f - 2.0f);
    }
}

static void y_row(int src, int t, int expert, int hidden, uint16_t *row)
{
    uint64_t st  = ((uint64_t)src << 48) ^ ((uint64_t)t << 16) ^ (uint64_t)expert;
    uint64_t key = eep_ref_rand(&st);
    uint32_t off = (uint32_t)key % Y_TABLE, stride = (uint32_t)(key >> 32) | 1u;
    int      h;

    for (h = 0; h < hidden; h++) {
        row[h] = y_table[(off + (uint32_t)h * stride) % Y_TABLE];
    }
}

uint16_t *eep_bench_ep_make_y(const eep_ep_shape_t *s, const eep_ref_recv_t *r, int rank)
{
    size_t    H = (size_t)s->hidden;
    uint16_t *y = malloc(((size_t)r->num_rows + 1) * H * sizeof(uint16_t));
    int64_t   row;
    size_t    h;

    if (y == NULL) {
        return NULL;
    }
    for (row = 0; row < r->num_rows; row++) {
        if (r->src_rank[row] >= 0) {
            int e = r->topk_idx[row * s->num_topk + r->src_lane[row]];

            y_row(r->src_rank[row], r->src_token[row], rank * r->num_local + e, s->hidden,
                  y + (size_t)row * H);
        } else {
            for (h = 0; h < H; h++) {
                y[(size_t)row * H + h] = 0x7fc0;
            }
        }
    }
    return y;
}

/* Count differing elements of size @p elem; print the first few. */
int64_t eep_bench_ep_diff(const char *what, const void *got, const void *want, size_t n,
                          size_t elem, int rank)
{
    int64_t bad = 0;
    size_t  i;

    for (i = 0; i < n; i++) {
        if (memcmp((const char *)got + i * elem, (const char *)want + i * elem, elem) != 0) {
            if (bad < 3) {
                uint64_t g = 0, w = 0;

                memcpy(&g, (const char *)got + i * elem, elem < 8 ? elem : 8);
                memcpy(&w, (const char *)want + i * elem, elem < 8 ? elem : 8);
                fprintf(stderr, "rank %d: %s[%zu] = 0x%llx, expected 0x%llx\n", rank, what, i,
                        (unsigned long long)g, (unsigned long long)w);
            }
            bad++;
        }
    }
    return bad;
}

/* Check the baseline's dispatch outputs against the reference, every element. */
int64_t eep_bench_ep_check_dispatch(eep_bench_ctx_t *ctx, const eep_ep_shape_t *s,
                                    const eep_bl_view_t *v, const eep_ref_recv_t *r, int skip_pad,
                                    int rank_major, int64_t x_copies_to)
{
    /* expert-major: El + 1 offsets; rank-major: world + 1 rows before each source */
    const size_t          n_off = rank_major ? (size_t)s->world + 1 : (size_t)r->num_local + 1;
    const eep_cuda_sym_t *cu    = ctx->cu;
    size_t   rows = (size_t)v->capacity, K = (size_t)s->num_topk, El = (size_t)r->num_local;
    size_t   hb = (size_t)s->hidden * eep_ep_elem_bytes(s->dtype);
    size_t   sb = s->dtype == EEP_DTYPE_FP8_E4M3 ? (size_t)s->hidden / 128 * 4 : 0;
    size_t   nr = (size_t)r->num_rows;
    uint8_t *x = malloc(rows * hb + 1), *sc = malloc(rows * sb + 1), *poison;
    int32_t *idx = malloc(rows * K * 4 + 4), *cnt = malloc(El * 4 + 4), *off = malloc(n_off * 4);
    int32_t *want_off = malloc(n_off * 4);
    float   *wts      = malloc(rows * K * 4 + 4);
    int64_t  bad      = 0;
    size_t   i, big = rows * hb > rows * K * 4 ? rows * hb : rows * K * 4;

    poison = malloc(big + 1);
    if (!x || !sc || !idx || !cnt || !off || !want_off || !wts || !poison) {
        bad = -1;
        goto out;
    }
    memset(poison, 0xa5, big + 1);
    if (cu->cuMemcpyDtoH(x, v->recv_x, rows * hb) != CUDA_SUCCESS ||
        (sb && cu->cuMemcpyDtoH(sc, v->recv_x_scales, rows * sb) != CUDA_SUCCESS) ||
        cu->cuMemcpyDtoH(idx, v->recv_topk_idx, rows * K * 4) != CUDA_SUCCESS ||
        cu->cuMemcpyDtoH(wts, v->recv_topk_weights, rows * K * 4) != CUDA_SUCCESS ||
        cu->cuMemcpyDtoH(cnt, v->expert_counts, El * 4) != CUDA_SUCCESS ||
        cu->cuMemcpyDtoH(off, v->expert_offsets, n_off * 4) != CUDA_SUCCESS) {
        bad = -1;
        goto out;
    }
    for (i = 0; i < n_off; i++) {
        want_off[i] = (int32_t)r->expert_offsets[i];
    }
    bad += eep_bench_ep_diff("expert_counts", cnt, r->expert_counts, El, 4, ctx->rank);
    bad += eep_bench_ep_diff("expert_offsets", off, want_off, n_off, 4, ctx->rank);
    if (skip_pad) {
        /* padding rows must still hold the poison: nothing was written there */
        for (i = 0; i < nr; i++) {
            const int pad = r->src_rank[i] < 0;

            bad += eep_bench_ep_diff("recv_x", x + i * hb, pad ? poison : r->x + i * hb, hb, 1,
                                     ctx->rank);
            bad += eep_bench_ep_diff("recv_x_scales", sc + i * sb,
                                     pad ? poison : (const uint8_t *)r->x_scales + i * sb, sb / 4,
                                     4, ctx->rank);
        }
    } else {
        bad += eep_bench_ep_diff("recv_x", x, r->x, nr * hb, 1, ctx->rank);
        bad += eep_bench_ep_diff("recv_x_scales", sc, r->x_scales, nr * sb / 4, 4, ctx->rank);
    }
    bad += eep_bench_ep_diff("recv_topk_idx", idx, r->topk_idx, nr * K, 4, ctx->rank);
    bad += eep_bench_ep_diff("recv_topk_weights", wts, r->topk_weights, nr * K, 4, ctx->rank);
    /* Nothing written past the real rows (recv_x: past x_copies_to, where that is further). */
    {
        size_t xe = x_copies_to > (int64_t)nr ? (size_t)x_copies_to : nr;

        xe = xe < rows ? xe : rows;
        bad += eep_bench_ep_diff("recv_x (past the end)", x + xe * hb, poison, (rows - xe) * hb, 1,
                                 ctx->rank);
    }
    bad += eep_bench_ep_diff("recv_topk_idx (past the end)", idx + nr * K, poison, (rows - nr) * K,
                             4, ctx->rank);
out:
    free(x);
    free(sc);
    free(idx);
    free(cnt);
    free(off);
    free(want_off);
    free(wts);
    free(poison);
    return bad;
}

eep_status_t eep_bench_ep_poison_outputs(eep_bench_ctx_t *ctx, const eep_ep_shape_t *s,
                                         const eep_bl_view_t *v)
{
    const eep_cuda_sym_t *cu   = ctx->cu;
    size_t                rows = (size_t)v->capacity, K = (size_t)s->num_topk;
    size_t                El     = (size_t)eep_ep_local_experts(s);
    size_t                hb     = (size_t)s->hidden * eep_ep_elem_bytes(s->dtype);
    size_t                sb     = s->dtype == EEP_DTYPE_FP8_E4M3 ? (size_t)s->hidden / 128 * 4 : 0;
    eep_status_t          status = EEP_OK;

    CU_TRY(cu->cuMemsetD8Async(v->recv_x, 0xa5, rows * hb, ctx->stream));
    if (sb) {
        CU_TRY(cu->cuMemsetD8Async(v->recv_x_scales, 0xa5, rows * sb, ctx->stream));
    }
    CU_TRY(cu->cuMemsetD8Async(v->recv_topk_idx, 0xa5, rows * K * 4, ctx->stream));
    CU_TRY(cu->cuMemsetD8Async(v->recv_topk_weights, 0xa5, rows * K * 4, ctx->stream));
    CU_TRY(cu->cuMemsetD8Async(v->expert_counts, 0xa5, El * 4, ctx->stream));
    CU_TRY(cu->cuMemsetD8Async(v->expert_offsets, 0xa5,
                               ((El > (size_t)s->world ? El : (size_t)s->world) + 1) * 4,
                               ctx->stream));
    CU_TRY(cu->cuMemsetD8Async(v->out, 0xa5, (size_t)s->max_tokens * (size_t)s->hidden * 2,
                               ctx->stream));
out:
    return status;
}
