/*
 * eep_step.c - the checkable MoE step (eep_step.h): a splitmix64 hash of (seed, step, source,
 * token, lane) chooses each token's experts; everything else is arithmetic on small exact values.
 */
#include "tools/eep_step.h"

#include <stdlib.h>
#include <string.h>

#include "util/log.h"

/* Scratch for one source rank's routing and tokens. */
typedef struct {
    int64_t  *idx;
    float    *w;
    uint16_t *x;
} eep_step_scratch_t;

static int eep_step_scratch_get(const eep_step_shape_t *s, eep_step_scratch_t *sc)
{
    size_t lanes = (size_t)s->tokens * (size_t)s->topk + 1;

    sc->idx = malloc(lanes * sizeof(*sc->idx));
    sc->w   = malloc(lanes * sizeof(*sc->w));
    sc->x   = malloc(((size_t)s->tokens * (size_t)s->hidden + 1) * sizeof(*sc->x));
    if (sc->idx == NULL || sc->w == NULL || sc->x == NULL) {
        free(sc->idx);
        free(sc->w);
        free(sc->x);
        return -1;
    }
    return 0;
}

static void eep_step_scratch_put(eep_step_scratch_t *sc)
{
    free(sc->idx);
    free(sc->w);
    free(sc->x);
}

static uint64_t eep_step_mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

eep_status_t eep_step_shape_check(const eep_step_shape_t *s)
{
    const char *bad = NULL;

    if (s == NULL) {
        bad = "shape (NULL)";
    } else if (s->world < 1 || s->rank < 0 || s->rank >= s->world) {
        bad = "world/rank";
    } else if (s->tokens < 0 || s->tokens > 65536) {
        bad = "tokens (0..65536)";
    } else if (s->hidden < 8 || s->hidden % 8 != 0 || s->hidden > 16384) {
        bad = "hidden (a multiple of 8, 8..16384)";
    } else if (s->experts < 1 || s->experts > 65536) {
        bad = "experts (1..65536)";
    } else if (s->topk < 1 || s->topk > s->experts || s->topk > 32) {
        bad = "topk (1..min(experts, 32))";
    } else if (s->placement != NULL &&
               eep_placement_check(s->placement, s->experts, s->world, NULL) != EEP_OK) {
        bad = "placement (see above)";
    }
    if (bad != NULL) {
        eep_error(EEP_SUBSYS_TOOL, "step shape: invalid %s", bad);
        return EEP_ERR_INVALID_ARG;
    }
    return EEP_OK;
}

/* Where expert @p e lives: the shape's placement, or the default policy's blocks (the formula
   of eep_placement_default). */
static int eep_step_rank_of(const eep_step_shape_t *s, int64_t e, int *slot_p)
{
    int r, first;

    if (s->placement != NULL) {
        *slot_p = s->placement[e].slot;
        return s->placement[e].rank;
    }
    r       = (int)((e * s->world) / s->experts);
    first   = (int)(((int64_t)r * s->experts + s->world - 1) / s->world);
    *slot_p = (int)e - first;
    return r;
}

int eep_step_local_experts(const eep_step_shape_t *s, int32_t *ids)
{
    int e, slot, n = 0;

    for (e = 0; e < s->experts; e++) {
        if (eep_step_rank_of(s, e, &slot) == s->rank) {
            if (ids != NULL) {
                ids[slot] = e;
            }
            n++;
        }
    }
    return n;
}

int eep_step_local_match(const eep_step_shape_t *s, const int32_t *local_experts, int num_local)
{
    int e, slot, n = 0;

    for (e = 0; e < s->experts; e++) {
        if (eep_step_rank_of(s, e, &slot) == s->rank) {
            if (slot >= num_local || local_experts[slot] != e) {
                return 0;
            }
            n++;
        }
    }
    return n == num_local;
}

int64_t eep_step_rows_max(int tokens, int topk, int experts, int max_world)
{
    int64_t best = -1;
    int     w;

    if (tokens < 1 || topk < 1 || experts < 1 || max_world < 1) {
        return -1;
    }
    for (w = 1; w <= max_world; w++) {
        int     local = (experts + w - 1) / w; /* the default placement's largest block */
        int64_t rows  = (int64_t)w * tokens * (topk < local ? topk : local);

        best = rows > best ? rows : best;
    }
    return best;
}

