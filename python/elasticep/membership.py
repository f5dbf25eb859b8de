"""Membership through the control plane: a member of an ElasticEP job whose views a Buffer follows.

    m = elasticep.Membership()                 # registers in etcd (EEP_ETCD_ENDPOINTS, EEP_JOB)
    buf = elasticep.Buffer(membership=m, max_world=8, num_max_tokens_per_rank=..., ...)
    for step in ...:
        info = buf.membership_sync()           # between steps: apply a new view in place
        if info.changed:
            load_experts(info.local_experts)   # the weights are the application's
        ... dispatch, experts, combine ...      # a PeerLost: buf.membership_fault("dispatch")

The member is the control plane's agent (libeep_agent.so, control/agent: a lease in etcd, eepd's
numbered views); the Buffer hands its provider to libeep (include/eep/membership.h), which applies
each view in place (shrink for removals, a fresh communicator for additions).  libeep_agent.so
needs gRPC and protobuf-c (the control plane's build); without it Membership raises
LibraryNotFound naming every path tried.  No GPU and no torch are needed here.
"""
import ctypes
import os
from ctypes import c_char_p, c_double, c_int, c_int32, c_size_t, c_uint64, c_void_p

from . import _lib, errors


class ExpertPlace(ctypes.Structure):
    """eep_expert_place_t: where one global expert lives."""

    _fields_ = [("rank", c_int32), ("slot", c_int32)]


class MembershipT(ctypes.Structure):
    """eep_membership_t: a provider's ops and context."""

    _fields_ = [("ops", c_void_p), ("ctx", c_void_p)]


class AgentParams(ctypes.Structure):
    """eep_agent_params_t (control/agent/agent.h)."""

    _fields_ = [
        ("size", c_size_t),
        ("job", c_char_p),
        ("gpu_uuid", c_char_p),
        ("endpoint", c_char_p),
        ("lease_ttl_s", c_int),
        ("notify", c_void_p),
        ("notify_arg", c_void_p),
    ]


class AgentMembershipParams(ctypes.Structure):
    """eep_agent_membership_params_t (control/agent/agent_membership.h)."""

    _fields_ = [("size", c_size_t), ("agent", c_void_p), ("job", c_char_p)]


class MembershipInfoT(ctypes.Structure):
    """eep_membership_info_t (include/eep/membership.h)."""

    _fields_ = [
        ("size", c_size_t),
        ("epoch", c_uint64),
        ("rank", c_int),
        ("world", c_int),
        ("num_experts", c_int),
        ("num_local", c_int),
        ("local_experts", ctypes.POINTER(c_int32)),
        ("placement", ctypes.POINTER(ExpertPlace)),
        ("degraded", c_int),
        ("n_lost", c_int),
        ("action", c_char_p),
        ("apply_ms", c_double),
    ]


class MembershipInfo:
    """Where this rank stands after Buffer.membership_sync(): plain Python values, copied out of
    libeep's (valid only until the next sync)."""

    def __init__(self, changed, epoch, rank, world, num_experts, local_experts, placement,
                 degraded, n_lost, action, apply_ms, fenced=False):
        self.changed = bool(changed)      # a view was applied by this sync
        self.epoch = epoch                # of the view the communicator belongs to (0: none)
        self.rank, self.world = rank, world
        self.num_experts = num_experts
        self.local_experts = local_experts  # global ids this rank holds, by local slot
        self.placement = placement        # [(rank, slot)] for every global expert
        self.degraded = bool(degraded)    # a peer is known dead, no view removed it yet
        self.n_lost = n_lost              # experts held by peers known dead
        self.action = action              # what the last view did: "none", "shrink", "fresh"
        self.apply_ms = apply_ms
        self.fenced = bool(fenced)        # not in the view (or lease lost): no communicator

    def __repr__(self):
        return ("MembershipInfo(changed=%s, epoch=%d, rank=%d, world=%d, local_experts=%s, "
                "degraded=%s, action=%r%s)" % (self.changed, self.epoch, self.rank, self.world,
                                               self.local_experts, self.degraded, self.action,
                                               ", fenced" if self.fenced else ""))


def info_from_struct(s, changed, fenced=False):
    """A MembershipInfo from a filled eep_membership_info_t (arrays copied)."""
    nl = max(int(s.num_local), 0)
    ne = max(int(s.num_experts), 0)
    local = [int(s.local_experts[i]) for i in range(nl)] if nl and s.local_experts else []
    place = ([(int(s.placement[i].rank), int(s.placement[i].slot)) for i in range(ne)]
             if ne and s.placement else [])
    action = s.action.decode(errors="replace") if s.action else "none"
    return MembershipInfo(changed, int(s.epoch), int(s.rank), int(s.world), ne, local, place,
                          s.degraded, int(s.n_lost), action, float(s.apply_ms), fenced)


