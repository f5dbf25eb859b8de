/*
 * test_ep_baseline_emu.cc - the NCCL baseline's kernels (bench/kernels/baseline_*.cuh), run on the
 * CPU through tests/emu/ep_kernel_shim.h (eep_shim_launch) for a simulated world, against the CPU reference.
 *
 * The host steps of bench/eep_bench_ep_baseline.c are replayed in one process: route, scan and
 * pack on every rank; the all-gather of counts and the grouped send/recv become copies between
 * the ranks' buffers; then expert scan, offsets, unpack and pad; combine's reduce, the reverse
 * copies and the sum.  Every output element is compared with the reference; outputs start
 * poisoned and rows past the end must stay poisoned.  This is what can be checked without a GPU:
 * the kernels' logic and orders, not their speed or their memory model.
 */
#include "tests/emu/ep_kernel_shim.h"

#include "bench/kernels/baseline_combine.cuh"
#include "bench/kernels/baseline_dispatch.cuh"
#include "tests/common/ep_reference.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define U(p) ((unsigned long long)(uintptr_t)(p))
static int64_t errors;
static void    cmp(const char *what, const void *a, const void *b, size_t n, int rank)
{
    if (n && memcmp(a, b, n) != 0) {
        size_t i = 0;
        while (((const unsigned char *)a)[i] == ((const unsigned char *)b)[i])
            i++;
        printf("  rank %d: %s differs at byte %zu of %zu\n", rank, what, i, n);
        errors++;
    }
}

struct rank_t {
    std::vector<unsigned long long> mask;
    std::vector<int> send_pos, send_counts, send_offsets, bad, lane_pos, row_of, counts, offsets;
    std::vector<unsigned char> send_buf, recv_buf, recv_x;
    std::vector<float>         recv_sc, recv_w;
    std::vector<int>           recv_idx;
    std::vector<int>           recv_n, recv_off;
    std::vector<uint16_t>      c_send, c_recv, out, y;
    int                        num_recv;
};

