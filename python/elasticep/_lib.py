"""ctypes view of libeep: the library, the C structs of include/eep/*.h, status -> exceptions.

No torch here: this module imports on any machine.  The library is found, in this order, through
ELASTICEP_LIBRARY (a path), the copy the package was installed with (elasticep/_native/), then
the repository's build/lib/libeep.so next to this source tree, then the loader's search path.
Loading it needs no GPU: libeep opens the CUDA driver and NCCL itself when a runtime is made,
and reports EEP_ERR_NO_DEVICE when there is none.
"""
import ctypes
import os

from . import errors

c_int, c_size_t, c_void_p, c_int64 = ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int64
c_uint64, c_char_p = ctypes.c_uint64, ctypes.c_char_p

# eep_dtype_t, eep_index_dtype_t, eep_ep_mode_t (include/eep/ep.h)
DTYPE_BF16, DTYPE_FP8_E4M3 = 0, 1
INDEX_INT32, INDEX_INT64 = 0, 1
MODE_CPU_SYNC, MODE_NO_CPU_SYNC, MODE_CACHED = 0, 1, 2
MODES = {"cpu_sync": MODE_CPU_SYNC, "no_cpu_sync": MODE_NO_CPU_SYNC, "cached": MODE_CACHED}
# eep_ep_layout_t (include/eep/ep.h)
LAYOUT_EXPERT_MAJOR, LAYOUT_RANK_MAJOR = 0, 1
LAYOUTS = {"expert": LAYOUT_EXPERT_MAJOR, "rank": LAYOUT_RANK_MAJOR}
# eep_bootstrap_kind_t (include/eep/eep.h)
BOOTSTRAP_ENV, BOOTSTRAP_FILE, BOOTSTRAP_TCP = 0, 1, 2
# statuses the membership calls answer without an error (include/eep/status.h)
STATUS_NOT_FOUND, STATUS_FENCED, STATUS_LEASE_LOST = -5, -62, -103
MAX_RANKS = 1024  # EEP_MAX_RANKS (include/eep/layout.h)

MAX_TOPK = 32
MAX_EXPERTS = 2048
MAX_LOCAL_EXPERTS = 256
FP8_BLOCK = 128
PTR_ALIGN = 16

ALLOC_FUNC = ctypes.CFUNCTYPE(c_void_p, c_void_p, c_size_t, c_char_p)


class DispatchArgs(ctypes.Structure):
    """eep_dispatch_args_t (fourth version: skip_padding_x, layout, and degraded mode's
    dead_mask, dropped_topk, num_dropped)."""

    _fields_ = [
        ("size", c_size_t),
        ("x", c_void_p),
        ("x_scales", c_void_p),
        ("dtype", c_int),
        ("topk_idx", c_void_p),
        ("topk_idx_dtype", c_int),
        ("topk_weights", c_void_p),
        ("num_tokens", c_int),
        ("hidden", c_int),
        ("num_topk", c_int),
        ("num_experts", c_int),
        ("expert_alignment", c_int),
        ("max_tokens_per_rank", c_int),
        ("mode", c_int),
        ("num_sms", c_int),
        ("recv_capacity", c_int64),
        ("recv_x", c_void_p),
        ("recv_x_scales", c_void_p),
        ("recv_topk_idx", c_void_p),
        ("recv_topk_weights", c_void_p),
        ("recv_expert_counts", c_void_p),
        ("recv_expert_offsets", c_void_p),
        ("alloc", ALLOC_FUNC),
        ("alloc_arg", c_void_p),
        ("host_expert_counts", c_void_p),
        ("num_recv_rows_p", c_void_p),
        ("skip_padding_x", c_int),
        ("layout", c_int),
        ("dead_mask", ctypes.c_uint64),
        ("dropped_topk", c_void_p),
        ("num_dropped", c_void_p),
    ]


class CombineArgs(ctypes.Structure):
    """eep_combine_args_t."""

    _fields_ = [
        ("size", c_size_t),
        ("y", c_void_p),
        ("out", c_void_p),
        ("hidden", c_int),
        ("weighted", c_int),
        ("y_grad", c_void_p),
        ("topk_grad", c_void_p),
        ("num_sms", c_int),
    ]


class ShapeDesc(ctypes.Structure):
    """eep_ep_shape_desc_t."""

    _fields_ = [
        ("max_tokens_per_rank", c_int),
        ("hidden", c_int),
        ("num_topk", c_int),
        ("num_experts", c_int),
        ("dtype", c_int),
    ]


class BootstrapParams(ctypes.Structure):
    """eep_bootstrap_params_t."""

    _fields_ = [
        ("size", c_size_t),
        ("kind", c_int),
        ("rank", c_int),
        ("nranks", c_int),
        ("path", c_char_p),
        ("address", c_char_p),
        ("timeout_ms", c_int),
    ]


