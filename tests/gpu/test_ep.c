/*
 * test_ep.c - eep_dispatch/eep_combine beyond element checks (those are test_ep_cases.sh):
 *   1. a NO_CPU_SYNC dispatch + combine pair captured in a CUDA graph has exactly two nodes, both
 *      kernels (no memset, no barrier, no notify kernel: the synchronisation count of eep/ep.h),
 *      joined by a programmatic edge on sm_90+ (EEP_EP_PDL), and five replays give outputs
 *      bit-identical to the eager pair;
 *   2. a bad expert id on rank 0 gives EEP_ERR_DEVICE_FAULT there with a fault record naming the
 *      token and the id, and both ranks then run a clean pair;
 *   3. a peer that stops calling: rank 1 skips a dispatch, rank 0 gets EEP_ERR_PEER_TIMEOUT within
 *      its deadline (plus slack), never a hang;
 *   4. degraded mode (issue 24): rank 0, its fault cleared, names every other rank dead
 *      (eep_dispatch_args_t.dead_mask) and runs a pair alone: it ends within the deadline (no
 *      wait on them), the dropped report names exactly the lanes on their experts, the counts
 *      are its own lanes on its experts, and a token with no live lane combines to zeros.
 * The graph API is taken from the driver with dlsym (eep_cuda_sym_t does not list it).
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eep/ep.h"
#include "eep/membership.h"
#include "tests/common/gpu_test.h"

#define T_MAX      256
#define HIDDEN     2048
#define TOPK       8
#define EXPERTS    256
#define ALIGN      16
#define TIMEOUT_MS 1500

typedef CUresult (*begin_capture_fn)(CUstream, CUstreamCaptureMode);
typedef CUresult (*end_capture_fn)(CUstream, CUgraph *);
typedef CUresult (*instantiate_fn)(CUgraphExec *, CUgraph, unsigned long long);
typedef CUresult (*graph_launch_fn)(CUgraphExec, CUstream);
typedef CUresult (*get_nodes_fn)(CUgraph, CUgraphNode *, size_t *);
typedef CUresult (*node_type_fn)(CUgraphNode, CUgraphNodeType *);
typedef CUresult (*get_edges_fn)(CUgraph, CUgraphNode *, CUgraphNode *, CUgraphEdgeData *,
                                 size_t *);

typedef struct {
    CUdeviceptr x, idx, w, recv_x, recv_idx, recv_w, counts, offsets, y, out;
    int64_t     rows;
} bufs_t;

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void make_inputs(const eep_cuda_sym_t *cu, const bufs_t *b, int rank, int bad_token)
{
    uint16_t *x   = malloc((size_t)T_MAX * HIDDEN * 2);
    int32_t  *idx = malloc((size_t)T_MAX * TOPK * 4);
    float    *w   = malloc((size_t)T_MAX * TOPK * 4);
    uint64_t  s   = 0x9e3779b97f4a7c15ull ^ (uint64_t)(rank + 1);
    int       t, k, j;

    for (size_t i = 0; i < (size_t)T_MAX * HIDDEN; i++) {
        x[i] = (uint16_t)(0x3c00u + (rng_next(&s) & 0x03ffu)); /* finite bf16 */
    }
    for (t = 0; t < T_MAX; t++) {
        for (k = 0; k < TOPK; k++) {
            int e, dup;

            do {
                e   = (int)(rng_next(&s) % EXPERTS);
                dup = 0;
                for (j = 0; j < k; j++) {
                    dup |= idx[t * TOPK + j] == e;
                }
            } while (dup);
            idx[t * TOPK + k] = (k == 7 && t % 5 == 0) ? -1 : e;
            w[t * TOPK + k]   = (float)(rng_next(&s) % 1000) / 1000.0f;
        }
    }
    if (bad_token >= 0) {
        idx[bad_token * TOPK + 2] = EXPERTS + 743;
    }
    GPU_OK(eep_status_from_cu(cu->cuMemcpyHtoD(b->x, x, (size_t)T_MAX * HIDDEN * 2), "HtoD x"));
    GPU_OK(eep_status_from_cu(cu->cuMemcpyHtoD(b->idx, idx, (size_t)T_MAX * TOPK * 4), "HtoD"));
    GPU_OK(eep_status_from_cu(cu->cuMemcpyHtoD(b->w, w, (size_t)T_MAX * TOPK * 4), "HtoD w"));
    free(x);
    free(idx);
    free(w);
}