static int run(eep_ep_shape_t s, eep_ref_gen_t gen, int idx32, const char *name)
{
    int W = s.world, T = s.max_tokens, K = s.num_topk, H = s.hidden, El = s.num_experts / W;
    eep_ep_wire_t wire;
    eep_ep_wire_layout(&s, &wire);
    eep_bl_wire_t                kw   = { (unsigned)wire.token_bytes, (unsigned)wire.hidden_bytes,
                                          (unsigned)wire.scale_off,   (unsigned)wire.scale_bytes,
                                          (unsigned)wire.meta_off,    0 };
    int64_t                      rows = eep_ep_rows_max(&s);
    std::vector<eep_ref_input_t> in(W);
    std::vector<eep_ref_recv_t>  rr(W);
    std::vector<rank_t>          R(W);
    int64_t                      before = errors;

    for (int r = 0; r < W; r++)
        eep_ref_input_generate(&s, &gen, r, &in[r]);
    if (eep_ref_dispatch(&s, in.data(), rr.data(), NULL, NULL) != EEP_OK) {
        printf("%s: the CPU reference failed\n", name);
        errors++;
        return 1;
    }
    std::vector<std::vector<int32_t>> idx32v(W);
    for (int r = 0; r < W; r++) {
        rank_t        &q  = R[r];
        int            n  = in[r].num_tokens;
        eep_bl_shape_t ks = { r, W, n, T, H, K, s.num_experts, El, s.alignment, 0 };
        idx32v[r].resize((size_t)n * K + 1);
        eep_ref_topk_to_i32(&in[r], K, idx32v[r].data());
        const void *ids = idx32 ? (const void *)idx32v[r].data() : (const void *)in[r].topk_idx;
        q.mask.resize(T + 1);
        q.send_pos.resize((size_t)T * W + 1);
        q.send_counts.resize(W);
        q.send_offsets.resize(W);
        q.bad = { -1, -1 };
        q.send_buf.resize((size_t)T * W * wire.token_bytes + 16);
        eep_bl_route_params_t rp = { ks, U(ids), U(q.mask.data()), U(q.bad.data()) };
        if (idx32)
            eep_shim_launch<eep_bl_route_params_t>(eep_bl_route_body<32>, 2, 64, rp);
        else
            eep_shim_launch<eep_bl_route_params_t>(eep_bl_route_body<64>, 2, 64, rp);
        eep_bl_scan_params_t sp = { ks, U(q.mask.data()), U(q.send_pos.data()),
                                    U(q.send_counts.data()), U(q.send_offsets.data()) };
        eep_shim_launch<eep_bl_scan_params_t>(eep_bl_scan_body, 1, 64, sp);
        eep_bl_pack_params_t pp = { ks,
                                    kw,
                                    U(in[r].x),
                                    U(in[r].x_scales),
                                    U(ids),
                                    U(in[r].topk_weights),
                                    U(q.send_pos.data()),
                                    U(q.send_offsets.data()),
                                    U(q.send_buf.data()) };
        if (idx32)
            eep_shim_launch<eep_bl_pack_params_t>(eep_bl_pack_body<32>, 3, 64, pp);
        else
            eep_shim_launch<eep_bl_pack_params_t>(eep_bl_pack_body<64>, 3, 64, pp);
        if (q.bad[0] != -1) {
            printf("  rank %d: bad token %d\n", r, q.bad[0]);
            errors++;
        }
    }
    // all-to-all
    for (int r = 0; r < W; r++) {
        rank_t &q = R[r];
        q.recv_n.resize(W);
        q.recv_off.resize(W);
        int off = 0;
        for (int src = 0; src < W; src++) {
            q.recv_n[src]   = R[src].send_counts[r];
            q.recv_off[src] = off;
            off += q.recv_n[src];
        }
        q.num_recv = off;
        q.recv_buf.resize((size_t)off * wire.token_bytes + 16);
        for (int src = 0; src < W; src++)
            memcpy(q.recv_buf.data() + (size_t)q.recv_off[src] * wire.token_bytes,
                   R[src].send_buf.data() + (size_t)R[src].send_offsets[r] * wire.token_bytes,
                   (size_t)q.recv_n[src] * wire.token_bytes);
    }
    for (int r = 0; r < W; r++) {
        rank_t        &q  = R[r];
        eep_bl_shape_t ks = { r, W, in[r].num_tokens, T, H, K, s.num_experts, El, s.alignment, 0 };
        q.lane_pos.assign((size_t)q.num_recv * K + 1, 0);
        q.row_of.assign((size_t)q.num_recv * K + 1, 0);
        q.counts.assign(El, 0x7777);
        q.offsets.assign(El + 1, 0x7777);
        q.recv_x.assign((size_t)rows * wire.hidden_bytes + 16, 0xa5);
        q.recv_sc.assign((size_t)rows * (wire.scale_bytes / 4) + 4, -7.0f);
        q.recv_idx.assign((size_t)rows * K, 0x5a5a5a5a);
        q.recv_w.assign((size_t)rows * K, -9.0f);
        eep_bl_expert_scan_params_t ep = {
            ks, kw, U(q.recv_buf.data()), q.num_recv, 0, U(q.lane_pos.data()), U(q.counts.data())
        };
        eep_shim_launch<eep_bl_expert_scan_params_t>(eep_bl_expert_scan_body, El, 64, ep);
        eep_bl_offsets_params_t op = { ks, U(q.counts.data()), U(q.offsets.data()) };
        eep_shim_launch<eep_bl_offsets_params_t>(eep_bl_offsets_body, 1, 32, op);
        eep_bl_unpack_params_t up = { ks,
                                      kw,
                                      U(q.recv_buf.data()),
                                      q.num_recv,
                                      0,
                                      U(q.lane_pos.data()),
                                      U(q.offsets.data()),
                                      U(q.recv_x.data()),
                                      U(q.recv_sc.data()),
                                      U(q.recv_idx.data()),
                                      U(q.recv_w.data()),
                                      U(q.row_of.data()) };
        eep_shim_launch<eep_bl_unpack_params_t>(eep_bl_unpack_body, 3, 64, up);
        eep_bl_pad_params_t pd = { ks,
                                   kw,
                                   U(q.counts.data()),
                                   U(q.offsets.data()),
                                   U(q.recv_x.data()),
                                   U(q.recv_sc.data()),
                                   U(q.recv_idx.data()),
                                   U(q.recv_w.data()) };
        eep_shim_launch<eep_bl_pad_params_t>(eep_bl_pad_body, El, 64, pd);
        // compare
        const eep_ref_recv_t &e = rr[r];
        std::vector<int>      want_off(El + 1);
        for (int i = 0; i <= El; i++)
            want_off[i] = (int)e.expert_offsets[i];
        cmp("counts", q.counts.data(), e.expert_counts, El * 4, r);
        cmp("offsets", q.offsets.data(), want_off.data(), (El + 1) * 4, r);
        cmp("recv_x", q.recv_x.data(), e.x, (size_t)e.num_rows * wire.hidden_bytes, r);
        if (wire.scale_bytes)
            cmp("recv_scales", q.recv_sc.data(), e.x_scales, (size_t)e.num_rows * wire.scale_bytes,
                r);
        cmp("recv_idx", q.recv_idx.data(), e.topk_idx, (size_t)e.num_rows * K * 4, r);
        cmp("recv_w", q.recv_w.data(), e.topk_weights, (size_t)e.num_rows * K * 4, r);
        for (size_t i = (size_t)e.num_rows * wire.hidden_bytes;
             i < (size_t)rows * wire.hidden_bytes; i++)
            if (q.recv_x[i] != 0xa5) {
                printf("  rank %d: recv_x written past the end at %zu\n", r, i);
                errors++;
                break;
            }
    }
    // combine: y = random per real row, NaN on padding
    uint64_t                      st = 7;
    std::vector<const uint16_t *> yp(W);
    for (int r = 0; r < W; r++) {
        R[r].y.resize((size_t)rr[r].num_rows * H + 8);
        for (int64_t row = 0; row < rr[r].num_rows; row++)
            for (int h = 0; h < H; h++)
                R[r].y[row * H + h] = rr[r].src_rank[row] >= 0
                                          ? eep_ref_f32_to_bf16((float)(eep_ref_rand(&st) >> 40) /
                                                                    16777216.0f * 4 -
                                                                2)
                                          : 0x7fc0;
        yp[r] = R[r].y.data();
    }
    for (int r = 0; r < W; r++) {
        rank_t        &q  = R[r];
        eep_bl_shape_t ks = { r, W, in[r].num_tokens, T, H, K, s.num_experts, El, s.alignment, 0 };
        q.c_send.resize((size_t)q.num_recv * H + 8);
        eep_bl_reduce_params_t rp = { ks,
                                      kw,
                                      U(q.recv_buf.data()),
                                      q.num_recv,
                                      0,
                                      U(q.row_of.data()),
                                      U(q.y.data()),
                                      U(q.c_send.data()) };
        eep_shim_launch<eep_bl_reduce_params_t>(eep_bl_reduce_body, 3, 64, rp);
    }
    for (int r = 0; r < W; r++) { // reverse transfer: r receives from d what it sent d
        rank_t &q     = R[r];
        int     total = 0;
        for (int d = 0; d < W; d++)
            total += q.send_counts[d];
        q.c_recv.resize((size_t)total * H + 8);
        for (int d = 0; d < W; d++)
            memcpy(q.c_recv.data() + (size_t)q.send_offsets[d] * H,
                   R[d].c_send.data() + (size_t)R[d].recv_off[r] * H,
                   (size_t)q.send_counts[d] * H * 2);
    }
    for (int r = 0; r < W; r++) {
        rank_t        &q  = R[r];
        eep_bl_shape_t ks = { r, W, in[r].num_tokens, T, H, K, s.num_experts, El, s.alignment, 0 };
        q.out.assign((size_t)in[r].num_tokens * H + 1, 0xa5a5);
        eep_bl_sum_params_t sp = { ks, U(q.c_recv.data()), U(q.send_pos.data()),
                                   U(q.send_offsets.data()), U(q.out.data()) };
        eep_shim_launch<eep_bl_sum_params_t>(eep_bl_sum_body, 3, 64, sp);
        std::vector<uint16_t> want((size_t)in[r].num_tokens * H + 1);
        eep_ref_combine_src(&s, in.data(), rr.data(), yp.data(), r, want.data());
        cmp("combine out", q.out.data(), want.data(), (size_t)in[r].num_tokens * H * 2, r);
        if (q.out[(size_t)in[r].num_tokens * H] != 0xa5a5) {
            printf("  out written past the end\n");
            errors++;
        }
    }
    printf("%-28s world %d T %d H %d K %d E %d align %d %s idx%d: %s\n", name, W, T, H, K,
           s.num_experts, s.alignment, s.dtype ? "fp8" : "bf16", idx32 ? 32 : 64,
           errors == before ? "ok" : "MISMATCH");
    for (int r = 0; r < W; r++) {
        eep_ref_input_free(&in[r]);
        eep_ref_recv_free(&rr[r]);
    }
    return 0;
}