uint16_t eep_step_bf16(float f)
{
    uint32_t u;

    memcpy(&u, &f, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return 0x7fff;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float eep_step_f32(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float    f;

    memcpy(&f, &u, sizeof(f));
    return f;
}

void eep_step_routing(const eep_step_shape_t *s, int src, int64_t *topk_idx, float *weights)
{
    int t, k, j;

    for (t = 0; t < s->tokens; t++) {
        int64_t *idx = topk_idx + (size_t)t * s->topk;

        for (k = 0; k < s->topk; k++) {
            uint64_t h = eep_step_mix(s->seed ^ eep_step_mix(s->step * 1000003ull + (uint64_t)src) ^
                                      ((uint64_t)t << 20) ^ (uint64_t)k);
            int64_t  e = (int64_t)(h % (uint64_t)s->experts);

            /* distinct: walk forward from a collision (bounded: topk <= experts) */
            for (j = 0; j < k; j++) {
                if (idx[j] == e) {
                    e = (e + 1) % s->experts;
                    j = -1;
                }
            }
            idx[k]                           = e;
            weights[(size_t)t * s->topk + k] = 0.25f * (float)(1 + (h >> 40) % 4);
        }
    }
}

void eep_step_tokens(const eep_step_shape_t *s, int src, uint16_t *x)
{
    int t, h;

    for (t = 0; t < s->tokens; t++) {
        for (h = 0; h < s->hidden; h++) {
            int v = (int)(((s->step + s->data_salt) * 5 + (uint64_t)src * 7 + (uint64_t)t * 3 +
                           (uint64_t)h) %
                          9) -
                    4;

            x[(size_t)t * s->hidden + h] = eep_step_bf16((float)v / 8.0f);
        }
    }
}

float eep_step_expert_scale(int e)
{
    return 1.0f + 0.25f * (float)(e % 4);
}

int64_t eep_step_expected_recv(const eep_step_shape_t *s, int32_t *counts, uint16_t *rows)
{
    eep_step_scratch_t sc;
    int32_t           *local = malloc(((size_t)s->experts + 1) * sizeof(*local));
    int                el, e, src, t, k;
    int64_t            total     = 0;
    int                with_rows = rows != NULL;
    int64_t           *idx;
    float             *w;
    uint16_t          *x;

    if (local == NULL || eep_step_scratch_get(s, &sc) != 0) {
        free(local);
        return -1;
    }
    idx = sc.idx;
    w   = sc.w;
    x   = sc.x;
    el  = eep_step_local_experts(s, local);

    for (e = 0; e < el; e++) {
        int g = local[e];

        counts[e] = 0;
        for (src = 0; src < s->world; src++) {
            eep_step_routing(s, src, idx, w);
            if (with_rows) {
                eep_step_tokens(s, src, x);
            }
            for (t = 0; t < s->tokens; t++) {
                for (k = 0; k < s->topk; k++) {
                    if (idx[(size_t)t * s->topk + k] == g) {
                        if (with_rows) {
                            memcpy(rows + (size_t)total * s->hidden, x + (size_t)t * s->hidden,
                                   (size_t)s->hidden * 2);
                        }
                        counts[e]++;
                        total++;
                    }
                }
            }
        }
    }
    eep_step_scratch_put(&sc);
    free(local);
    return total;
}

int64_t eep_step_expected_recv_ranked(const eep_step_shape_t *s, int32_t *counts, int32_t *src_rows,
                                      uint16_t *rows, int32_t *idx, float *w)
{
    eep_step_scratch_t sc;
    int                el, src, t, k, slot;
    int64_t            total = 0;

    if (eep_step_scratch_get(s, &sc) != 0) {
        return -1;
    }
    el = eep_step_local_experts(s, NULL);
    memset(counts, 0, (size_t)el * sizeof(*counts));
    for (src = 0; src < s->world; src++) {
        if (src_rows != NULL) {
            src_rows[src] = (int32_t)total;
        }
        eep_step_routing(s, src, sc.idx, sc.w);
        if (rows != NULL) {
            eep_step_tokens(s, src, sc.x);
        }
        for (t = 0; t < s->tokens; t++) {
            int mine = 0;

            for (k = 0; k < s->topk; k++) {
                size_t lane = (size_t)t * s->topk + k;
                int    here = eep_step_rank_of(s, sc.idx[lane], &slot) == s->rank;

                if (here) {
                    counts[slot]++;
                    mine = 1;
                }
                if (rows != NULL) {
                    idx[(size_t)total * s->topk + k] = here ? slot : -1;
                    w[(size_t)total * s->topk + k]   = here ? sc.w[lane] : 0.0f;
                }
            }
            if (!mine) {
                continue;
            }
            if (rows != NULL) {
                memcpy(rows + (size_t)total * s->hidden, sc.x + (size_t)t * s->hidden,
                       (size_t)s->hidden * 2);
            }
            total++;
        }
    }
    if (src_rows != NULL) {
        src_rows[s->world] = (int32_t)total;
    }
    eep_step_scratch_put(&sc);
    return total;
}

void eep_step_expert_apply_ranked(const eep_step_shape_t *s, int64_t nrows, const int32_t *idx,
                                  const float *w, const uint16_t *x, uint16_t *y)
{
    int32_t *local = malloc(((size_t)s->experts + 1) * sizeof(*local));
    int      el, k, h;
    int64_t  row;

    if (local == NULL) {
        return; /* the caller's comparison of y then fails */
    }
    el = eep_step_local_experts(s, local);
    for (row = 0; row < nrows; row++) {
        for (h = 0; h < s->hidden; h++) {
            size_t i = (size_t)row * s->hidden + h;
            float  p = 0.0f, xv = eep_step_f32(x[i]);
            int    bad = 0;

            for (k = 0; k < s->topk; k++) {
                int32_t e = idx[(size_t)row * s->topk + k];

                if (e < 0) {
                    continue;
                }
                if (e >= el) {
                    bad = 1;
                    break;
                }
                p = w[(size_t)row * s->topk + k] *
                        eep_step_f32(eep_step_bf16(xv * eep_step_expert_scale(local[e]))) +
                    p;
            }
            y[i] = bad ? 0x7fc0 : eep_step_bf16(p);
        }
    }
    free(local);
}

void eep_step_expert_apply(const eep_step_shape_t *s, const int32_t *counts, const uint16_t *x,
                           uint16_t *y)
{
    int32_t *local = malloc(((size_t)s->experts + 1) * sizeof(*local));
    int      el, e, h;
    int64_t  row = 0, r;

    if (local == NULL) {
        return; /* the caller's comparison of y then fails */
    }
    el = eep_step_local_experts(s, local);
    for (e = 0; e < el; e++) {
        float scale = eep_step_expert_scale(local[e]);

        for (r = 0; r < counts[e]; r++, row++) {
            for (h = 0; h < s->hidden; h++) {
                size_t i = (size_t)row * s->hidden + h;

                y[i] = eep_step_bf16(eep_step_f32(x[i]) * scale);
            }
        }
    }
    free(local);
}

eep_status_t eep_step_expected_out(const eep_step_shape_t *s, uint16_t *out)
{
    eep_step_scratch_t sc;
    int                t, h, k, r, slot;
    int64_t           *idx;
    float             *w;
    uint16_t          *x;

    if (eep_step_scratch_get(s, &sc) != 0) {
        return EEP_ERR_NO_MEMORY;
    }
    idx = sc.idx;
    w   = sc.w;
    x   = sc.x;
    eep_step_routing(s, s->rank, idx, w);
    eep_step_tokens(s, s->rank, x);
    for (t = 0; t < s->tokens; t++) {
        for (h = 0; h < s->hidden; h++) {
            float total = 0.0f, xv = eep_step_f32(x[(size_t)t * s->hidden + h]);

            /* eep/ep.h's order: ranks ascending, each a bf16 partial over its lanes ascending */
            for (r = 0; r < s->world; r++) {
                float partial = 0.0f;
                int   any     = 0;

                for (k = 0; k < s->topk; k++) {
                    int64_t e = idx[(size_t)t * s->topk + k];

                    if (eep_step_rank_of(s, e, &slot) == r) {
                        float y = eep_step_f32(eep_step_bf16(xv * eep_step_expert_scale((int)e)));

                        partial = w[(size_t)t * s->topk + k] * y + partial;
                        any     = 1;
                    }
                }
                if (any) {
                    total += eep_step_f32(eep_step_bf16(partial));
                }
            }
            out[(size_t)t * s->hidden + h] = eep_step_bf16(total);
        }
    }
    eep_step_scratch_put(&sc);
    return EEP_OK;
}

int64_t eep_step_compare(const uint16_t *got, const uint16_t *want, int64_t n)
{
    int64_t i;

    for (i = 0; i < n; i++) {
        if (got[i] != want[i]) {
            return i;
        }
    }
    return -1;
}
