"""The autograd Functions and the training example's two MoE paths on the CPU, with a stand-in
Buffer (FakeBuffer: dispatch/combine of one rank written in torch, the same layout and handle
fields as elasticep.Buffer).  Needs torch (skipped without it: make test's venv has none);
the GPU machine runs the real Buffer (tests/gpu_python.py).

Checks: the Functions' gradients (x, top-k weights, expert weights) against a dense torch
formulation of the same MoE; Handle.row_weights; the example's ElasticEP path against its
all-to-all reference (forward and gradients).
"""
import argparse
import os
import sys
import unittest

try:
    import torch
except Exception:  # torch missing, or its libraries
    torch = None

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))


class FakeBuffer:
    """One rank's dispatch/combine in torch: expert-major rows (tokens ascending within an
    expert), groups padded to the alignment, a Handle as elasticep.Buffer fills it."""

    def __init__(self, num_experts, num_topk, alignment):
        self.world, self.rank = 1, 0
        self.num_experts, self.num_local, self.num_topk = num_experts, num_experts, num_topk
        self.alignment = alignment

    def dispatch(self, x, topk_idx, topk_weights, handle=None, mode=None, num_sms=None,
                 layout=None):
        from elasticep.buffer import Handle
        assert layout in (None, "expert"), "the stand-in lays rows out expert-major only"
        fp8 = isinstance(x, (tuple, list))
        xs = list(x) if fp8 else [x]
        if handle is None or mode not in (None, "cached"):
            h = Handle(None)
            src, lane, counts = [], [], []
            for e in range(self.num_local):
                hit = (topk_idx == e).nonzero().tolist()  # (t, k), t ascending
                counts.append(len(hit))
                pad = (-len(hit)) % self.alignment
                src += [t for t, _ in hit] + [-1] * pad
                lane += [k for _, k in hit] + [-1] * pad
            h.row_src, h.row_lane = torch.tensor(src, dtype=torch.long), torch.tensor(lane)
            R = len(src)
            h.num_tokens, h.num_rows, h.hidden = int(x[0].shape[0] if fp8 else x.shape[0]), R, 0
            h.host_counts = counts
            h.recv_counts = torch.tensor(counts, dtype=torch.int32)
            off = [0]
            for c in counts:
                off.append(off[-1] + (c + self.alignment - 1) // self.alignment * self.alignment)
            h.recv_offsets = torch.tensor(off, dtype=torch.int32)
            valid = h.row_src >= 0
            s = h.row_src.clamp(min=0)
            ridx = torch.where(valid[:, None], topk_idx[s].to(torch.int32),
                               torch.full((R, self.num_topk), -1, dtype=torch.int32))
            h.recv_topk_idx = ridx
            h.recv_topk_weights = torch.where(ridx >= 0, topk_weights[s],
                                              torch.zeros_like(topk_weights[s]))
            h.topk_idx, h.topk_weights = topk_idx, topk_weights
        else:
            h = handle
        valid = h.row_src >= 0
        s = h.row_src.clamp(min=0)
        rows = [torch.where(valid[:, None], t[s], torch.zeros_like(t[s])) for t in xs]
        recv_x = tuple(rows) if fp8 else rows[0]
        return recv_x, h.recv_topk_idx, h.recv_topk_weights, h.recv_counts, h, None

    def _per_token(self, vals, h):
        T = h.num_tokens
        out = torch.zeros((T,) + tuple(vals.shape[1:]), dtype=torch.float32)
        valid = h.row_src >= 0
        return out.index_add(0, h.row_src[valid], vals[valid].float())

    def combine(self, y, handle, weighted=True):
        w = handle.row_weights() if weighted else torch.ones(handle.num_rows)
        return self._per_token(y.float() * w[:, None], handle).to(torch.bfloat16), None

    def combine_topk_grad(self, y, y_grad, handle):
        d = (y.float() * y_grad.float()).sum(-1)
        K = self.num_topk
        onehot = torch.zeros(handle.num_rows, K)
        valid = handle.row_src >= 0
        onehot[valid, handle.row_lane[valid]] = 1.0
        return self._per_token(onehot * d[:, None], handle), None


@unittest.skipIf(torch is None, "torch is not installed (the GPU machine runs these with the real "
                                "Buffer: tests/gpu_python.py)")
class TestAutograd(unittest.TestCase):
    T, D, F, E, K = 24, 128, 64, 4, 2

    def setUp(self):
        torch.manual_seed(3)
        self.x = torch.randn(self.T, self.D).to(torch.bfloat16)
        probs = torch.softmax(torch.randn(self.T, self.E), -1)
        w, idx = probs.topk(self.K, -1)
        self.idx, self.w = idx.contiguous(), (w / w.sum(-1, keepdim=True)).contiguous()
        self.w1 = torch.randn(self.E, self.D, self.F) * 0.1
        self.buf = FakeBuffer(self.E, self.K, 8)

    def test_row_weights(self):
        h = self.buf.dispatch(self.x, self.idx, self.w, mode="cpu_sync")[4]
        rw = h.row_weights()
        valid = h.row_src >= 0
        exp = self.w[h.row_src[valid], h.row_lane[valid]]
        self.assertTrue(torch.equal(rw[valid], exp))
        self.assertTrue(bool((rw[~valid] == 0).all()))

    def run_moe(self, eep, fp8=False):
        import elasticep
        x = self.x.clone().requires_grad_(True)
        w = self.w.clone().requires_grad_(True)
        w1 = self.w1.clone().to(torch.bfloat16).requires_grad_(True)
        if eep:
            rows, _, _, _, h = elasticep.autograd.dispatch(self.buf, x, self.idx, w, fp8=fp8)
            pieces, off = [], 0
            for e, n in enumerate(h.host_counts):
                p = (n + 7) // 8 * 8
                if n:
                    pieces.append(torch.tanh(rows[off:off + n] @ w1[e])[:, : self.D // 2]
                                  .repeat(1, 2))
                if p > n:
                    pieces.append(rows.new_zeros(p - n, self.D))
                off += p
            out = elasticep.autograd.combine(self.buf, torch.cat(pieces).contiguous(), w, h)
        else:  # dense: every (token, k) through its expert, weighted in fp32
            xs = x
            if fp8:
                from elasticep.autograd import dequantize_fp8, quantize_fp8
                q, s = quantize_fp8(x.detach())
                xs = x + (dequantize_fp8(q, s) - x).detach()
            ys = torch.stack([torch.tanh(xs @ w1[e])[:, : self.D // 2].repeat(1, 2)
                              for e in range(self.E)], 1)  # [T, E, D]
            sel = ys.gather(1, self.idx[..., None].expand(-1, -1, self.D))
            out = (sel.float() * w[..., None]).sum(1).to(torch.bfloat16)
        G = torch.randn(out.shape, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16)
        (out.float() * G.float()).sum().backward()
        return out.detach(), x.grad, w.grad, w1.grad

    def close(self, a, b, what, rtol=3e-2):
        a, b = a.float(), b.float()
        err = (a - b).abs().max().item()
        scale = b.abs().max().item()
        self.assertLessEqual(err, rtol * scale + 1e-6, "%s: max |d| %g of %g" % (what, err, scale))

    def test_functions_match_dense(self):
        for fp8 in (False, True):
            got, ref = self.run_moe(True, fp8), self.run_moe(False, fp8)
            for name, a, b in zip(("out", "x.grad", "topk_weights.grad", "w1.grad"), got, ref):
                self.assertIsNotNone(a, name)
                self.close(a, b, "%s (fp8 %s)" % (name, fp8))
            self.assertEqual(got[1].dtype, torch.bfloat16)

    def test_weights_without_grad(self):
        """Top-k weights that need no gradient: the combine's backward makes no top-k gradient
        call (a hybrid runtime refuses one: the backward used to raise there)."""
        import elasticep

        class NoTopkGrad(FakeBuffer):
            def combine_topk_grad(self, y, y_grad, handle):
                raise AssertionError("combine_topk_grad called for weights without grad")

        buf = NoTopkGrad(self.E, self.K, 8)
        x = self.x.clone().requires_grad_(True)
        rows, _, _, _, h = elasticep.autograd.dispatch(buf, x, self.idx, self.w)
        out = elasticep.autograd.combine(buf, (rows * 2).contiguous(), self.w, h)
        out.float().sum().backward()
        self.assertIsNotNone(x.grad)
        ref = x.detach().clone().requires_grad_(True)
        (2 * ref.float()).sum().backward()  # sum_k w_k * 2 x = 2 x (the weights sum to 1)
        self.close(x.grad, ref.grad, "x.grad")

    def test_example_paths_agree(self):
        import train_moe
        a = argparse.Namespace(dim=128, ffn=64, experts_per_rank=4, topk=2, tokens=32, seed=1,
                               fp8=False, lr=1e-3)
        results = []
        for eep in (True, False):
            torch.manual_seed(0)
            m = train_moe.Block(a, 1)
            g = torch.Generator().manual_seed(5)
            x = torch.randn(a.tokens, a.dim, generator=g).to(torch.bfloat16)
            u, idx, w = m.route(x, a.topk)
            buf = FakeBuffer(a.experts_per_rank, a.topk, 8)
            moe = train_moe.moe_eep(m, buf, u, idx, w, a) if eep else train_moe.moe_ref(m, u, idx,
                                                                                         w, a)
            (moe.float() ** 2).mean().backward()
            results.append((moe.detach(), {n: p.grad.clone() for n, p in m.named_parameters()}))
        self.close(results[0][0], results[1][0], "moe output")
        for n in results[1][1]:
            self.close(results[0][1][n], results[1][1][n], "grad " + n)


if __name__ == "__main__":
    unittest.main()