int main()
{
    eep_ref_gen_t g;
    eep_ref_gen_init(&g, 3);
    run({ 2, 40, 256, 8, 16, 4, EEP_DTYPE_BF16, 0, nullptr }, g, 0, "random");
    run({ 4, 33, 256, 6, 32, 8, EEP_DTYPE_FP8_E4M3, 0, nullptr }, g, 1, "random fp8");
    run({ 3, 20, 128, 1, 12, 1, EEP_DTYPE_BF16, 0, nullptr }, g, 1, "K1");
    eep_ref_gen_t m   = g;
    m.masked_fraction = 0.3;
    run({ 4, 70, 256, 8, 64, 16, EEP_DTYPE_BF16, 0, nullptr }, m, 0, "masked (T > block)");
    eep_ref_gen_t h  = g;
    h.hotspot_expert = 5;
    h.hotspot_only   = 1;
    run({ 2, 30, 256, 8, 16, 8, EEP_DTYPE_FP8_E4M3, 0, nullptr }, h, 0, "hotspot only");
    eep_ref_gen_t z = g;
    z.silent_rank   = 1;
    run({ 3, 25, 128, 6, 24, 4, EEP_DTYPE_BF16, 0, nullptr }, z, 0, "silent rank");
    eep_ref_gen_t mr = g;
    mr.masked_rank   = 0;
    run({ 3, 25, 128, 6, 24, 4, EEP_DTYPE_BF16, 0, nullptr }, mr, 1, "masked rank");
    eep_ref_gen_t t1 = g;
    t1.num_tokens    = 1;
    run({ 4, 16, 256, 8, 32, 32, EEP_DTYPE_BF16, 0, nullptr }, t1, 0, "T=1");
    printf("errors: %lld\n", (long long)errors);
    return errors != 0;
}
