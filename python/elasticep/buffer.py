"""Buffer: one libeep runtime, DeepEP-shaped dispatch and combine on torch tensors.

Outputs come from torch's allocator on the current device; calls run on the current stream (or,
with comm_stream=True, on the buffer's own stream after it waited for the current one: then
wait for the returned event before using the outputs).  A NO_CPU_SYNC dispatch and its combine
can be captured in a CUDA graph once they ran eagerly (the kernels are compiled then) and the
dispatch reuses its handle (handle=h, mode="no_cpu_sync": refilled in place, no allocation).
"""
import ctypes
import os
import socket

from . import _checks, _lib
from .errors import InvalidArgument, NoDevice
from .membership import Membership, MembershipInfoT, info_from_struct

_torch = None


def torch():
    """torch, imported on first use: the package imports (and its CPU checks run) without it."""
    global _torch
    if _torch is None:
        try:
            import torch as t
        except ImportError as e:
            raise ImportError("elasticep.Buffer needs torch (pip install torch): %s" % e) from e
        _torch = t
    return _torch


def window_size(world, shapes):
    """Bytes of window a runtime of @world ranks needs for @shapes: (max_tokens_per_rank,
    hidden, num_topk, num_experts, "bf16" | "fp8") tuples.  No GPU needed."""
    arr = (_lib.ShapeDesc * len(shapes))()
    for i, (t, h, k, e, dt) in enumerate(shapes):
        arr[i] = _lib.ShapeDesc(t, h, k, e, _dtype_code(dt))
    out = ctypes.c_size_t(0)
    _lib.check(_lib.lib().eep_ep_window_size(world, arr, len(shapes), ctypes.byref(out)),
               "window_size")
    return out.value


def _membership_args(group_or_bootstrap, membership, max_world, join_timeout_ms):
    """Buffer(membership=...)'s arguments, checked before anything is made."""
    if not isinstance(membership, Membership):
        raise InvalidArgument("Buffer: invalid argument membership: %r, expected an "
                              "elasticep.Membership" % (membership,), -1, "EEP_ERR_INVALID_ARG")
    if group_or_bootstrap is not None:
        raise InvalidArgument("Buffer: invalid argument group_or_bootstrap: with membership= the "
                              "views give rank and world; pass None", -1, "EEP_ERR_INVALID_ARG")
    if not isinstance(max_world, int) or not 1 <= max_world <= _lib.MAX_RANKS:
        raise InvalidArgument("Buffer: invalid argument max_world: %r, expected 1..%d with "
                              "membership= (the most ranks a view may hold: it sizes the window)"
                              % (max_world, _lib.MAX_RANKS), -1, "EEP_ERR_INVALID_ARG")
    if not isinstance(join_timeout_ms, int) or join_timeout_ms < 0:
        raise InvalidArgument("Buffer: invalid argument join_timeout_ms: %r, expected an int >= 0"
                              % (join_timeout_ms,), -1, "EEP_ERR_INVALID_ARG")


def _dtype_code(dt):
    if dt in ("bf16", "bfloat16"):
        return _lib.DTYPE_BF16
    if dt in ("fp8", "fp8_e4m3", "float8_e4m3fn"):
        return _lib.DTYPE_FP8_E4M3
    raise InvalidArgument("invalid argument dtype: %r, expected \"bf16\" or \"fp8\"" % (dt,),
                          -1, "EEP_ERR_INVALID_ARG")


