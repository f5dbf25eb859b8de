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
The weights' gradient flows through the combine only: recv_topk_weights is not differentiable.
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
        def forward(ctx, x, topk_weights, buf, topk_idx, fp8, mode):
            xin = quantize_fp8(x) if fp8 else x
            recv_x, ridx, rw, counts, handle, _ = buf.dispatch(xin, topk_idx, topk_weights,
                                                               mode=mode)
            if fp8:
                recv_x = dequantize_fp8(recv_x[0], recv_x[1])
            ctx.buf, ctx.handle = buf, handle
            ctx.mark_non_differentiable(ridx, rw, counts)
            return recv_x, ridx, rw, counts, handle

        @staticmethod
        def backward(ctx, grad_rows, *unused):
            g = grad_rows.to(t.bfloat16).contiguous()
            grad_x, _ = ctx.buf.combine(g, ctx.handle, weighted=False)
            return grad_x, None, None, None, None, None

    class Combine(t.autograd.Function):
        @staticmethod
        def forward(ctx, y, topk_weights, buf, handle):
            if topk_weights.data_ptr() != handle.topk_weights.data_ptr():
                raise ValueError("combine: topk_weights must be the tensor dispatched with the "
                                 "handle (the combine weighs with the dispatched copies)")
            out, _ = buf.combine(y, handle, weighted=True)
            ctx.save_for_backward(y)
            ctx.buf, ctx.handle = buf, handle
            return out

        @staticmethod
        def backward(ctx, grad_out):
            (y,) = ctx.saved_tensors
            buf, h = ctx.buf, ctx.handle
            g = grad_out.to(t.bfloat16).contiguous()
            g_rows = buf.dispatch(g, h.topk_idx, h.topk_weights, handle=h, mode="cached")[0]
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


def dispatch(buf, x, topk_idx, topk_weights, fp8=False, mode="cpu_sync"):
    """Differentiable dispatch: (recv_x bf16, recv_topk_idx, recv_topk_weights, recv_counts,
    handle); gradients flow to x."""
    return _get()[0].apply(x, topk_weights, buf, topk_idx, fp8, mode)


def combine(buf, y, topk_weights, handle):
    """Differentiable weighted combine: out [T, H] bf16; gradients flow to y and topk_weights."""
    return _get()[1].apply(y, topk_weights, buf, handle)
