"""GPU tests of elasticep (scripts/gpu-python.sh; one process per rank, or alone at one rank).

Against the C reference (tests/common/ep_reference.c through refbind.py), element by element and
bitwise: a bf16 cpu_sync dispatch, its weighted and unweighted combines, an fp8 no_cpu_sync
dispatch and its combine, a bf16 cached dispatch of gradients on the fp8 handle and the top-k
weight gradients from it, a dispatch and combine of a second hidden size - all in one Buffer.
Then autograd (the Functions' gradients equal the calls they are made of), a NO_CPU_SYNC pair
captured in a CUDA graph (replays equal the eager pair), errors raised as exceptions, and the
per-call cost from Python (eager, and replays of the graph).  Prints one PASS/FAIL line per check
and "RESULT rank R: N passed, M failed".
"""
import ctypes
import os
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import elasticep  # noqa: E402
from refbind import World  # noqa: E402

RANK = int(os.environ.setdefault("EEP_RANK", "0"))
WORLD = int(os.environ.setdefault("EEP_WORLD_SIZE", "1"))
if "EEP_BOOTSTRAP" not in os.environ:
    os.environ["EEP_BOOTSTRAP"] = "file:" + tempfile.mkdtemp(prefix="eep-py-")
T, H, H2, K, ALIGN = 32, 1024, 512, 4, 4
DEVICE = "cuda"  # test_buffer_mock.py runs this file on the CPU against a stand-in libeep
E = 8 * WORLD
results = []


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def report(name, ok, detail=""):
    results.append(ok)
    print("%s rank %d: %s%s" % ("PASS" if ok else "FAIL", RANK, name,
                                " (" + detail + ")" if detail else ""), flush=True)


def skip(name, why):
    """A check this configuration cannot run, said with its reason (not counted)."""
    print("SKIP rank %d: %s (%s)" % (RANK, name, why), flush=True)


def stall_watch(seconds, what):
    """A timer that, if the code under it is still running after @p seconds, prints where every
    thread of this process is (scripts/thread-dump.sh: a stalled kernel wait, e.g. the proxy
    thread inside a driver call); cancel() it when done."""
    import subprocess
    import threading

    dump = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                        "thread-dump.sh")

    def fire():
        print("STALL rank %d: %s still running after %d s; threads:" % (RANK, what, seconds),
              flush=True)
        subprocess.run(["bash", dump, str(os.getpid())], timeout=90, check=False)
        sys.stdout.flush()

    t = threading.Timer(seconds, fire)
    t.daemon = True
    t.start()
    return t


def host_bytes(ptr, n):
    return torch.frombuffer(bytearray(ctypes.string_at(ptr, n)), dtype=torch.uint8) if n else \
        torch.empty(0, dtype=torch.uint8)