class Handle:
    """A dispatch's layout (eep_ep_handle_t) and what its combines and backward passes need."""

    def __init__(self, buf):
        self.buf = buf
        self.ptr = ctypes.c_void_p(None)
        self.num_tokens = 0
        self.num_rows = 0  # rows of the outputs (exact in cpu_sync, worst case otherwise)
        self.host_counts = None  # cpu_sync: real rows per local expert (list)
        self.recv_counts = self.recv_offsets = None  # GPU int32 [El], [El + 1]
        self.recv_topk_idx = self.recv_topk_weights = None
        self.topk_idx = self.topk_weights = None  # the inputs (cached dispatch of gradients)
        self.hidden = 0
        self.mode = None
        self.layout_code = _lib.LAYOUT_EXPERT_MAJOR
        self.dropped_topk = self.num_dropped = None  # degraded mode's report (GPU), if asked

    @property
    def layout(self):
        """"expert" (a row per token and local expert, grouped by expert) or "rank" (a row per
        received token; recv_offsets [world + 1]: the rows before each source)."""
        return "rank" if self.layout_code == _lib.LAYOUT_RANK_MAJOR else "expert"

    def row_weights(self):
        """[rows] fp32: each received row's own top-k weight (0 on padding rows); expert-major
        handles only (a rank-major row holds a token's every local lane: recv_topk_weights)."""
        t = torch()
        if self.layout_code == _lib.LAYOUT_RANK_MAJOR:
            raise InvalidArgument("row_weights: a rank-major handle has a row per token, not per "
                                  "expert: its weights are recv_topk_weights", -1,
                                  "EEP_ERR_INVALID_ARG")
        e = t.searchsorted(self.recv_offsets[1:].contiguous(),
                           t.arange(self.num_rows, device=self.recv_offsets.device,
                                    dtype=t.int32), right=True)
        own = self.recv_topk_idx == e.to(t.int32)[:, None]
        return (self.recv_topk_weights * own).sum(dim=1)

    def __del__(self):
        if self.ptr and self.buf is not None:
            self.buf._retire(self.ptr.value)
            self.ptr = ctypes.c_void_p(None)


