"""Argument checks made before any launch, on anything that looks like a torch tensor.

They read only .dtype (its str(): "torch.bfloat16"), .shape, .is_contiguous(), .data_ptr() and
.device.type, so the tests exercise them without torch (tests/test_checks.py, fake tensors).
Each raises errors.InvalidArgument naming the argument, as libeep's own checks do.
"""
from . import _lib
from .errors import InvalidArgument

BF16 = "torch.bfloat16"
FP8 = "torch.float8_e4m3fn"
F32 = "torch.float32"
DEVICE_TYPE = "cuda"  # tests/test_buffer_mock.py runs the Buffer on CPU tensors
I32 = "torch.int32"
I64 = "torch.int64"


def _bad(call, arg, why):
    raise InvalidArgument("%s: invalid argument %s: %s" % (call, arg, why), -1, "EEP_ERR_INVALID_ARG")


def tensor(call, arg, t, dtypes, shape, allow_empty_null=True):
    """@t: a CUDA tensor of one of @dtypes (strings), contiguous, 16-byte aligned, of @shape
    (ints, or None for any size in that dimension).  Returns its dtype string."""
    if t is None:
        _bad(call, arg, "None")
    dt = str(getattr(t, "dtype", None))
    if dt not in dtypes:
        _bad(call, arg, "dtype %s, expected %s" % (dt, " or ".join(dtypes)))
    got = tuple(int(s) for s in t.shape)
    if len(got) != len(shape) or any(w is not None and g != w for g, w in zip(got, shape)):
        _bad(call, arg, "shape %s, expected %s" % (list(got), ["*" if w is None else w for w in shape]))
    dev = getattr(getattr(t, "device", None), "type", None)
    if dev != DEVICE_TYPE:
        _bad(call, arg, "on device %s, expected a CUDA tensor" % dev)
    if not t.is_contiguous():
        _bad(call, arg, "not contiguous (call .contiguous())")
    numel = 1
    for g in got:
        numel *= g
    ptr = int(t.data_ptr())
    if numel == 0 and allow_empty_null:
        return dt
    if ptr % _lib.PTR_ALIGN != 0:
        _bad(call, arg, "data pointer 0x%x is not %d-byte aligned (a view at an offset?)"
             % (ptr, _lib.PTR_ALIGN))
    return dt


