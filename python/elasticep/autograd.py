"""torch.autograd.Functions over a Buffer: dispatch and combine whose backward passes are the
other call (DeepEP's mapping, with the weights applied inside the combine):

    dispatch forward   x -> rows (fp8 on the wire when fp8=True: quantised here, dequantised
                       on arrival, a straight-through estimate of the quantisation)
    dispatch backward  grad rows -> grad x: an unweighted combine
    combine forward    out[t] = sum_k w[t][k] * y[row(t, k)]  (a weighted combine)
    combine backward   grad out -> rows: a bf16 cached dispatch on the forward's handle (also
                       when the forward dispatch was fp8); grad y[row] = w_row * that row;
                       grad w[t][k] = dot(y[row], that row): the top-k weight gradients
                       (combine_topk_grad)
Expert-major (the default): the weights' gradient flows through the combine only;
recv_topk_weights is not differentiable.

Rank-major (layout="rank": a row per received token; the caller weighs and sums its local experts
with recv_topk_weights itself):
    dispatch backward  grad rows -> grad x (an unweighted combine), and grad recv_topk_weights
                       -> grad topk_weights: each fp32 lane split into three bf16 (hi, mid, lo:
                       24 bits of mantissa), moved back by an unweighted combine of 3 K channels
                       (a lane is non-zero on the one rank that holds its expert, so the sum over
                       ranks is exact) and added up again
    combine forward    out[t] = sum over ranks of y[row(t)]
    combine backward   grad out -> rows: a bf16 cached dispatch on the handle (grad y = that row)
"""
from .buffer import torch


def quantize_fp8(x):
    """bf16 [T, H] -> (fp8 e4m3 [T, H], float32 scales [T, H / 128]): per 128 channels,
    scale = amax / 448 (1 for an all-zero block), q = x / scale (tests/common/ep_reference.c)."""
    t = torch()
    T, H = x.shape
    b = x.float().view(T, H // 128, 128)
    amax = b.abs().amax(dim=-1)
    scale = t.where(amax > 0, amax / 448.0, t.ones_like(amax))
    q = (b / scale[..., None]).view(T, H).to(t.float8_e4m3fn)
    return q.contiguous(), scale.contiguous()


def dequantize_fp8(q, scales):
    R, H = q.shape
    return (q.float().view(R, H // 128, 128) * scales[..., None]).view(R, H).to(torch().bfloat16)


def _function_classes():
    t = torch()

    class Dispatch(t.autograd.Function):
        @staticmethod
        def forward(ctx, x, topk_weights, buf, topk_idx, fp8, mode, layout):
            xin = quantize_fp8(x) if fp8 else x
            recv_x, ridx, rw, counts, handle, _ = buf.dispatch(xin, topk_idx, topk_weights,
                                                               mode=mode, layout=layout)
            if fp8:
                recv_x = dequantize_fp8(recv_x[0], recv_x[1])
            ctx.buf, ctx.handle = buf, handle
            if layout == "rank":  # the caller weighs its rows: the weights' path is this one
                ctx.mark_non_differentiable(ridx, counts)
            else:
                ctx.mark_non_differentiable(ridx, rw, counts)
            return recv_x, ridx, rw, counts, handle

        @staticmethod
        def backward(ctx, grad_rows, grad_ridx, grad_rw, *unused):
            g = grad_rows.to(t.bfloat16).contiguous()
            grad_x, _ = ctx.buf.combine(g, ctx.handle, weighted=False)
            grad_w = None
            if ctx.handle.layout == "rank" and ctx.needs_input_grad[1]:
                grad_w = lanes_back(ctx.buf, ctx.handle, grad_rw)
            return grad_x, grad_w, None, None, None, None, None

    class Combine(t.autograd.Function):
        @staticmethod
        def forward(ctx, y, topk_weights, buf, handle):
            if handle.layout == "rank":  # rows the caller weighed: summed as they are
                out, _ = buf.combine(y, handle)
                ctx.buf, ctx.handle = buf, handle
                return out
            if topk_weights.data_ptr() != handle.topk_weights.data_ptr():
                raise ValueError("combine: topk_weights must be the tensor dispatched with the "
                                 "handle (the combine weighs with the dispatched copies)")
            out, _ = buf.combine(y, handle, weighted=True)
            ctx.save_for_backward(y)
            ctx.buf, ctx.handle = buf, handle
            return out

        @staticmethod
        def backward(ctx, grad_out):
            buf, h = ctx.buf, ctx.handle
            g = grad_out.to(t.bfloat16).contiguous()
            g_rows = buf.dispatch(g, h.topk_idx, h.topk_weights, handle=h, mode="cached")[0]
            if h.layout == "rank":
                return g_rows, None, None, None
            (y,) = ctx.saved_tensors
            grad_y = (g_rows.float() * h.row_weights()[:, None]).to(t.bfloat16)
            grad_w = None  # only when asked (a forwarding hybrid runtime has no top-k gradients)
            if ctx.needs_input_grad[1]:
                grad_w, _ = buf.combine_topk_grad(y, g_rows, h)
            return grad_y, grad_w, None, None

    return Dispatch, Combine


_classes = None


def _get():
    global _classes
    if _classes is None:
        _classes = _function_classes()
    return _classes


def lanes_back(buf, handle, g):
    """grad recv_topk_weights of a rank-major handle ([rows, K] fp32) -> grad topk_weights
    ([T, K] fp32) on the tokens' ranks, to 1 ulp of fp32: an unweighted combine of each lane as
    three bf16 parts (a collective: every rank calls it for the same dispatch)."""
    t = torch()
    K = g.shape[1]
    g = t.where(handle.recv_topk_idx >= 0, g.float(), t.zeros((), dtype=t.float32,
                                                              device=g.device))
    hi = g.to(t.bfloat16)
    r1 = g - hi.float()
    mid = r1.to(t.bfloat16)
    lo = (r1 - mid.float()).to(t.bfloat16)
    C = (3 * K + 7) // 8 * 8  # channels: a multiple of 8 (16 bytes of bf16)
    rows = t.zeros((g.shape[0], C), dtype=t.bfloat16, device=g.device)
    rows[:, :K], rows[:, K:2 * K], rows[:, 2 * K:3 * K] = hi, mid, lo
    out, _ = buf.combine(rows, handle, weighted=False)
    o = out.float()
    return (o[:, :K] + o[:, K:2 * K]) + o[:, 2 * K:3 * K]


def dispatch(buf, x, topk_idx, topk_weights, fp8=False, mode="cpu_sync", layout="expert"):
    """Differentiable dispatch: (recv_x bf16, recv_topk_idx, recv_topk_weights, recv_counts,
    handle); gradients flow to x, and with layout="rank" from recv_topk_weights to
    topk_weights."""
    return _get()[0].apply(x, topk_weights, buf, topk_idx, fp8, mode, layout)


def combine(buf, y, topk_weights, handle):
    """Differentiable combine: out [T, H] bf16.  Expert-major: weighted by topk_weights (the
    tensor dispatched with the handle), gradients to y and topk_weights; rank-major: the rows
    summed as they are (the caller weighed them), gradients to y (topk_weights is not used)."""
    return _get()[1].apply(y, topk_weights, buf, handle)