class Buffer:
    """One rank's ElasticEP runtime, sized for the shapes it will serve.

    group_or_bootstrap: None or "env" (EEP_BOOTSTRAP, EEP_RANK, EEP_WORLD_SIZE: what
    scripts/one-gpu-cluster.sh sets), "tcp:HOST:PORT" / "file:DIR", or a torch.distributed
    process group (rank 0 picks a TCP port and broadcasts it).  dtypes: the forward dispatch
    dtypes ("bf16", "fp8"); bf16 is always reserved too (backward).  extra_hidden: more hidden
    sizes (other layer kinds) that share this runtime.
    """

    def __init__(self, group_or_bootstrap=None, num_max_tokens_per_rank=128, hidden=1024,
                 num_topk=8, num_experts=64, *, dtypes=("bf16",), extra_hidden=(),
                 expert_alignment=1, num_sms=0, comm_stream=False, window_bytes=0,
                 timeout_ms=0, membership=None, max_world=0, join_timeout_ms=0):
        _checks.shape_args(num_max_tokens_per_rank, hidden, num_topk, num_experts,
                           expert_alignment)
        if membership is not None:
            _membership_args(group_or_bootstrap, membership, max_world, join_timeout_ms)
        t = torch()
        if not t.cuda.is_available():
            raise NoDevice("Buffer: no CUDA device is visible to torch (EEP_ERR_NO_DEVICE): "
                           "ElasticEP needs a GPU", -80, "EEP_ERR_NO_DEVICE")
        self._lib = _lib.lib()
        self.max_tokens = num_max_tokens_per_rank
        self.hidden = hidden
        self.hiddens = [hidden] + [int(h) for h in extra_hidden]
        self.num_topk = num_topk
        self.num_experts = num_experts
        self.alignment = expert_alignment
        self.num_sms = _checks.num_sms(num_sms)
        self.device = t.device("cuda", t.cuda.current_device())
        self._retired = []
        self._rt = ctypes.c_void_p(None)
        self._bs = ctypes.c_void_p(None)
        self.membership = membership
        self.info = None  # the last MembershipInfo (with a membership)
        if membership is None:
            self._bootstrap(group_or_bootstrap)
            self.rank = self._lib.eep_bootstrap_rank(self._bs)
            self.world = self._lib.eep_bootstrap_nranks(self._bs)
        else:  # rank and world come with each view (membership_sync)
            self.rank, self.world = -1, max_world
        if membership is None and num_experts % self.world:
            raise InvalidArgument("Buffer: invalid argument num_experts: %d is not divisible by "
                                  "%d ranks" % (num_experts, self.world), -1, "EEP_ERR_INVALID_ARG")
        self.num_local = num_experts // self.world if membership is None else 0
        codes = sorted({_dtype_code(d) for d in dtypes} | {_lib.DTYPE_BF16})
        shapes = [(num_max_tokens_per_rank, h, num_topk, num_experts,
                   "fp8" if c == _lib.DTYPE_FP8_E4M3 else "bf16")
                  for h in [hidden] + list(extra_hidden) for c in codes]
        self.window_bytes = window_bytes or window_size(self.world, shapes)
        p = _lib.RuntimeParams(ctypes.sizeof(_lib.RuntimeParams), self._bs.value, None,
                               self.device.index, self.window_bytes, timeout_ms, 0,
                               membership.provider() if membership is not None else None,
                               join_timeout_ms)
        _lib.check(self._lib.eep_runtime_create(ctypes.byref(p), ctypes.byref(self._rt)),
                   "Buffer: eep_runtime_create")
        self._shapes = (_lib.ShapeDesc * len(shapes))()
        for i, (tk, h, k, e, dt) in enumerate(shapes):
            self._shapes[i] = _lib.ShapeDesc(tk, h, k, e, _dtype_code(dt))
        if membership is None:
            self._reserve()
            self.rows_max = self._lib.eep_ep_recv_rows_max(self.world, num_max_tokens_per_rank,
                                                           num_topk, num_experts,
                                                           expert_alignment)
        else:  # the runtime applied the first view: take it (rank, world, placement)
            self.membership_sync(_first=True)
        self.comm_stream = t.cuda.Stream(device=self.device) if comm_stream else None

    def _bootstrap(self, g):
        bp = _lib.BootstrapParams(ctypes.sizeof(_lib.BootstrapParams), _lib.BOOTSTRAP_ENV, -1, 0,
                                  None, None, 0)
        if g is None or g == "env":
            pass
        elif isinstance(g, str) and g.startswith("tcp:"):
            bp.kind, bp.address = _lib.BOOTSTRAP_TCP, g[4:].encode()
            bp.rank, bp.nranks = int(os.environ["EEP_RANK"]), int(os.environ["EEP_WORLD_SIZE"])
        elif isinstance(g, str) and g.startswith("file:"):
            bp.kind, bp.path = _lib.BOOTSTRAP_FILE, g[5:].encode()
            bp.rank, bp.nranks = int(os.environ["EEP_RANK"]), int(os.environ["EEP_WORLD_SIZE"])
        else:  # a torch.distributed process group
            dist = torch().distributed
            rank, world = dist.get_rank(g), dist.get_world_size(g)
            addr = [None]
            if rank == 0:
                s = socket.socket()
                s.bind(("", 0))
                port = s.getsockname()[1]
                s.close()
                addr[0] = "%s:%d" % (os.environ.get("MASTER_ADDR", "127.0.0.1"), port)
            dist.broadcast_object_list(addr, src=dist.get_global_rank(g, 0), group=g)
            bp.kind, bp.address, bp.rank, bp.nranks = (_lib.BOOTSTRAP_TCP, addr[0].encode(), rank,
                                                       world)
        self._bp_keep = bp
        _lib.check(self._lib.eep_bootstrap_create(ctypes.byref(bp), ctypes.byref(self._bs)),
                   "Buffer: eep_bootstrap_create")

    # ---- streams, handles ------------------------------------------------------------------
    def _stream(self):
        t = torch()
        cur = t.cuda.current_stream(self.device)
        if self.comm_stream is None:
            return cur
        self.comm_stream.wait_stream(cur)
        return self.comm_stream

    def _event(self, s):
        """An event recorded on @s after the call; None while a CUDA graph is being captured."""
        if torch().cuda.is_current_stream_capturing():
            return None
        ev = torch().cuda.Event()
        ev.record(s)
        return ev

    def _retire(self, ptr):
        """A dropped handle: destroyed once the work queued so far has finished."""
        try:
            ev = self._event(torch().cuda.current_stream(self.device))
        except Exception:  # interpreter shutdown
            ev = None
        self._retired.append((ptr, ev))

    def _reap(self):
        if torch().cuda.is_current_stream_capturing():
            return
        keep = []
        for ptr, ev in self._retired:
            if ev is None or ev.query():
                self._lib.eep_ep_handle_destroy(ctypes.c_void_p(ptr))
            else:
                keep.append((ptr, ev))
        self._retired = keep

    def _check_open(self, call):
        if not self._rt:
            raise InvalidArgument("%s: the buffer is destroyed" % call, -1, "EEP_ERR_INVALID_ARG")

    # ---- dispatch ----------------------------------------------------------------------------
    def dispatch(self, x, topk_idx, topk_weights, handle=None, mode=None, num_sms=None,
                 dead_ranks=None, report_dropped=False, layout=None):
        """x: bf16 [T, hidden] or (fp8 e4m3 [T, hidden], float32 scales [T, hidden / 128]);
        topk_idx int64/int32 [T, K] (-1: none); topk_weights float32 [T, K].  mode: "cpu_sync"
        (exact-size outputs, host counts in handle.host_counts), "no_cpu_sync" (worst-case rows,
        the real counts on the GPU), "cached" (the default with a handle: its layout reused).
        dead_ranks: world ranks to treat as dead (degraded mode: no wait on them, their
        experts' lanes dropped; every live rank passes the same set), beyond those the runtime
        marks dead itself.  With dead_ranks or report_dropped, handle.dropped_topk (uint8
        [T, K], 1 where the lane's expert is on a dead rank) and handle.num_dropped (int32 [1])
        are filled on the GPU.  layout: "expert" (the default: a row per token and local expert,
        grouped by expert, padded to expert_alignment) or "rank" (DeepEP's normal layout, for
        callers that permute themselves: a row per received token, sources ascending, then
        tokens; recv_topk_idx holds the token's local expert ids, -1 elsewhere; recv_counts
        the tokens per local expert; handle.recv_offsets [world + 1] the rows before each
        source); a cached dispatch takes its handle's.  Returns (recv_x, recv_topk_idx,
        recv_topk_weights, recv_counts, handle, event); recv_x is (recv_q, recv_scales) for fp8
        input."""
        t = torch()
        self._check_open("dispatch")
        hidden = _checks.hidden_of(x, self.hiddens)
        code, scales, idt, n = _checks.dispatch_inputs(x, topk_idx, topk_weights, hidden,
                                                       self.num_topk, self.max_tokens)
        xt = x[0] if isinstance(x, (tuple, list)) else x
        m = _checks.mode(mode, handle)
        sms = _checks.num_sms(num_sms) if num_sms is not None else self.num_sms
        dmask = _checks.dead_mask(dead_ranks, self.world, self.rank)
        if handle is not None and (not isinstance(handle, Handle) or handle.buf is not self):
            raise InvalidArgument("dispatch: invalid argument handle: not a handle of this buffer",
                                  -1, "EEP_ERR_INVALID_ARG")
        lay = _checks.layout(layout, handle, m)
        if m == _lib.MODE_CACHED and handle.num_tokens != n:
            raise InvalidArgument("dispatch: invalid argument x: %d tokens, the handle's dispatch "
                                  "had %d" % (n, handle.num_tokens), -1, "EEP_ERR_INVALID_ARG")
        self._reap()
        El, K = self.num_local, self.num_topk
        s = self._stream()
        if self.comm_stream is not None:
            for inp in (xt, scales, topk_idx, topk_weights):
                if inp is not None:
                    inp.record_stream(s)
        h = handle if handle is not None else Handle(self)
        a = _lib.DispatchArgs()
        a.size = ctypes.sizeof(a)
        a.x = xt.data_ptr() or None
        a.x_scales = scales.data_ptr() if scales is not None else None
        a.dtype = code
        a.topk_idx, a.topk_idx_dtype = topk_idx.data_ptr() or None, idt
        a.topk_weights = topk_weights.data_ptr() or None
        a.num_tokens, a.hidden, a.num_topk, a.num_experts = n, hidden, K, self.num_experts
        a.expert_alignment, a.max_tokens_per_rank = self.alignment, self.max_tokens
        a.mode, a.num_sms = m, sms
        dev = self.device
        a.dead_mask = dmask
        dropped = ndropped = None
        if dead_ranks is not None or report_dropped:
            dropped = t.empty((n, K), dtype=t.uint8, device=dev)
            ndropped = t.empty(1, dtype=t.int32, device=dev)
            a.dropped_topk = dropped.data_ptr() or None
            a.num_dropped = ndropped.data_ptr()
        counts = t.empty(El, dtype=t.int32, device=dev)
        ranked = lay == _lib.LAYOUT_RANK_MAJOR
        offsets = t.empty((self.world if ranked else El) + 1, dtype=t.int32, device=dev)
        a.layout = lay
        a.recv_expert_counts, a.recv_expert_offsets = counts.data_ptr(), offsets.data_ptr()
        xdt = t.bfloat16 if code == _lib.DTYPE_BF16 else t.float8_e4m3fn
        allocs = {}
        rows = ctypes.c_int64(0)
        host = (ctypes.c_int32 * El)()
        a.num_recv_rows_p = ctypes.addressof(rows)
        if m == _lib.MODE_CPU_SYNC:
            def alloc(arg, nbytes, what):
                try:
                    b = t.empty(max(int(nbytes), 16), dtype=t.uint8, device=dev)
                except Exception:
                    return None
                allocs[what.decode()] = b
                return b.data_ptr()
            cb = _lib.ALLOC_FUNC(alloc)
            a.alloc = cb
            a.host_expert_counts = ctypes.addressof(host)
        else:  # rank-major: at most a row per token of every rank (eep/ep.h)
            R = self.world * self.max_tokens if ranked else self.rows_max
            allocs["recv_x"] = t.empty((R, hidden), dtype=xdt, device=dev)
            allocs["recv_topk_idx"] = t.empty((R, K), dtype=t.int32, device=dev)
            allocs["recv_topk_weights"] = t.empty((R, K), dtype=t.float32, device=dev)
            a.recv_capacity = R
            a.recv_x = allocs["recv_x"].data_ptr()
            a.recv_topk_idx = allocs["recv_topk_idx"].data_ptr()
            a.recv_topk_weights = allocs["recv_topk_weights"].data_ptr()
            if code == _lib.DTYPE_FP8_E4M3:
                allocs["recv_x_scales"] = t.empty((R, hidden // _lib.FP8_BLOCK),
                                                  dtype=t.float32, device=dev)
                a.recv_x_scales = allocs["recv_x_scales"].data_ptr()
        _lib.check(self._lib.eep_dispatch(self._rt, ctypes.byref(a), ctypes.byref(h.ptr),
                                          ctypes.c_void_p(s.cuda_stream)), "dispatch")
        R = int(rows.value)

        def view(name, dtype, cols):
            b = allocs[name]
            if b.dtype == t.uint8:
                b = b[: R * cols * t.empty((), dtype=dtype).element_size()].view(dtype)
                return b.view(R, cols)
            # cached: the handle's rows (exact when its dispatch was cpu_sync; the kernel writes
            # no row past them), though the call needs worst-case capacity
            return b[: h.num_rows] if m == _lib.MODE_CACHED else b
        recv_x = view("recv_x", xdt, hidden)
        recv_idx = view("recv_topk_idx", t.int32, K)
        recv_w = view("recv_topk_weights", t.float32, K)
        if code == _lib.DTYPE_FP8_E4M3:
            recv_x = (recv_x, view("recv_x_scales", t.float32, hidden // _lib.FP8_BLOCK))
        if m != _lib.MODE_CACHED:
            h.num_tokens, h.num_rows, h.mode, h.hidden, h.layout_code = n, R, m, hidden, lay
            h.recv_counts, h.recv_offsets = counts, offsets
            h.recv_topk_idx, h.recv_topk_weights = recv_idx, recv_w
            h.topk_idx, h.topk_weights = topk_idx, topk_weights
            h.host_counts = list(host) if m == _lib.MODE_CPU_SYNC else None
        h.dropped_topk, h.num_dropped = dropped, ndropped
        return recv_x, recv_idx, recv_w, h.recv_counts, h, self._event(s)

    # ---- combine -----------------------------------------------------------------------------
    def _combine(self, y, handle, weighted, y_grad, want_out):
        t = torch()
        self._check_open("combine")
        if not isinstance(handle, Handle) or handle.buf is not self or not handle.ptr:
            raise InvalidArgument("combine: invalid argument handle: not a live handle of this "
                                  "buffer", -1, "EEP_ERR_INVALID_ARG")
        hidden = int(y.shape[1]) if y is not None and len(y.shape) == 2 else -1
        _checks.combine_rows("combine", "y", y, handle.num_rows, hidden)
        if y_grad is not None:
            _checks.combine_rows("combine", "y_grad", y_grad, handle.num_rows, hidden)
        self._reap()
        s = self._stream()
        T = handle.num_tokens
        out = t.empty((max(T, 1), hidden), dtype=t.bfloat16, device=self.device) if want_out else None
        tg = (t.empty((max(T, 1), self.num_topk), dtype=t.float32, device=self.device)
              if y_grad is not None else None)
        a = _lib.CombineArgs()
        a.size = ctypes.sizeof(a)
        a.y = y.data_ptr() or None
        a.out = out.data_ptr() if out is not None else None
        a.hidden = hidden
        a.weighted = 1 if weighted else 0
        a.y_grad = y_grad.data_ptr() if y_grad is not None else None
        a.topk_grad = tg.data_ptr() if tg is not None else None
        if self.comm_stream is not None:
            for inp in (y, y_grad):
                if inp is not None:
                    inp.record_stream(s)
        _lib.check(self._lib.eep_combine_ex(self._rt, ctypes.byref(a), handle.ptr,
                                            ctypes.c_void_p(s.cuda_stream)), "combine")
        return (out[:T] if out is not None else None), (tg[:T] if tg is not None else None), \
            self._event(s)

    def combine(self, y, handle, weighted=True):
        """y: bf16 [handle.num_rows, H] in the received layout.  weighted=False sums the rows as
        they are (the backward of dispatch).  A rank-major handle's rows are summed as they are
        either way (each is the caller's own weighted sum over its local experts).  Returns
        (out [T, H] bf16, event)."""
        out, _, ev = self._combine(y, handle, weighted, None, True)
        return out, ev

    def combine_topk_grad(self, y, y_grad, handle):
        """Top-k weight gradients: [T, K] fp32, dot(y[row], y_grad[row]) of each (token, lane)'s
        row (0 for lanes of id -1).  Returns (topk_grad, event).  Expert-major handles (a
        rank-major row is no single lane's: the caller has the weights' gradients itself, and
        elasticep.autograd brings them back)."""
        if isinstance(handle, Handle) and handle.layout_code == _lib.LAYOUT_RANK_MAJOR:
            raise InvalidArgument("combine_topk_grad: invalid argument handle: rank-major (a row "
                                  "per token, not per lane): use an expert-major dispatch", -1,
                                  "EEP_ERR_INVALID_ARG")
        _, tg, ev = self._combine(y, handle, True, y_grad, False)
        return tg, ev

    # ---- state -------------------------------------------------------------------------------
    @property
    def transport(self):
        """"direct" (every peer over NVLink) or "hybrid" (peers of other nodes over GIN); the
        top-k weight gradients (combine_topk_grad) are there in direct mode and in hybrid mode
        with one GPU a node, not where a hybrid runtime forwards within nodes of several GPUs."""
        name = self._lib.eep_ep_transport(self._rt) if self._rt else None
        return name.decode() if name else None

    @property
    def epoch(self):
        return int(self._lib.eep_runtime_epoch(self._rt)) if self._rt else 0

    def poll(self):
        """Raise the runtime's pending fault (peer timeout, device fault), if any."""
        _lib.check(self._lib.eep_poll(self._rt), "poll")

    def _reserve(self):
        _lib.check(self._lib.eep_ep_reserve(self._rt, self._shapes, len(self._shapes)),
                   "Buffer: eep_ep_reserve")

    def membership_sync(self, _first=False):
        """Between steps (no call of this Buffer in flight): take the newest membership view and
        apply it in place (eep_membership_sync: shrink for removals, a fresh communicator for
        additions).  Returns a MembershipInfo; when .changed, rank, world and the experts this
        rank holds (.local_experts, global ids by local slot) may differ, handles of the old
        view are refused (GroupLost), and the Buffer's sizes follow the new view.  .fenced: this
        rank is not in the view or lost its lease (no communicator; keep syncing).  Needs
        Buffer(membership=...)."""
        if self.membership is None:
            raise InvalidArgument("membership_sync: invalid argument: this Buffer was made "
                                  "without membership= (elasticep.Membership)", -1,
                                  "EEP_ERR_INVALID_ARG")
        changed = ctypes.c_int(0)
        s = MembershipInfoT()
        s.size = ctypes.sizeof(MembershipInfoT)
        st = self._lib.eep_membership_sync(self._rt, ctypes.byref(changed), ctypes.addressof(s))
        fenced = st in (_lib.STATUS_FENCED, _lib.STATUS_LEASE_LOST)
        if not fenced:
            _lib.check(st, "membership_sync")
        info = info_from_struct(s, changed.value or _first, fenced)
        self.info = info
        if not fenced and (info.changed or _first):
            self.rank, self.world = info.rank, info.world
            self.num_local = len(info.local_experts)
            place = (ctypes.c_int32 * (2 * len(info.placement)))(
                *[v for rs in info.placement for v in rs]) if info.placement else None
            self.rows_max = self._lib.eep_ep_recv_rows_max_placed(
                self.world, self.max_tokens, self.num_topk, self.num_experts, self.alignment,
                ctypes.cast(place, ctypes.c_void_p) if place is not None else None)
            if self.rows_max < 0:
                raise InvalidArgument("membership_sync: the view's placement gives no row bound "
                                      "(eep_ep_recv_rows_max_placed %d)" % self.rows_max, -1,
                                      "EEP_ERR_INVALID_ARG")
            self._reserve()  # shapes are reserved per view (eep_ep_reserve)
        return info

    def membership_fault(self, phase):
        """After a call raised PeerLost: mark the peer dead (degraded mode) and report it to the
        control plane once, so that a view without it follows (eep_membership_fault).  phase:
        "dispatch", "combine" or "barrier".  Returns False when there was no fault to report."""
        if phase not in ("dispatch", "combine", "barrier"):
            raise InvalidArgument("membership_fault: invalid argument phase: %r, expected "
                                  "\"dispatch\", \"combine\" or \"barrier\"" % (phase,), -1,
                                  "EEP_ERR_INVALID_ARG")
        st = self._lib.eep_membership_fault(self._rt, phase.encode())
        if st == _lib.STATUS_NOT_FOUND:
            return False
        _lib.check(st, "membership_fault")
        return True

    def destroy(self):
        if self._rt:
            torch().cuda.synchronize(self.device)
            for ptr, _ in self._retired:
                self._lib.eep_ep_handle_destroy(ctypes.c_void_p(ptr))
            self._retired = []
            self._lib.eep_runtime_destroy(self._rt)
            self._rt = ctypes.c_void_p(None)
        if self._bs:
            self._lib.eep_bootstrap_destroy(self._bs)
            self._bs = ctypes.c_void_p(None)

    def __del__(self):
        try:
            self.destroy()
        except Exception:
            pass