static void fill_args(eep_dispatch_args_t *a, const bufs_t *b, eep_ep_mode_t mode)
{
    memset(a, 0, sizeof(*a));
    a->size                = sizeof(*a);
    a->x                   = (const void *)b->x;
    a->dtype               = EEP_DTYPE_BF16;
    a->topk_idx            = (const void *)b->idx;
    a->topk_idx_dtype      = EEP_INDEX_INT32;
    a->topk_weights        = (const float *)b->w;
    a->num_tokens          = T_MAX;
    a->hidden              = HIDDEN;
    a->num_topk            = TOPK;
    a->num_experts         = EXPERTS;
    a->expert_alignment    = ALIGN;
    a->max_tokens_per_rank = T_MAX;
    a->mode                = mode;
    a->recv_capacity       = b->rows;
    a->recv_x              = (void *)b->recv_x;
    a->recv_topk_idx       = (int32_t *)b->recv_idx;
    a->recv_topk_weights   = (float *)b->recv_w;
    a->recv_expert_counts  = (int32_t *)b->counts;
    a->recv_expert_offsets = (int32_t *)b->offsets;
}

static void *drv(void *lib, const char *name)
{
    void *f = dlsym(lib, name);

    GPU_REQUIRE(f != NULL, "dlsym %s", name);
    return f;
}