_AGENT_FUNCS = {
    "eep_agent_create": (c_int, [ctypes.POINTER(AgentParams), ctypes.POINTER(c_void_p)]),
    "eep_agent_destroy": (None, [c_void_p]),
    "eep_agent_leave": (c_int, [c_void_p]),
    "eep_agent_member_id": (c_int, [c_void_p, c_char_p, c_size_t]),
    "eep_agent_membership_create": (c_int, [ctypes.POINTER(AgentMembershipParams),
                                            ctypes.POINTER(MembershipT)]),
    "eep_agent_membership_destroy": (None, [ctypes.POINTER(MembershipT)]),
}

_agent = None


def _agent_candidates():
    env = os.environ.get("ELASTICEP_AGENT_LIBRARY")
    if env:
        yield env
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "_native", "libeep_agent.so")
    lib_env = os.environ.get("ELASTICEP_LIBRARY")
    if lib_env:
        yield os.path.join(os.path.dirname(lib_env), "libeep_agent.so")
    yield os.path.join(here, "..", "..", "build", "lib", "libeep_agent.so")
    yield "libeep_agent.so"


def agent_lib():
    """libeep_agent.so, its functions typed (libeep first: it needs libeep.so.0)."""
    global _agent
    if _agent is None:
        _lib.lib()
        handle, tried = _lib.open_first(_agent_candidates(), _AGENT_FUNCS)
        if handle is None:
            raise errors.LibraryNotFound("libeep_agent.so (the control plane's agent) not found; "
                                         "set ELASTICEP_AGENT_LIBRARY or build it with `make` "
                                         "(tried: %s)" % tried)
        _agent = handle
    return _agent


class Membership:
    """This process as a member of a job: registered in etcd under a lease, following eepd's
    views.  Hand it to Buffer(membership=...); it must outlive the Buffer.

    job: the job's name (None: EEP_JOB); lease_ttl_s: 0 takes EEP_AGENT_LEASE_TTL_S; endpoint: an
    address published with the member (optional); gpu_uuid: None takes EEP_AGENT_GPU_UUID.
    etcd is found through EEP_ETCD_ENDPOINTS (control/README.md).  Raises ControlPlaneError when
    etcd cannot be reached, InvalidArgument for a bad argument.
    """

    def __init__(self, job=None, lease_ttl_s=0, endpoint=None, gpu_uuid=None):
        if not isinstance(lease_ttl_s, int) or lease_ttl_s < 0:
            raise errors.InvalidArgument("Membership: invalid argument lease_ttl_s: %r, expected "
                                         "an int >= 0" % (lease_ttl_s,), -1, "EEP_ERR_INVALID_ARG")
        for name, v in (("job", job), ("endpoint", endpoint), ("gpu_uuid", gpu_uuid)):
            if v is not None and (not isinstance(v, str) or not v):
                raise errors.InvalidArgument("Membership: invalid argument %s: %r, expected a "
                                             "non-empty str or None" % (name, v), -1,
                                             "EEP_ERR_INVALID_ARG")
        self._a = agent_lib()
        self._agent = c_void_p(None)
        self._ms = MembershipT()
        self._keep = [s.encode() if s else None for s in (job, gpu_uuid, endpoint)]
        p = AgentParams(ctypes.sizeof(AgentParams), self._keep[0], self._keep[1], self._keep[2],
                        lease_ttl_s, None, None)
        _lib.check(self._a.eep_agent_create(ctypes.byref(p), ctypes.byref(self._agent)),
                   "Membership: eep_agent_create")
        mp = AgentMembershipParams(ctypes.sizeof(AgentMembershipParams), self._agent,
                                   self._keep[0])
        try:
            _lib.check(self._a.eep_agent_membership_create(ctypes.byref(mp),
                                                           ctypes.byref(self._ms)),
                       "Membership: eep_agent_membership_create")
        except errors.EEPError:
            self._a.eep_agent_destroy(self._agent)
            self._agent = c_void_p(None)
            raise

    @property
    def member_id(self):
        """The member's id in etcd (a rank that rejoins gets a new one)."""
        buf = ctypes.create_string_buffer(256)
        _lib.check(self._a.eep_agent_member_id(self._agent, buf, len(buf)),
                   "Membership: eep_agent_member_id")
        return buf.value.decode()

    def provider(self):
        """The eep_membership_t pointer libeep's runtime takes (params.membership)."""
        if not self._agent:
            raise errors.InvalidArgument("Membership: closed", -1, "EEP_ERR_INVALID_ARG")
        return ctypes.cast(ctypes.byref(self._ms), c_void_p)

    def close(self, leave=True):
        """Give up the provider and the member (leave: delete the member key at once rather than
        let the lease expire).  Destroy every Buffer made with it first."""
        if self._ms.ops:
            self._a.eep_agent_membership_destroy(ctypes.byref(self._ms))
            self._ms = MembershipT()
        if self._agent:
            if leave:
                self._a.eep_agent_leave(self._agent)
            self._a.eep_agent_destroy(self._agent)
            self._agent = c_void_p(None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone
            pass