def dispatch_inputs(x, topk_idx, topk_weights, hidden, num_topk, max_tokens):
    """Check a dispatch's inputs; x is a tensor (bf16) or a pair (fp8 e4m3, float32 scales).
    Returns (dtype code, scales or None, index dtype code, num_tokens)."""
    call = "dispatch"
    scales = None
    if isinstance(x, (tuple, list)):
        if len(x) != 2:
            _bad(call, "x", "a pair (fp8 x, scales) expected, got %d items" % len(x))
        x, scales = x
        tensor(call, "x", x, [FP8], [None, hidden])
        n = int(x.shape[0])
        if hidden % _lib.FP8_BLOCK != 0:
            _bad(call, "hidden", "%d is not a multiple of %d (one fp8 scale per %d channels)"
                 % (hidden, _lib.FP8_BLOCK, _lib.FP8_BLOCK))
        tensor(call, "x_scales", scales, [F32], [n, hidden // _lib.FP8_BLOCK])
        code = _lib.DTYPE_FP8_E4M3
    else:
        dt = tensor(call, "x", x, [BF16, FP8], [None, hidden])
        if dt == FP8:
            _bad(call, "x", "fp8 input needs its scales: pass (x, x_scales)")
        n = int(x.shape[0])
        code = _lib.DTYPE_BF16
    if n > max_tokens:
        _bad(call, "x", "%d tokens, more than num_max_tokens_per_rank = %d" % (n, max_tokens))
    idt = tensor(call, "topk_idx", topk_idx, [I64, I32], [n, num_topk])
    tensor(call, "topk_weights", topk_weights, [F32], [n, num_topk])
    return code, scales, (_lib.INDEX_INT64 if idt == I64 else _lib.INDEX_INT32), n


def mode(mode, handle):
    call = "dispatch"
    if mode is None:
        return _lib.MODE_CACHED if handle is not None else _lib.MODE_NO_CPU_SYNC
    if mode not in _lib.MODES:
        _bad(call, "mode", "%r, expected one of %s" % (mode, ", ".join(sorted(_lib.MODES))))
    code = _lib.MODES[mode]
    if code == _lib.MODE_CACHED and handle is None:
        _bad(call, "handle", "cached mode needs the handle of an earlier dispatch")
    return code


def layout(layout, handle, mode_code):
    """The dispatch's layout code: "expert" (default) or "rank"; a cached dispatch takes its
    handle's (and refuses another)."""
    call = "dispatch"
    cached = mode_code == _lib.MODE_CACHED
    if layout is None:
        return handle.layout_code if cached else _lib.LAYOUT_EXPERT_MAJOR
    if layout not in _lib.LAYOUTS:
        _bad(call, "layout", "%r, expected \"expert\" or \"rank\"" % (layout,))
    code = _lib.LAYOUTS[layout]
    if cached and code != handle.layout_code:
        _bad(call, "layout", "%r, but a cached dispatch reuses its handle's layout (%s-major)"
             % (layout, "rank" if handle.layout_code == _lib.LAYOUT_RANK_MAJOR else "expert"))
    return code


def dead_mask(dead_ranks, world, rank):
    """The world ranks a dispatch treats as dead (degraded mode, include/eep/ep.h) as the C
    mask: each an int in [0, world), not this rank's own."""
    call = "dispatch"
    if dead_ranks is None:
        return 0
    try:
        ranks = list(dead_ranks)
    except TypeError:
        _bad(call, "dead_ranks", "%r, expected an iterable of world ranks" % (dead_ranks,))
    mask = 0
    for r in ranks:
        if isinstance(r, bool) or not isinstance(r, int):
            _bad(call, "dead_ranks", "%r is not a rank (an int)" % (r,))
        if r < 0 or r >= world or r >= 64:
            _bad(call, "dead_ranks", "rank %d outside [0, %d)" % (r, min(world, 64)))
        if r == rank:
            _bad(call, "dead_ranks", "rank %d is this rank's own" % r)
        mask |= 1 << r
    return mask


def num_sms(n):
    if n is None:
        return 0
    if not isinstance(n, int) or n < 0 or n > 1024:
        _bad("dispatch", "num_sms", "%r, expected 0 (the model) or a positive SM count" % (n,))
    return n


def shape_args(max_tokens, hidden, num_topk, num_experts, alignment):
    call = "Buffer"
    for name, v in (("num_max_tokens_per_rank", max_tokens), ("hidden", hidden),
                    ("num_topk", num_topk), ("num_experts", num_experts),
                    ("expert_alignment", alignment)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            _bad(call, name, "%r, expected a positive int" % (v,))
    if hidden % 8 != 0:
        _bad(call, "hidden", "%d is not a multiple of 8 (16 bytes of bf16)" % hidden)
    if num_topk > _lib.MAX_TOPK:
        _bad(call, "num_topk", "%d is more than %d" % (num_topk, _lib.MAX_TOPK))
    if num_experts > _lib.MAX_EXPERTS or num_topk > num_experts:
        _bad(call, "num_experts", "%d, expected num_topk <= num_experts <= %d"
             % (num_experts, _lib.MAX_EXPERTS))
    if alignment & (alignment - 1):
        _bad(call, "expert_alignment", "%d is not a power of two" % alignment)


def combine_rows(call, arg, y, rows, hidden):
    tensor(call, arg, y, [BF16], [rows, hidden])


def hidden_of(x, hiddens):
    """The hidden size of a dispatch's x (a tensor or an (x, scales) pair), one of @hiddens."""
    xt = x[0] if isinstance(x, (tuple, list)) and len(x) == 2 else x
    shape = getattr(xt, "shape", None)
    if shape is None or len(shape) != 2:
        _bad("dispatch", "x", "a 2-D tensor [num_tokens, hidden] expected")
    h = int(shape[1])
    if h not in hiddens:
        _bad("dispatch", "x", "hidden %d, the buffer was made for %s (pass extra_hidden=)"
             % (h, " or ".join(str(v) for v in hiddens)))
    return h