int main(void)
{
    eep_bootstrap_t      *bs = gpu_test_bootstrap("test_ep", 2);
    const eep_cuda_sym_t *cu;
    eep_runtime_params_t  rp;
    eep_runtime_t        *rt = NULL;
    eep_ep_handle_t      *h  = NULL;
    eep_dispatch_args_t   a;
    bufs_t                b;
    CUstream              st   = NULL;
    void                 *lib  = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    int                   rank = gpu_test_rank, nranks = eep_bootstrap_nranks(bs), i;
    size_t                out_bytes = (size_t)T_MAX * HIDDEN * 2;
    uint16_t             *eager = malloc(out_bytes), *again = malloc(out_bytes);

    memset(&rp, 0, sizeof(rp));
    rp.size       = sizeof(rp);
    rp.bootstrap  = bs;
    rp.device     = -1;
    rp.timeout_ms = TIMEOUT_MS;
    { /* sized for the job's rank count (gin-round runs this at 2, 4 and 8 ranks) */
        const eep_ep_shape_desc_t shape = { T_MAX, HIDDEN, TOPK, EXPERTS, EEP_DTYPE_BF16 };

        GPU_OK(eep_ep_window_size(nranks, &shape, 1, &rp.window_bytes));
    }
    GPU_OK(eep_runtime_create(&rp, &rt));
    cu = gpu_test_cu();
    GPU_REQUIRE(lib != NULL, "dlopen libcuda.so.1");
    GPU_OK(eep_status_from_cu(cu->cuStreamCreate(&st, CU_STREAM_NON_BLOCKING), "stream"));

    memset(&b, 0, sizeof(b));
    b.rows = eep_ep_recv_rows_max(nranks, T_MAX, TOPK, EXPERTS, ALIGN);
    GPU_OK(eep_status_from_cu(cu->cuMemAlloc(&b.x, out_bytes), "alloc"));
    GPU_OK(eep_status_from_cu(cu->cuMemAlloc(&b.idx, (size_t)T_MAX * TOPK * 4), "alloc"));
    GPU_OK(eep_status_from_cu(cu->cuMemAlloc(&b.w, (size_t)T_MAX * TOPK * 4), "alloc"));
    GPU_OK(eep_status_from_cu(cu->cuMemAlloc(&b.recv_x, (size_t)b.rows * HIDDEN * 2), "alloc"));
    GPU_OK(eep_status_from_cu(cu->cuMemAlloc(&b.recv_idx, (size_t)b.rows * TOPK * 4), "alloc"));
    GPU_OK(eep_status_from_cu(cu->cuMemAlloc(&b.recv_w, (size_t)b.rows * TOPK * 4), "alloc"));
    GPU_OK(eep_status_from_cu(cu->cuMemAlloc(&b.counts, 4096), "alloc"));
    GPU_OK(eep_status_from_cu(cu->cuMemAlloc(&b.offsets, 4096), "alloc"));
    GPU_OK(eep_status_from_cu(cu->cuMemAlloc(&b.y, (size_t)b.rows * HIDDEN * 2), "alloc"));
    GPU_OK(eep_status_from_cu(cu->cuMemAlloc(&b.out, out_bytes), "alloc"));
    GPU_OK(eep_status_from_cu(cu->cuMemsetD32(b.y, 0x3f403f40u, (size_t)b.rows * HIDDEN / 2), "y"));
    make_inputs(cu, &b, rank, -1);
    fill_args(&a, &b, EEP_EP_MODE_NO_CPU_SYNC);

    /* 1. eager pair, then the same pair captured and replayed */
    GPU_OK(eep_dispatch(rt, &a, &h, st));
    GPU_OK(eep_combine(rt, (const void *)b.y, h, (void *)b.out, st));
    GPU_OK(eep_runtime_sync(rt, st));
    GPU_OK(eep_status_from_cu(cu->cuMemcpyDtoH(eager, b.out, out_bytes), "DtoH"));
    {
        begin_capture_fn begin  = (begin_capture_fn)drv(lib, "cuStreamBeginCapture_v2");
        end_capture_fn   end    = (end_capture_fn)drv(lib, "cuStreamEndCapture");
        instantiate_fn   inst   = (instantiate_fn)drv(lib, "cuGraphInstantiateWithFlags");
        graph_launch_fn  launch = (graph_launch_fn)drv(lib, "cuGraphLaunch");
        get_nodes_fn     nodes  = (get_nodes_fn)drv(lib, "cuGraphGetNodes");
        node_type_fn     type   = (node_type_fn)drv(lib, "cuGraphNodeGetType");
        CUgraph          g      = NULL;
        CUgraphExec      ge     = NULL;
        CUgraphNode      list[16];
        size_t           n = 16, kernels = 0;

        GPU_OK(eep_status_from_cu(begin(st, CU_STREAM_CAPTURE_MODE_RELAXED), "begin capture"));
        GPU_OK(eep_dispatch(rt, &a, &h, st));
        GPU_OK(eep_combine(rt, (const void *)b.y, h, (void *)b.out, st));
        GPU_OK(eep_status_from_cu(end(st, &g), "end capture"));
        GPU_OK(eep_status_from_cu(nodes(g, list, &n), "graph nodes"));
        for (i = 0; i < (int)n; i++) {
            CUgraphNodeType ty;

            GPU_OK(eep_status_from_cu(type(list[i], &ty), "node type"));
            kernels += ty == CU_GRAPH_NODE_TYPE_KERNEL;
        }
        printf("graph of one NO_CPU_SYNC dispatch + combine: %zu nodes, %zu kernels\n", n, kernels);
        GPU_CHECK(n == 2 && kernels == 2, "graph has %zu nodes, %zu kernels (want 2, 2)", n,
                  kernels);
        {
            /* EEP_EP_PDL (default 1, sm_90+) on a GPU of its own: the combine's launch overlaps
               the dispatch's end, which capture records as one programmatic edge; ranks that
               share the GPU through MPS launch plainly: one full edge */
            get_edges_fn    edges = (get_edges_fn)dlsym(lib, "cuGraphGetEdges_v2");
            CUgraphNode     from[4], to[4];
            CUgraphEdgeData data[4];
            size_t          ne      = 4;
            int             major   = 0;
            const int       sharers = eep_runtime_gpu_sharers(rt);
            const char     *pdl     = getenv("EEP_EP_PDL");
            CUdevice        dev;

            GPU_OK(eep_status_from_cu(cu->cuCtxGetDevice(&dev), "current device"));
            GPU_OK(eep_status_from_cu(
                cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
                "compute capability"));
            if (edges != NULL && major >= 9 && (pdl == NULL || strcmp(pdl, "0") != 0)) {
                const int want = sharers <= 1 ? CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
                                              : CU_GRAPH_DEPENDENCY_TYPE_DEFAULT;

                memset(data, 0, sizeof(data));
                GPU_OK(eep_status_from_cu(edges(g, from, to, data, &ne), "graph edges"));
                printf("graph edge dispatch -> combine: %zu edge(s), type %d (%s; %d process(es) "
                       "on this GPU)\n",
                       ne, ne == 1 ? (int)data[0].type : -1,
                       ne == 1 && data[0].type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
                           ? "programmatic dependent launch"
                           : "full completion",
                       sharers);
                GPU_CHECK(ne == 1 && (int)data[0].type == want,
                          "want one %s edge (EEP_EP_PDL, %d process(es) on this GPU)",
                          sharers <= 1 ? "programmatic" : "full", sharers);
            } else {
                printf("graph edge type not checked: %s\n",
                       edges == NULL ? "the driver has no cuGraphGetEdges_v2"
                       : major < 9   ? "PDL needs sm_90"
                                     : "EEP_EP_PDL=0");
            }
        }
        GPU_OK(eep_status_from_cu(inst(&ge, g, 0), "instantiate"));
        for (i = 0; i < 5; i++) {
            GPU_OK(eep_status_from_cu(cu->cuMemsetD8(b.out, 0xa5, out_bytes), "poison"));
            GPU_OK(eep_status_from_cu(launch(ge, st), "graph launch"));
            GPU_OK(eep_runtime_sync(rt, st));
            GPU_OK(eep_status_from_cu(cu->cuMemcpyDtoH(again, b.out, out_bytes), "DtoH"));
            GPU_CHECK(memcmp(again, eager, out_bytes) == 0, "graph replay %d differs", i);
        }
        /* eager calls after replays still line up (the sequence lives on the device) */
        GPU_OK(eep_dispatch(rt, &a, &h, st));
        GPU_OK(eep_combine(rt, (const void *)b.y, h, (void *)b.out, st));
        GPU_OK(eep_runtime_sync(rt, st));
        GPU_OK(eep_status_from_cu(cu->cuMemcpyDtoH(again, b.out, out_bytes), "DtoH"));
        GPU_CHECK(memcmp(again, eager, out_bytes) == 0, "eager pair after replays differs");
        printf("graph replays: 5 bit-identical to the eager pair\n");
        ((CUresult(*)(CUgraphExec))drv(lib, "cuGraphExecDestroy"))(ge);
        ((CUresult(*)(CUgraph))drv(lib, "cuGraphDestroy"))(g);
    }
    GPU_OK(eep_bootstrap_barrier(bs));

    /* 2. a bad expert id on rank 0 (token 37) */
    if (rank == 0) {
        make_inputs(cu, &b, rank, 37);
    }
    GPU_OK(eep_dispatch(rt, &a, &h, st));
    {
        eep_status_t status = eep_runtime_sync(rt, st);

        if (rank == 0) {
            eep_fault_record_t rec;

            GPU_CHECK(status == EEP_ERR_DEVICE_FAULT, "bad id: got %s", eep_status_name(status));
            GPU_REQUIRE(eep_runtime_fault(rt, &rec) == EEP_OK, "no fault record");
            GPU_CHECK(rec.phase == EEP_PHASE_EP_BAD_EXPERT && rec.expected == 37 &&
                          rec.observed == (unsigned long long)(EXPERTS + 743) && rec.peer == -1,
                      "record: phase %d token %llu id %llu peer %d", rec.phase, rec.expected,
                      rec.observed, rec.peer);
            printf("bad expert: %s, record names token %llu, id %llu\n", eep_status_name(status),
                   rec.expected, rec.observed);
            GPU_OK(eep_runtime_clear_fault(rt));
            make_inputs(cu, &b, rank, -1);
        } else {
            GPU_CHECK(status == EEP_OK, "rank 1 after rank 0's bad id: %s",
                      eep_status_name(status));
        }
    }
    GPU_OK(eep_bootstrap_barrier(bs));
    GPU_OK(eep_dispatch(rt, &a, &h, st));
    GPU_OK(eep_combine(rt, (const void *)b.y, h, (void *)b.out, st));
    GPU_OK(eep_runtime_sync(rt, st));
    GPU_OK(eep_status_from_cu(cu->cuMemcpyDtoH(again, b.out, out_bytes), "DtoH"));
    GPU_CHECK(memcmp(again, eager, out_bytes) == 0, "clean pair after the fault differs");
    GPU_OK(eep_bootstrap_barrier(bs));

    /* 3. rank 1 stops calling: rank 0's dispatch gives up at its deadline */
    if (rank == 0) {
        double       t0 = gpu_test_now_ms(), ms;
        eep_status_t status;

        GPU_OK(eep_dispatch(rt, &a, &h, st));
        status = eep_runtime_sync(rt, st);
        ms     = gpu_test_now_ms() - t0;
        GPU_CHECK(status == EEP_ERR_PEER_TIMEOUT, "silent peer: got %s", eep_status_name(status));
        GPU_CHECK(ms < TIMEOUT_MS * 3.0, "silent peer: %.0f ms", ms);
        {
            eep_fault_record_t rec;

            if (eep_runtime_fault(rt, &rec) == EEP_OK) {
                printf("silent peer: %s after %.0f ms, record phase %d peer %d\n",
                       eep_status_name(status), ms, rec.phase, rec.peer);
                /* every other rank is silent: the record names one of them (at 2 ranks, 1) */
                GPU_CHECK(rec.phase == EEP_PHASE_EP_DISPATCH && rec.peer >= 1 &&
                              rec.peer < eep_bootstrap_nranks(bs),
                          "record phase %d peer %d", rec.phase, rec.peer);
            }
        }
    }
    GPU_OK(eep_bootstrap_barrier(bs));

    /* 4. degraded mode: rank 0 alone, every other rank named dead */
    if (rank == 0) {
        const int           nr = eep_bootstrap_nranks(bs);
        eep_dispatch_args_t d  = a;
        eep_ep_handle_t    *hd = NULL;
        eep_expert_place_t  pl[EXPERTS];
        CUdeviceptr         dropped = 0, ndrop = 0;
        uint8_t            *drop_h = malloc((size_t)T_MAX * TOPK);
        int32_t            *idx_h  = malloc((size_t)T_MAX * TOPK * 4);
        int32_t             counts_h[EXPERTS], want_counts[EXPERTS], nd = -1;
        int                 want_nd = 0, bad = 0, t, k, El = 0;
        double              t0, ms;

        GPU_OK(eep_runtime_clear_fault(rt));
        GPU_OK(eep_placement_default(EXPERTS, nr, pl));
        GPU_OK(eep_status_from_cu(cu->cuMemAlloc(&dropped, (size_t)T_MAX * TOPK), "alloc"));
        GPU_OK(eep_status_from_cu(cu->cuMemAlloc(&ndrop, 16), "alloc"));
        GPU_OK(eep_status_from_cu(cu->cuMemsetD8(dropped, 0xa5, (size_t)T_MAX * TOPK), "poison"));
        d.dead_mask    = (nr >= 64 ? ~0ull : (1ull << nr) - 1u) & ~1ull;
        d.dropped_topk = (uint8_t *)dropped;
        d.num_dropped  = (int32_t *)ndrop;
        t0             = gpu_test_now_ms();
        GPU_OK(eep_dispatch(rt, &d, &hd, st));
        GPU_OK(eep_combine(rt, (const void *)b.y, hd, (void *)b.out, st));
        GPU_OK(eep_runtime_sync(rt, st));
        ms = gpu_test_now_ms() - t0;
        GPU_CHECK(ms < TIMEOUT_MS, "degraded pair: %.0f ms, a wait on a dead rank is %d ms", ms,
                  TIMEOUT_MS);
        GPU_OK(eep_status_from_cu(cu->cuMemcpyDtoH(idx_h, b.idx, (size_t)T_MAX * TOPK * 4), "D"));
        GPU_OK(eep_status_from_cu(cu->cuMemcpyDtoH(drop_h, dropped, (size_t)T_MAX * TOPK), "D"));
        GPU_OK(eep_status_from_cu(cu->cuMemcpyDtoH(&nd, ndrop, 4), "DtoH"));
        GPU_OK(eep_status_from_cu(cu->cuMemcpyDtoH(again, b.out, out_bytes), "DtoH"));
        memset(want_counts, 0, sizeof(want_counts));
        for (int e = 0; e < EXPERTS; e++) {
            El += pl[e].rank == 0;
        }
        GPU_OK(eep_status_from_cu(cu->cuMemcpyDtoH(counts_h, b.counts, (size_t)El * 4), "DtoH"));
        for (t = 0; t < T_MAX; t++) {
            int live = 0;

            for (k = 0; k < TOPK; k++) {
                const int id   = idx_h[t * TOPK + k];
                const int drop = id >= 0 && pl[id].rank != 0;

                bad += drop_h[t * TOPK + k] != drop;
                want_nd += drop;
                if (id >= 0 && pl[id].rank == 0) {
                    want_counts[pl[id].slot]++;
                    live++;
                }
            }
            for (int c = 0; live == 0 && c < HIDDEN; c++) {
                bad += again[(size_t)t * HIDDEN + c] != 0; /* no live lane: zeros */
            }
        }
        for (int e = 0; e < El; e++) {
            bad += counts_h[e] != want_counts[e];
        }
        printf("degraded pair on rank 0 alone: %.0f ms, %d lanes dropped (report %d), %d "
               "mismatches\n",
               ms, want_nd, nd, bad);
        GPU_CHECK(nd == want_nd && want_nd > 0, "num_dropped %d, want %d", nd, want_nd);
        GPU_CHECK(bad == 0, "degraded pair: %d mismatches (report, counts, zero rows)", bad);
        eep_ep_handle_destroy(hd);
        cu->cuMemFree(dropped);
        cu->cuMemFree(ndrop);
        free(drop_h);
        free(idx_h);
    }
    GPU_OK(eep_bootstrap_barrier(bs));

    eep_ep_handle_destroy(h);
    eep_runtime_destroy(rt);
    eep_bootstrap_destroy(bs);
    free(eager);
    free(again);
    return gpu_test_finish("test_ep");
}
