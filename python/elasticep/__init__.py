"""ElasticEP for PyTorch: a DeepEP-shaped Buffer over libeep (ctypes; README.md says why).

    import elasticep
    buf = elasticep.Buffer(group, num_max_tokens_per_rank, hidden, num_topk, num_experts)
    recv_x, recv_idx, recv_w, counts, handle, event = buf.dispatch(x, topk_idx, topk_weights)
    out, event = buf.combine(y, handle)

torch is imported on first use, so `import elasticep` (and window_size, the errors, the status
mapping) works without it.
"""
from . import errors
from .errors import (ControlPlaneError, DeviceError, EEPError, GroupLost, InternalError,
                     InvalidArgument, LibraryNotFound, NoDevice, PeerLost, ResourceError)
from .buffer import Buffer, Handle, window_size
from .membership import Membership, MembershipInfo
from . import autograd

__version__ = "0.1.0"

__all__ = ["Buffer", "Handle", "window_size", "Membership", "MembershipInfo", "autograd", "errors", "EEPError", "InvalidArgument",
           "ResourceError", "PeerLost", "GroupLost", "DeviceError", "NoDevice",
           "ControlPlaneError", "InternalError", "LibraryNotFound"]
