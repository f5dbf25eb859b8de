"""ctypes view of the CPU reference of dispatch/combine (tests/common/ep_reference.c, built as
build/lib/libeep_ref.so by scripts/gpu-python.sh) for the GPU tests: every rank makes every
rank's inputs (a pure function of shape, seed and rank) and the expected outputs of all."""
import ctypes
import os

c_int, c_void_p, c_int64, c_uint64 = ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64


class Shape(ctypes.Structure):  # eep_ep_shape_t (placement NULL: the default policy)
    _fields_ = [("world", c_int), ("max_tokens", c_int), ("hidden", c_int), ("num_topk", c_int),
                ("num_experts", c_int), ("alignment", c_int), ("dtype", c_int),
                ("local_max", c_int), ("placement", c_void_p)]


class Gen(ctypes.Structure):  # eep_ref_gen_t
    _fields_ = [("seed", c_uint64), ("masked_fraction", ctypes.c_double),
                ("hotspot_expert", c_int), ("hotspot_only", c_int), ("silent_rank", c_int),
                ("masked_rank", c_int), ("tokens_mode", c_int), ("num_tokens", c_int)]


class Input(ctypes.Structure):  # eep_ref_input_t
    _fields_ = [("num_tokens", c_int), ("x", c_void_p), ("x_scales", c_void_p),
                ("topk_idx", c_void_p), ("topk_weights", c_void_p)]


class Recv(ctypes.Structure):  # eep_ref_recv_t
    _fields_ = [("num_local", c_int), ("num_rows", c_int64), ("expert_counts", c_void_p),
                ("expert_offsets", c_void_p), ("tokens_from", c_void_p), ("x", c_void_p),
                ("x_scales", c_void_p), ("topk_idx", c_void_p), ("topk_weights", c_void_p),
                ("src_rank", c_void_p), ("src_token", c_void_p), ("src_lane", c_void_p)]


_ref = None


def ref():
    global _ref
    if _ref is None:
        path = os.environ.get("ELASTICEP_REF_LIBRARY") or os.path.join(
            os.path.dirname(__file__), "..", "..", "build", "lib", "libeep_ref.so")
        _ref = ctypes.CDLL(path)
        _ref.eep_ref_gen_init.argtypes = [ctypes.POINTER(Gen), c_uint64]
        _ref.eep_ref_input_generate.argtypes = [ctypes.POINTER(Shape), ctypes.POINTER(Gen), c_int,
                                                ctypes.POINTER(Input)]
        _ref.eep_ref_dispatch.argtypes = [ctypes.POINTER(Shape), ctypes.POINTER(Input),
                                          ctypes.POINTER(Recv), c_void_p, c_void_p]
        _ref.eep_ref_rank_major.argtypes = [ctypes.POINTER(Shape), ctypes.POINTER(Input), c_int,
                                            ctypes.POINTER(Recv)]
        _ref.eep_ref_combine_rank_major.argtypes = [ctypes.POINTER(Shape), ctypes.POINTER(Input),
                                                    ctypes.POINTER(Recv),
                                                    ctypes.POINTER(c_void_p),
                                                    ctypes.POINTER(c_void_p)]
        _ref.eep_ref_combine_src_ex.argtypes = [ctypes.POINTER(Shape), ctypes.POINTER(Input),
                                                ctypes.POINTER(Recv), ctypes.POINTER(c_void_p),
                                                c_int, c_int, c_void_p]
        _ref.eep_ref_topk_grad.argtypes = [ctypes.POINTER(Shape), ctypes.POINTER(Input),
                                           ctypes.POINTER(Recv), ctypes.POINTER(c_void_p),
                                           ctypes.POINTER(c_void_p), ctypes.POINTER(c_void_p)]
    return _ref


class World:
    """Every rank's inputs and expected dispatch outputs for one shape."""

    def __init__(self, world, max_tokens, hidden, num_topk, num_experts, alignment, fp8, seed,
                 num_tokens, routing_from=None):
        self.shape = Shape(world, max_tokens, hidden, num_topk, num_experts, alignment,
                           1 if fp8 else 0)
        gen = Gen()
        ref().eep_ref_gen_init(ctypes.byref(gen), seed)
        gen.num_tokens = num_tokens
        self.world, self.K = world, num_topk
        self.inputs = (Input * world)()
        for r in range(world):
            assert ref().eep_ref_input_generate(ctypes.byref(self.shape), ctypes.byref(gen), r,
                                                ctypes.byref(self.inputs[r])) == 0
            if routing_from is not None:  # the same routing (a cached dispatch's gradients)
                n = self.inputs[r].num_tokens * num_topk
                ctypes.memmove(self.inputs[r].topk_idx, routing_from.inputs[r].topk_idx, n * 8)
                ctypes.memmove(self.inputs[r].topk_weights, routing_from.inputs[r].topk_weights,
                               n * 4)
        self.recv = (Recv * world)()
        assert ref().eep_ref_dispatch(ctypes.byref(self.shape), self.inputs, self.recv, None,
                                      None) == 0

    def combine(self, ys, src, weighted):
        """Expected out of rank @src: ys[r] are CPU bf16 tensors [recv rows, H] of every rank."""
        import torch
        arr = (c_void_p * self.world)(*[y.data_ptr() for y in ys])
        out = torch.zeros((max(self.inputs[src].num_tokens, 1), self.shape.hidden),
                          dtype=torch.bfloat16)
        assert ref().eep_ref_combine_src_ex(ctypes.byref(self.shape), self.inputs, self.recv, arr,
                                            src, 1 if weighted else 0, out.data_ptr()) == 0
        return out[: self.inputs[src].num_tokens]

    def rank_major(self):
        """Every rank's rank-major outputs (eep_ref_rank_major), a Recv each."""
        if getattr(self, "_rm", None) is None:
            self._rm = (Recv * self.world)()
            for r in range(self.world):
                assert ref().eep_ref_rank_major(ctypes.byref(self.shape), self.inputs, r,
                                                ctypes.byref(self._rm[r])) == 0
        return self._rm

    def combine_rank_major(self, ys, src):
        """Expected out of rank @src from rank-major rows ys[r] (CPU bf16 [rows of r, H])."""
        import torch
        rm = self.rank_major()
        outs = [torch.zeros((max(self.inputs[r].num_tokens, 1), self.shape.hidden),
                            dtype=torch.bfloat16) for r in range(self.world)]
        ya = (c_void_p * self.world)(*[y.data_ptr() for y in ys])
        oa = (c_void_p * self.world)(*[o.data_ptr() for o in outs])
        assert ref().eep_ref_combine_rank_major(ctypes.byref(self.shape), self.inputs, rm, ya,
                                                oa) == 0
        return outs[src][: self.inputs[src].num_tokens]

    def topk_grad(self, ys, gs, src):
        import torch
        grads = [torch.zeros((max(self.inputs[r].num_tokens, 1), self.K), dtype=torch.float32)
                 for r in range(self.world)]
        ya = (c_void_p * self.world)(*[y.data_ptr() for y in ys])
        ga = (c_void_p * self.world)(*[g.data_ptr() for g in gs])
        oa = (c_void_p * self.world)(*[g.data_ptr() for g in grads])
        assert ref().eep_ref_topk_grad(ctypes.byref(self.shape), self.inputs, self.recv, ya, ga,
                                       oa) == 0
        return grads[src][: self.inputs[src].num_tokens]
