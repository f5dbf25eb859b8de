"""elasticep.Buffer itself (its ctypes marshalling: argument structs, the cpu_sync alloc hook,
output views, handles, combine and top-k gradient arguments, the autograd Functions and the
example's ElasticEP path through the real class) on the CPU, against a stand-in libeep: a
Python object whose eep_dispatch / eep_combine_ex read the very structs the Buffer filled and
answer with the C reference (build/lib/libeep_ref.so: tests/common/ep_reference.c) at one rank.
torch.cuda is replaced by CPU stand-ins.  Needs torch and libeep_ref.so (skipped otherwise).
"""
import ctypes
import os
import sys
import unittest

try:
    import torch
except Exception:
    torch = None

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, HERE)
REF = os.environ.get("ELASTICEP_REF_LIBRARY") or os.path.join(HERE, "..", "..", "build", "lib",
                                                         "libeep_ref.so")


class MockLib:
    """libeep at one rank on host memory: dispatch/combine by the C reference."""

    def __init__(self, real):
        import refbind
        self.real, self.rb, self.handles, self.next = real, refbind, {}, 0x1000
        self.calls = []
        self.dead_masks = []

    def __getattr__(self, name):  # pure functions and status strings: the real library
        return getattr(self.real, name)

    def eep_bootstrap_create(self, params, bs_p):
        bs_p._obj.value = 0x10
        return 0

    def eep_bootstrap_rank(self, bs):
        return 0

    def eep_bootstrap_nranks(self, bs):
        return 1

    def eep_bootstrap_destroy(self, bs):
        pass

    def eep_runtime_create(self, params, rt_p):
        self.params = params._obj
        rt_p._obj.value = 0x20
        return 0

    def eep_runtime_destroy(self, rt):
        pass

    def eep_ep_reserve(self, rt, shapes, n):
        self.reserved = [(shapes[i].hidden, shapes[i].dtype) for i in range(n)]
        return 0

    def eep_ep_transport(self, rt):
        return b"direct"  # one process plays every rank: the direct layout

    def eep_ep_handle_destroy(self, h):
        self.handles.pop(h.value, None)

    def eep_dispatch(self, rt, args_ref, handle_pp, stream):
        a = args_ref._obj
        rb = self.rb
        self.calls.append(("dispatch", a.mode, a.dtype, a.layout))
        self.dead_masks.append(a.dead_mask)
        if a.num_dropped:  # one rank: nothing is dead, the report is all zeros
            if a.dropped_topk:
                ctypes.memset(a.dropped_topk, 0, a.num_tokens * a.num_topk)
            ctypes.c_int32.from_address(a.num_dropped).value = 0
        K, H, fp8 = a.num_topk, a.hidden, a.dtype == 1
        shape = rb.Shape(1, a.max_tokens_per_rank, H, K, a.num_experts, a.expert_alignment, a.dtype)
        inp = (rb.Input * 1)()
        inp[0].num_tokens = a.num_tokens
        n = a.num_tokens
        idx64 = (ctypes.c_int64 * max(n * K, 1))()
        src_idx = (ctypes.c_int32 if a.topk_idx_dtype == 0 else ctypes.c_int64) * max(n * K, 1)
        ids = src_idx.from_address(a.topk_idx) if n else src_idx()
        for i in range(n * K):
            idx64[i] = ids[i]
        inp[0].x, inp[0].x_scales = a.x, a.x_scales
        inp[0].topk_idx, inp[0].topk_weights = ctypes.addressof(idx64), a.topk_weights
        recv = (rb.Recv * 1)()
        if rb.ref().eep_ref_dispatch(ctypes.byref(shape), inp, recv, None, None) != 0:
            return -83
        ranked = a.layout == 1
        if ranked:  # rank-major: the reference's rows of this (only) rank
            rm = (rb.Recv * 1)()
            if rb.ref().eep_ref_rank_major(ctypes.byref(shape), inp, 0, rm) != 0:
                return -83
            recv = rm
        rv = recv[0]
        R, El = rv.num_rows, rv.num_local
        hb, sb = H * (1 if fp8 else 2), (H // 128 * 4 if fp8 else 0)
        if a.mode == 0:  # cpu_sync: the alloc hook
            for name, nb in (("recv_x", R * hb), ("recv_x_scales", R * sb),
                             ("recv_topk_idx", R * K * 4), ("recv_topk_weights", R * K * 4)):
                if name == "recv_x_scales" and not fp8:
                    continue
                ptr = a.alloc(a.alloc_arg, nb if nb else 16, name.encode())
                if not ptr:
                    return -20
                setattr(a, name, ptr)
            for e in range(El):
                ctypes.c_int32.from_address(a.host_expert_counts + 4 * e).value = \
                    ctypes.c_int32.from_address(rv.expert_counts + 4 * e).value
            rows_out = R
        else:
            rows_max = (a.max_tokens_per_rank if ranked else
                        self.real.eep_ep_recv_rows_max(1, a.max_tokens_per_rank, K,
                                                       a.num_experts, a.expert_alignment))
            if a.recv_capacity < rows_max:
                return -1
            rows_out = rows_max
        ctypes.memmove(a.recv_x, rv.x, R * hb)
        if fp8:
            ctypes.memmove(a.recv_x_scales, rv.x_scales, R * sb)
        ctypes.memmove(a.recv_topk_idx, rv.topk_idx, R * K * 4)
        ctypes.memmove(a.recv_topk_weights, rv.topk_weights, R * K * 4)
        ctypes.memmove(a.recv_expert_counts, rv.expert_counts, El * 4)
        for e in range((1 if ranked else El) + 1):  # rank-major: [world + 1]
            ctypes.c_int32.from_address(a.recv_expert_offsets + 4 * e).value = \
                ctypes.c_int64.from_address(rv.expert_offsets + 8 * e).value
        ctypes.c_int64.from_address(a.num_recv_rows_p).value = rows_out
        hp = handle_pp._obj
        if a.mode == 2 and (hp.value not in self.handles or
                            self.handles[hp.value][4] != ranked):
            return -1
        if not hp.value:
            self.next += 0x10
            hp.value = self.next
        if a.mode != 2:
            self.handles[hp.value] = (shape, inp, recv, idx64, ranked)
        return 0

    def eep_combine_ex(self, rt, args_ref, handle, stream):
        a = args_ref._obj
        rb = self.rb
        shape, inp, recv, _, ranked = self.handles[handle.value]
        self.calls.append(("combine", a.weighted, bool(a.topk_grad)))
        s = rb.Shape(shape.world, shape.max_tokens, a.hidden, shape.num_topk, shape.num_experts,
                     shape.alignment, 0)
        ys = (ctypes.c_void_p * 1)(a.y)
        if ranked:  # the rows as they are, weighted or not (the caller weighted them)
            if a.topk_grad:
                return -1  # EEP_ERR_INVALID_ARG: no top-k gradients of rank-major rows
            outs = (ctypes.c_void_p * 1)(a.out)
            return -20 if rb.ref().eep_ref_combine_rank_major(ctypes.byref(s), inp, recv, ys,
                                                               outs) != 0 else 0
        if a.out:
            if rb.ref().eep_ref_combine_src_ex(ctypes.byref(s), inp, recv, ys, 0, a.weighted,
                                               a.out) != 0:
                return -20
        if a.topk_grad:
            gs, out = (ctypes.c_void_p * 1)(a.y_grad), (ctypes.c_void_p * 1)(a.topk_grad)
            if rb.ref().eep_ref_topk_grad(ctypes.byref(s), inp, recv, ys, gs, out) != 0:
                return -20
        return 0


class FakeEvent:
    def record(self, s=None):
        pass

    def query(self):
        return True

    def synchronize(self):
        pass


class FakeStream:
    cuda_stream = 0

    def __init__(self, *a, **k):
        pass

    def wait_stream(self, s):
        pass


@unittest.skipIf(torch is None or not os.path.exists(REF),
                 "needs torch and build/lib/libeep_ref.so (scripts/gpu-python.sh builds it)")
class TestBufferMock(unittest.TestCase):
    def setUp(self):
        from elasticep import _checks, _lib, buffer
        self.saved = (_lib._lib, _checks.DEVICE_TYPE, dict(torch.cuda.__dict__))
        real = _lib.lib()
        self.mock = MockLib(real)
        _lib._lib = self.mock
        _checks.DEVICE_TYPE = "cpu"
        cuda = torch.cuda
        cuda.is_available = lambda: True
        cuda.current_device = lambda: 0
        cuda.current_stream = lambda *a: FakeStream()
        cuda.Stream = FakeStream
        cuda.Event = FakeEvent
        cuda.is_current_stream_capturing = lambda: False
        cuda.synchronize = lambda *a: None
        self.buffer = buffer
        self.orig_init = buffer.Buffer.__init__

        def init(b, *a, **k):
            self.orig_init(b, *a, **k)
            b.device = torch.device("cpu")
        buffer.Buffer.__init__ = init

    def tearDown(self):
        from elasticep import _checks, _lib
        _lib._lib, _checks.DEVICE_TYPE, saved = self.saved
        for k, v in saved.items():
            setattr(torch.cuda, k, v)
        self.buffer.Buffer.__init__ = self.orig_init

    def inputs(self, T, H, K, E, seed):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(T, H, generator=g).to(torch.bfloat16)
        p = torch.softmax(torch.randn(T, E, generator=g), -1)
        w, idx = p.topk(K, -1)
        return x, idx.contiguous(), (w / w.sum(-1, keepdim=True)).contiguous()

    def test_calls_and_outputs(self):
        import elasticep
        T, H, K, E = 16, 256, 2, 8
        buf = elasticep.Buffer("env", 32, H, K, E, dtypes=("fp8",), extra_hidden=(128,),
                               expert_alignment=4)
        self.assertEqual(sorted(self.mock.reserved), [(128, 0), (128, 1), (256, 0), (256, 1)])
        self.assertEqual(self.mock.params.window_bytes, buf.window_bytes)
        x, idx, w = self.inputs(T, H, K, E, 1)
        rx, ridx, rw, counts, h, ev = buf.dispatch(x, idx, w, mode="cpu_sync")
        self.assertEqual(rx.shape[0], h.num_rows)
        self.assertEqual(sum((c + 3) // 4 * 4 for c in h.host_counts), h.num_rows)
        self.assertEqual(h.host_counts, counts.tolist())
        # each real row is its token's x, padding rows zero
        off = h.recv_offsets.tolist()
        for e in range(E):
            for r in range(off[e], off[e + 1]):
                lane = (ridx[r] == e).nonzero()
                if r - off[e] < h.host_counts[e]:
                    self.assertEqual(lane.numel(), 1)
                else:
                    self.assertTrue(bool((rx[r] == 0).all()))
        y = (rx.float() * 2).to(torch.bfloat16)
        out, _ = buf.combine(y, h)
        exp = ((x.float() * 2).to(torch.bfloat16).float())  # weights sum to 1 per token
        self.assertLess((out.float() - exp).abs().max().item(), 0.05)
        out_u, _ = buf.combine(y, h, weighted=False)
        self.assertLess((out_u.float() - K * exp).abs().max().item(), 0.1)
        tg, _ = buf.combine_topk_grad(y, y, h)
        self.assertEqual(tuple(tg.shape), (T, K))
        self.assertTrue(bool((tg > 0).all()))
        # fp8 no_cpu_sync, then a bf16 cached dispatch of gradients on its handle
        q, s = elasticep.autograd.quantize_fp8(x)
        rq, _, _, _, hq, _ = buf.dispatch((q, s), idx, w, mode="no_cpu_sync")
        self.assertEqual(rq[0].shape[0], buf.rows_max)
        self.assertEqual(rq[0].dtype, torch.float8_e4m3fn)
        gx, _, _, _, hc, _ = buf.dispatch(x, idx, w, handle=hq)
        self.assertIs(hc, hq)
        self.assertEqual(self.mock.calls[-1], ("dispatch", 2, 0, 0))
        R = hq.recv_offsets[-1].item()
        self.assertTrue(torch.equal(hq.recv_counts, counts))  # the same routing as the bf16 one
        self.assertEqual(gx.dtype, torch.bfloat16)
        self.assertTrue(torch.equal(gx[:R], rx))  # bf16 rows in the fp8 handle's layout
        # the dropped report on request (one rank: nothing dead, all zeros), none otherwise
        self.assertIsNone(h.dropped_topk)
        _, _, _, _, hd, _ = buf.dispatch(x, idx, w, mode="cpu_sync", report_dropped=True)
        self.assertEqual(tuple(hd.dropped_topk.shape), (T, K))
        self.assertEqual(hd.dropped_topk.dtype, torch.uint8)
        self.assertEqual(int(hd.dropped_topk.sum()), 0)
        self.assertEqual(hd.num_dropped.tolist(), [0])
        self.assertEqual(self.mock.dead_masks[-1], 0)
        # errors before any call
        n = len(self.mock.calls)
        for bad in ([0], [1], [-1], ["1"], 3, [True]):  # own rank, outside world 1, not ranks
            with self.assertRaises(elasticep.InvalidArgument) as cm:
                buf.dispatch(x, idx, w, dead_ranks=bad)
            self.assertIn("dead_ranks", str(cm.exception))
        with self.assertRaises(elasticep.InvalidArgument):
            buf.dispatch(x[:, :200].contiguous(), idx, w)
        with self.assertRaises(elasticep.InvalidArgument):
            buf.dispatch(x, idx, w.double())
        with self.assertRaises(elasticep.InvalidArgument):
            buf.combine(y[:-1], h)
        self.assertEqual(len(self.mock.calls), n)
        buf.destroy()

    def test_rank_major(self):
        """layout="rank" through the real Buffer: the struct's layout, one row per token (one
        rank: every token, in order) with its local lanes and weights, the source offsets, the
        worst case of world * max_tokens rows without a host wait, a cached dispatch of other
        data on the handle, the combine summing rows as they are, and the errors."""
        import elasticep
        from elasticep import _lib
        T, H, K, E = 12, 128, 2, 8
        buf = elasticep.Buffer("env", 16, H, K, E)
        x, idx, w = self.inputs(T, H, K, E, 3)
        for mode in ("cpu_sync", "no_cpu_sync"):
            rx, ridx, rw, counts, h, _ = buf.dispatch(x, idx, w, mode=mode, layout="rank")
            self.assertEqual(self.mock.calls[-1][3], _lib.LAYOUT_RANK_MAJOR)
            self.assertEqual(h.layout, "rank")
            self.assertEqual(h.num_rows, T if mode == "cpu_sync" else 16)
            self.assertEqual(h.recv_offsets.tolist(), [0, T])
            self.assertTrue(torch.equal(rx[:T], x))
            self.assertTrue(torch.equal(ridx[:T].long(), idx))  # one rank: local ids are global
            self.assertTrue(torch.equal(rw[:T], w))
            self.assertEqual(counts.tolist(), torch.bincount(idx.flatten(), minlength=E).tolist())
            y = (rx.float() * 3).to(torch.bfloat16)
            for weighted in (True, False):  # the caller weighed its rows: summed as they are
                out, _ = buf.combine(y, h, weighted=weighted)
                self.assertTrue(torch.equal(out, y[:T]))
        # lanes_back: fp32 lane gradients back to their tokens to 1 ulp (one rank: row t is t)
        gl = torch.randn(h.num_rows, K, generator=torch.Generator().manual_seed(2)) * 1e-3
        back = elasticep.autograd.lanes_back(buf, h, gl)
        self.assertEqual(tuple(back.shape), (T, K))
        self.assertLessEqual(((back - gl[:T]).abs() / gl[:T].abs()).max().item(), 2.0 ** -22)
        x2 = (x.float() + 1).to(torch.bfloat16)
        g, _, _, _, hc, _ = buf.dispatch(x2, idx, w, handle=h)
        self.assertIs(hc, h)
        self.assertEqual(self.mock.calls[-1][1:], (_lib.MODE_CACHED, 0, _lib.LAYOUT_RANK_MAJOR))
        self.assertTrue(torch.equal(g[:T], x2))
        n = len(self.mock.calls)
        for call, needle in ((lambda: buf.dispatch(x, idx, w, layout="token"), "layout"),
                             (lambda: buf.dispatch(x, idx, w, handle=h, layout="expert"),
                              "handle's layout"),
                             (lambda: buf.combine_topk_grad(y, y, h), "rank-major"),
                             (lambda: h.row_weights(), "rank-major")):
            with self.assertRaises(elasticep.InvalidArgument) as cm:
                call()
            self.assertIn(needle, str(cm.exception))
        self.assertEqual(len(self.mock.calls), n)
        buf.destroy()

    def test_rank_major_autograd(self):
        """A small MoE layer both ways through elasticep.autograd: expert-major (grouped rows,
        the weights applied by the combine) and rank-major (the caller weighs each row's local
        experts itself): the same output and the same gradients of x, the weights (through
        lanes_back's three-part combine) and the experts."""
        import elasticep
        T, H, K, E = 16, 128, 2, 4
        buf = elasticep.Buffer("env", T, H, K, E)
        x0, idx, w0 = self.inputs(T, H, K, E, 4)
        W0 = torch.randn(E, H, H, generator=torch.Generator().manual_seed(9)) / H ** 0.5
        res = {}
        for layout in ("expert", "rank"):
            x = x0.clone().requires_grad_()
            w = w0.clone().requires_grad_()
            W = W0.clone().requires_grad_()
            rx, ridx, rw, counts, h = elasticep.autograd.dispatch(buf, x, idx, w, layout=layout)
            if layout == "expert":
                off = h.recv_offsets.tolist()
                y = torch.cat([rx[off[e]:off[e + 1]].float() @ W[e] for e in range(E)])
                out = elasticep.autograd.combine(buf, y.to(torch.bfloat16), w, h)
            else:
                y = torch.zeros(rx.shape[0], H)
                for k in range(K):
                    e = ridx[:, k].long().clamp(min=0)
                    part = torch.bmm(rx.float()[:, None, :], W[e])[:, 0, :]
                    y = y + rw[:, k:k + 1] * (ridx[:, k:k + 1] >= 0) * part
                out = elasticep.autograd.combine(buf, y.to(torch.bfloat16), w, h)
            (out.float() ** 2).sum().backward()
            res[layout] = (out.detach().float(), x.grad.float(), w.grad.float(), W.grad.float())
        for a, b, what in zip(res["expert"], res["rank"], ("out", "grad x", "grad w", "grad W")):
            self.assertLess((a - b).abs().max().item(), 0.02 * b.abs().max().item() + 1e-6, what)
        self.assertGreater(res["rank"][2].abs().max().item(), 0)  # the weights' path ran
        buf.destroy()

    def test_autograd_and_example(self):
        import argparse

        import elasticep
        import train_moe
        from test_autograd_cpu import FakeBuffer
        a = argparse.Namespace(dim=128, ffn=64, experts_per_rank=4, topk=2, tokens=32, seed=1,
                               fp8=False, lr=1e-3)
        buf = elasticep.Buffer("env", a.tokens, a.dim, a.topk, a.experts_per_rank,
                               expert_alignment=8)
        results = []
        for which in ("buffer", "fake", "ref", "rank"):
            torch.manual_seed(0)
            m = train_moe.Block(a, 1)
            x = torch.randn(a.tokens, a.dim, generator=torch.Generator().manual_seed(5))
            u, idx, w = m.route(x.to(torch.bfloat16), a.topk)
            if which == "ref":
                moe = train_moe.moe_ref(m, u, idx, w, a)
            elif which == "rank":  # rank-major: the example's --layout rank path
                moe = train_moe.moe_eep_ranked(m, buf, u, idx, w, a)
            else:
                b = buf if which == "buffer" else FakeBuffer(a.experts_per_rank, a.topk, 8)
                moe = train_moe.moe_eep(m, b, u, idx, w, a)
            (moe.float() ** 2).mean().backward()
            results.append((moe.detach(), {n: p.grad.clone() for n, p in m.named_parameters()}))
        kinds = [c[0] for c in self.mock.calls]
        self.assertIn("dispatch", kinds)
        self.assertIn(("combine", 0, False), self.mock.calls)  # dispatch's backward
        self.assertIn(("combine", 1, True), self.mock.calls)  # the top-k gradients
        self.assertIn(("dispatch", 2, 0, 0), self.mock.calls)  # combine's backward: cached bf16
        self.assertIn(("dispatch", 0, 0, 1), self.mock.calls)  # the rank-major run's
        for other in (1, 2, 3):
            err = (results[0][0].float() - results[other][0].float()).abs().max().item()
            self.assertLess(err, 0.03 * results[other][0].float().abs().max().item() + 1e-6)
            for n in results[other][1]:
                g0, g1 = results[0][1][n], results[other][1][n]
                self.assertLess((g0 - g1).abs().max().item(),
                                0.03 * g1.abs().max().item() + 1e-6, "grad %s" % n)
        buf.destroy()

    def test_gpu_script_on_cpu(self):
        """tests/gpu_python.py's reference checks (not its graph and timing parts) through the
        stand-in: catches mistakes of the GPU script itself before GPU time is spent on it."""
        import gpu_python
        gpu_python.DEVICE = "cpu"
        gpu_python.results.clear()
        self.assertEqual(gpu_python.main(), 0)
        self.assertGreaterEqual(len(gpu_python.results), 12)

    def test_example_trains(self):
        """The example's runs, on the CPU, the ElasticEP ones (expert- and rank-major) through
        the real Buffer: the losses and first-step gradients agree with the reference's as
        main() requires, and the loss falls."""
        import argparse

        import elasticep
        import train_moe
        steps = int(os.environ.get("ELASTICEP_TRAIN_STEPS", "60"))
        a = argparse.Namespace(steps=steps, tokens=64, dim=128, ffn=128, experts_per_rank=4,
                               topk=2, lr=3e-3, seed=1, fp8=False)
        train_moe.DEVICE = "cpu"
        buf = elasticep.Buffer("env", a.tokens, a.dim, a.topk, a.experts_per_rank,
                               expert_alignment=8)
        torch.cuda.is_available = self.saved[2]["is_available"]  # the optimizer asks too
        lr_, gr = train_moe.train(a, False, None)
        for layout in ("expert", "rank"):  # the example's --layout
            a.layout = layout
            le, ge = train_moe.train(a, True, buf)
            self.assertTrue(train_moe.compare(le, lr_, ge, gr), layout)
        buf.destroy()


if __name__ == "__main__":
    unittest.main()