class RuntimeParams(ctypes.Structure):
    """eep_runtime_params_t (third version: with epoch, membership, join_timeout_ms)."""

    _fields_ = [
        ("size", c_size_t),
        ("bootstrap", c_void_p),
        ("nccl_comm", c_void_p),
        ("device", c_int),
        ("window_bytes", c_size_t),
        ("timeout_ms", c_int),
        ("epoch", c_uint64),
        ("membership", c_void_p),
        ("join_timeout_ms", c_int),
    ]


class RuntimeInfo(ctypes.Structure):
    """eep_runtime_info_t."""

    _fields_ = [
        ("rank", c_int),
        ("nranks", c_int),
        ("lsa_rank", c_int),
        ("lsa_size", c_int),
        ("rail_rank", c_int),
        ("rail_size", c_int),
        ("device", c_int),
        ("gin", c_int),
        ("gin_probed", c_int),
        ("window_bytes", c_size_t),
        ("workspace_bytes", c_size_t),
        ("timeout_ms", c_int),
    ]


# name -> (restype, argtypes); eep_status_t is an int
_FUNCS = {
    "eep_status_string": (c_char_p, [c_int]),
    "eep_status_name": (c_char_p, [c_int]),
    "eep_status_class": (c_int, [c_int]),
    "eep_last_error": (c_char_p, []),
    "eep_last_error_clear": (None, []),
    "eep_bootstrap_create": (c_int, [ctypes.POINTER(BootstrapParams), ctypes.POINTER(c_void_p)]),
    "eep_bootstrap_destroy": (None, [c_void_p]),
    "eep_bootstrap_rank": (c_int, [c_void_p]),
    "eep_bootstrap_nranks": (c_int, [c_void_p]),
    "eep_runtime_create": (c_int, [ctypes.POINTER(RuntimeParams), ctypes.POINTER(c_void_p)]),
    "eep_runtime_destroy": (None, [c_void_p]),
    "eep_runtime_query": (c_int, [c_void_p, ctypes.POINTER(RuntimeInfo)]),
    "eep_runtime_epoch": (c_uint64, [c_void_p]),
    "eep_runtime_sync": (c_int, [c_void_p, c_void_p]),
    "eep_poll": (c_int, [c_void_p]),
    "eep_dispatch": (c_int, [c_void_p, ctypes.POINTER(DispatchArgs), ctypes.POINTER(c_void_p),
                             c_void_p]),
    "eep_combine_ex": (c_int, [c_void_p, ctypes.POINTER(CombineArgs), c_void_p, c_void_p]),
    "eep_ep_handle_destroy": (None, [c_void_p]),
    "eep_ep_recv_rows_max": (c_int64, [c_int, c_int, c_int, c_int, c_int]),
    "eep_ep_window_size": (c_int, [c_int, ctypes.POINTER(ShapeDesc), c_int,
                                   ctypes.POINTER(c_size_t)]),
    "eep_ep_reserve": (c_int, [c_void_p, ctypes.POINTER(ShapeDesc), c_int]),
    "eep_ep_transport": (c_char_p, [c_void_p]),
    "eep_ep_recv_rows_max_placed": (c_int64, [c_int, c_int, c_int, c_int, c_int, c_void_p]),
    # info: an eep_membership_info_t (elasticep/membership.py), passed by address
    "eep_membership_sync": (c_int, [c_void_p, ctypes.POINTER(c_int), c_void_p]),
    "eep_membership_fault": (c_int, [c_void_p, c_char_p]),
}

_lib = None


def _candidates():
    env = os.environ.get("ELASTICEP_LIBRARY")
    if env:
        yield env
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "_native", "libeep.so")
    yield os.path.join(here, "..", "..", "build", "lib", "libeep.so")
    yield "libeep.so"


def open_first(candidates, funcs):
    """The first of @candidates (paths, or bare names for the loader's search) that loads, with
    @funcs ({name: (restype, argtypes)}) typed; (handle, None), or (None, every path tried)."""
    tried = []
    for path in candidates:
        if os.sep in path and not os.path.exists(path):
            tried.append(path + " (missing)")
            continue
        try:
            handle = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        for name, (res, args) in funcs.items():
            fn = getattr(handle, name)
            fn.restype = res
            fn.argtypes = args
        return handle, None
    return None, "; ".join(tried)


def lib():
    """The loaded libeep, its functions typed; raises LibraryNotFound with every path tried."""
    global _lib
    if _lib is None:
        handle, tried = open_first(_candidates(), _FUNCS)
        if handle is None:
            raise errors.LibraryNotFound("libeep.so not found; set ELASTICEP_LIBRARY or build it "
                                         "with `make` (tried: %s)" % tried)
        _lib = handle
    return _lib


def check(status, what):
    """Raise the exception of a non-zero eep_status_t, with libeep's last error message."""
    if status == 0 or status == 1:
        return status
    l = lib()
    msg = (l.eep_last_error() or b"").decode(errors="replace")
    name = (l.eep_status_name(status) or b"EEP_UNKNOWN").decode()
    text = (l.eep_status_string(status) or b"").decode()
    l.eep_last_error_clear()
    raise errors.from_status(status, name, "%s: %s (%s)%s" % (what, name, text,
                                                            ": " + msg if msg else ""))