def inputs_of(w, r, fp8, hidden):
    """Rank r's inputs of World w as CUDA tensors."""
    inp = w.inputs[r]
    n = inp.num_tokens
    xb = host_bytes(inp.x, n * hidden * (1 if fp8 else 2))
    x = xb.view(torch.float8_e4m3fn if fp8 else torch.bfloat16).view(n, hidden).to(DEVICE)
    idx = host_bytes(inp.topk_idx, n * K * 8).view(torch.int64).view(n, K).to(DEVICE)
    wt = host_bytes(inp.topk_weights, n * K * 4).view(torch.float32).view(n, K).to(DEVICE)
    if fp8:
        s = host_bytes(inp.x_scales, n * hidden // 128 * 4).view(torch.float32).view(n, -1).to(DEVICE)
        return (x, s), idx, wt
    return x, idx, wt


def expected_rows(w, r, fp8, hidden):
    rv = w.recv[r]
    R = rv.num_rows
    x = host_bytes(rv.x, R * hidden * (1 if fp8 else 2))
    idx = host_bytes(rv.topk_idx, R * K * 4).view(torch.int32).view(R, K)
    wt = host_bytes(rv.topk_weights, R * K * 4).view(torch.float32).view(R, K)
    counts = host_bytes(rv.expert_counts, rv.num_local * 4).view(torch.int32)
    return R, x, idx, wt, counts


def rows_y(w, r, salt, hidden):
    """Expert outputs of rank r (CPU bf16 [rows, hidden]): a function of (rank, row, channel)."""
    R = w.recv[r].num_rows
    row = torch.arange(R)[:, None]
    h = torch.arange(hidden)[None, :]
    v = ((r * 131 + row * 17 + h * 7 + salt * 29) % 97).float() / 32.0 - 1.5
    return v.to(torch.bfloat16).contiguous()


def check_dispatch(name, w, got, fp8, hidden):
    recv_x, ridx, rw, counts, handle, ev = got
    if ev is not None:
        ev.synchronize()
    sync()
    R, ex, eidx, ew, ecounts = expected_rows(w, RANK, fp8, hidden)
    gx = (recv_x[0] if fp8 else recv_x)[:R].contiguous().view(torch.uint8).cpu().flatten()
    ok = bool(torch.equal(gx, ex)) and bool(torch.equal(ridx[:R].cpu(), eidx)) and \
        bool(torch.equal(rw[:R].cpu(), ew)) and bool(torch.equal(counts.cpu(), ecounts))
    if fp8:
        es = host_bytes(w.recv[RANK].x_scales, R * hidden // 128 * 4).view(torch.float32)
        ok = ok and bool(torch.equal(recv_x[1][:R].cpu().flatten(), es))
    report(name, ok, "%d rows" % R)
    return handle


def main():
    if DEVICE == "cuda":
        torch.cuda.set_device(0)
    buf = elasticep.Buffer("env", T, H, K, E, dtypes=("bf16", "fp8"), extra_hidden=(H2,),
                           expert_alignment=ALIGN)
    report("Buffer: world %d, window %d MB" % (buf.world, buf.window_bytes >> 20),
           buf.world == WORLD)

    # 1-2: bf16 cpu_sync dispatch, weighted and unweighted combine
    wb = World(WORLD, T, H, K, E, ALIGN, False, 7, T - 3)
    x, idx, wt = inputs_of(wb, RANK, False, H)
    got = buf.dispatch(x, idx, wt, mode="cpu_sync")
    h = check_dispatch("bf16 cpu_sync dispatch = C reference", wb, got, False, H)
    report("host counts = C reference",
           h.host_counts == expected_rows(wb, RANK, False, H)[4].tolist())
    ys = [rows_y(wb, r, 1, H) for r in range(WORLD)]
    for weighted in (True, False):
        out, _ = buf.combine(ys[RANK].to(DEVICE), h, weighted=weighted)
        sync()
        report("%s combine = C reference (bitwise)" % ("weighted" if weighted else "unweighted"),
               bool(torch.equal(out.cpu(), wb.combine(ys, RANK, weighted))))

    # 3-5: fp8 no_cpu_sync dispatch; combine; bf16 cached dispatch of gradients; top-k grads
    wf = World(WORLD, T, H, K, E, ALIGN, True, 9, T - 1)
    wg = World(WORLD, T, H, K, E, ALIGN, False, 11, T - 1, routing_from=wf)
    xf, idxf, wtf = inputs_of(wf, RANK, True, H)
    hf = check_dispatch("fp8 no_cpu_sync dispatch = C reference", wf,
                        buf.dispatch(xf, idxf, wtf, mode="no_cpu_sync"), True, H)
    R = wf.recv[RANK].num_rows
    yf = [rows_y(wf, r, 2, H) for r in range(WORLD)]
    yfull = torch.zeros((buf.rows_max, H), dtype=torch.bfloat16, device=DEVICE)
    yfull[:R] = yf[RANK].to(DEVICE)
    out, _ = buf.combine(yfull, hf)
    sync()
    report("combine of the fp8 handle = C reference", bool(torch.equal(out.cpu(),
                                                                       wf.combine(yf, RANK, True))))
    xg, _, _ = inputs_of(wg, RANK, False, H)
    got = buf.dispatch(xg, idxf, wtf, handle=hf)  # cached, bf16, on the fp8 handle
    check_dispatch("bf16 cached dispatch on the fp8 handle = C reference", wg, got, False, H)
    g_rows = got[0]
    gs = [host_bytes(wg.recv[r].x, wg.recv[r].num_rows * H * 2).view(torch.bfloat16)
          .view(-1, H).clone() for r in range(WORLD)]
    # (direct mode, or hybrid with one GPU a node as on the one-GPU cluster: both have them)
    tg, _ = buf.combine_topk_grad(yfull, g_rows, hf)
    sync()
    etg = wf.topk_grad(yf, gs, RANK)
    report("top-k weight gradients = C reference (bitwise, %s)" % buf.transport,
           bool(torch.equal(tg.cpu(), etg)),
           "max |d| %.3g" % float((tg.cpu() - etg).abs().max()) if tg.numel() else "")

    # 6: the second hidden size in the same runtime
    w2 = World(WORLD, T, H2, K, E, ALIGN, False, 13, T)
    x2, idx2, wt2 = inputs_of(w2, RANK, False, H2)
    h2 = check_dispatch("H %d dispatch in the same runtime = C reference" % H2, w2,
                        buf.dispatch(x2, idx2, wt2, mode="cpu_sync"), False, H2)
    y2 = [rows_y(w2, r, 3, H2) for r in range(WORLD)]
    out2, _ = buf.combine(y2[RANK].to(DEVICE), h2)
    sync()
    report("H %d combine = C reference" % H2, bool(torch.equal(out2.cpu(),
                                                               w2.combine(y2, RANK, True))))

    # 7: autograd: the Functions' gradients are the calls they are made of (a stall is dumped:
    # at 2 and 4 ranks on the one-GPU cluster one rank's forward combine waited 30 s here)
    watch = stall_watch(12, "the autograd step")
    xa = x.detach().clone().requires_grad_(True)
    wa = wt.detach().clone().requires_grad_(True)  # its backward is the top-k gradients
    rx, ridx, rw, counts, ha = elasticep.autograd.dispatch(buf, xa, idx, wa, fp8=False)
    scale = torch.linspace(0.5, 1.5, H, device=DEVICE, dtype=torch.bfloat16)
    y = (rx * scale).contiguous()
    out = elasticep.autograd.combine(buf, y, wa, ha)
    G = torch.randn(out.shape, generator=torch.Generator(DEVICE).manual_seed(5 + RANK),
                    device=DEVICE).to(torch.bfloat16)
    (out.float() * G.float()).sum().backward()
    g_rows = buf.dispatch(G, idx, wa.detach(), handle=ha)[0]
    grad_y = (g_rows.float() * ha.row_weights()[:, None]).to(torch.bfloat16)
    grad_rx = (grad_y * scale).contiguous()
    ex_grad_x, _ = buf.combine(grad_rx, ha, weighted=False)
    ex_grad_w = buf.combine_topk_grad(y.detach(), g_rows, ha)[0]
    sync()
    report("autograd: x.grad = unweighted combine of the rows' gradients",
           xa.grad is not None and bool(torch.equal(xa.grad, ex_grad_x)))
    report("autograd: topk_weights.grad = top-k gradients of the cached dispatch",
           wa.grad is not None and bool(torch.equal(wa.grad, ex_grad_w)))
    xq = x.detach().clone().requires_grad_(True)
    rq = elasticep.autograd.dispatch(buf, xq, idx, wa.detach(), fp8=True)
    rq[0].float().sum().backward()
    report("autograd: fp8 forward dispatch, bf16 backward combine",
           xq.grad is not None and xq.grad.dtype == torch.bfloat16 and
           bool(torch.isfinite(xq.grad.float()).all()))
    watch.cancel()

    # 10: rank-major (layout="rank"): rows, local lanes, weights, counts and source offsets in
    # both modes, then the combine of one row a token, against the C reference (bitwise)
    wr = World(WORLD, T, H, K, E, ALIGN, False, 15, T - 2)
    xr, idxr, wtr = inputs_of(wr, RANK, False, H)
    rm = wr.rank_major()[RANK]
    R = rm.num_rows
    for mode in ("cpu_sync", "no_cpu_sync"):
        rx, ridx, rw, counts, hr, _ = buf.dispatch(xr, idxr, wtr, mode=mode, layout="rank")
        sync()
        offs = host_bytes(rm.expert_offsets, (WORLD + 1) * 8).view(torch.int64)
        ok = bool(torch.equal(rx[:R].contiguous().view(torch.uint8).cpu().flatten(),
                              host_bytes(rm.x, R * H * 2)))
        ok = ok and bool(torch.equal(ridx[:R].cpu(), host_bytes(rm.topk_idx, R * K * 4)
                                     .view(torch.int32).view(R, K)))
        ok = ok and bool(torch.equal(rw[:R].cpu(), host_bytes(rm.topk_weights, R * K * 4)
                                     .view(torch.float32).view(R, K)))
        ok = ok and bool(torch.equal(counts.cpu(), host_bytes(rm.expert_counts, rm.num_local * 4)
                                     .view(torch.int32)))
        ok = ok and hr.recv_offsets.cpu().long().tolist() == offs.tolist()
        report("rank-major %s dispatch = C reference" % mode, ok, "%d rows" % R)
    yr = [rows_y(wr, r, 4, H)[: wr.rank_major()[r].num_rows].contiguous() for r in range(WORLD)]
    yfull = torch.zeros((hr.num_rows, H), dtype=torch.bfloat16, device=DEVICE)
    yfull[:R] = yr[RANK].to(DEVICE)
    out, _ = buf.combine(yfull, hr)
    sync()
    report("rank-major combine = C reference (bitwise)",
           bool(torch.equal(out.cpu(), wr.combine_rank_major(yr, RANK))))

    # 9: errors become exceptions with the message
    try:
        buf.dispatch(x.float(), idx, wt)
        report("a float32 x raises InvalidArgument", False)
    except elasticep.InvalidArgument as e:
        report("a float32 x raises InvalidArgument", "x: dtype torch.float32" in str(e))
    try:
        buf.dispatch(x[:, :H2 + 8].contiguous(), idx, wt)
        report("an unreserved hidden raises InvalidArgument", False)
    except elasticep.InvalidArgument as e:
        report("an unreserved hidden raises InvalidArgument", "extra_hidden" in str(e))

    if DEVICE != "cuda":  # the stand-in run stops here: graphs and timings need the GPU
        buf.destroy()
        failed = results.count(False)
        print("RESULT rank %d: %d passed, %d failed" % (RANK, len(results) - failed, failed))
        return 1 if failed else 0

    # 8: a NO_CPU_SYNC pair in a CUDA graph, replays equal to the eager pair
    gx, gidx, gw = x.clone(), idx.clone(), wt.clone()
    r = buf.dispatch(gx, gidx, gw, mode="no_cpu_sync")
    hg = r[4]
    eager, _ = buf.combine(r[0], hg)
    sync()
    eager = eager.clone()
    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        with torch.cuda.graph(graph, stream=s):
            rg = buf.dispatch(gx, gidx, gw, handle=hg, mode="no_cpu_sync")
            gout, _ = buf.combine(rg[0], hg)
    torch.cuda.current_stream().wait_stream(s)
    same = True
    for _ in range(3):
        gout.fill_(0)
        graph.replay()
        sync()
        same = same and bool(torch.equal(gout, eager))
    report("CUDA graph of a no_cpu_sync pair: 3 replays = eager", same)

    # 10: the Python cost of a pair (no_cpu_sync, handle reused), eager and in the graph
    n = 200
    for _ in range(10):
        rr = buf.dispatch(gx, gidx, gw, handle=hg, mode="no_cpu_sync")
        buf.combine(rr[0], hg)
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        rr = buf.dispatch(gx, gidx, gw, handle=hg, mode="no_cpu_sync")
        buf.combine(rr[0], hg)
    t1 = time.perf_counter()
    sync()
    t2 = time.perf_counter()
    for _ in range(n):
        graph.replay()
    t3 = time.perf_counter()
    sync()
    t4 = time.perf_counter()
    print("OVERHEAD rank %d: T %d H %d K %d E %d: eager pair from Python %.1f us host (calls "
          "only), %.1f us wall; graph replay %.1f us host, %.1f us wall" %
          (RANK, T, H, K, E, (t1 - t0) / n * 1e6, (t2 - t0) / n * 1e6, (t3 - t2) / n * 1e6,
           (t4 - t2) / n * 1e6), flush=True)

    buf.destroy()
    failed = results.count(False)
    print("RESULT rank %d: %d passed, %d failed" % (RANK, len(results) - failed, failed),
          flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
