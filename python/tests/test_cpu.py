"""CPU tests of the elasticep package (make test): no GPU, no torch needed.

- the package imports without torch, and torch is only imported by the Buffer;
- every ctypes struct has the size and field offsets of its C struct (a C program built here
  prints them from include/eep/*.h);
- status codes map to the exception classes, with libeep's message (eep_last_error);
- window_size (the window-size hint) matches libeep's arithmetic and names bad fields;
- the argument checks (dtype, shape, contiguity, alignment, device, mode) raise InvalidArgument
  naming the argument before any launch, on fake tensors;
- without a GPU the Buffer raises a clear exception (NoDevice, or ImportError without torch);
- elasticep.Membership: the agent's structs, MembershipInfo decoding, argument checks, and a
  real member in a real etcd on 127.0.0.1 (registered under the job's prefix, gone on close).
"""
import ctypes
import os
import subprocess
import sys
import tempfile
import unittest

import base64
import json
import shutil
import socket
import time
import urllib.request

import elasticep
from elasticep import _checks, _lib, errors, membership

ROOT = os.environ.get("ELASTICEP_SOURCE_ROOT") or os.path.join(os.path.dirname(__file__), "..", "..")


class FakeDevice:
    def __init__(self, kind):
        self.type = kind


class FakeTensor:
    """What the checks read of a torch tensor."""

    def __init__(self, dtype, shape, ptr=0x10000, contiguous=True, device="cuda"):
        self.dtype, self.shape, self._ptr = "torch." + dtype, tuple(shape), ptr
        self._contig, self.device = contiguous, FakeDevice(device)

    def is_contiguous(self):
        return self._contig

    def data_ptr(self):
        return self._ptr


class TestImport(unittest.TestCase):
    def test_imports_without_torch(self):
        code = ("import sys; sys.modules['torch'] = None; import elasticep; "
                "print(elasticep.__version__, 'torch' in [m for m in sys.modules "
                "if sys.modules[m] is not None])")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.split(), ["0.1.0", "False"])

    def test_buffer_without_torch_says_so(self):
        code = ("import sys; sys.modules['torch'] = None; import elasticep\n"
                "try:\n elasticep.Buffer(None, 128, 1024, 8, 64)\n"
                "except ImportError as e:\n print('ImportError', e)\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        self.assertIn("ImportError elasticep.Buffer needs torch", out.stdout, out.stderr)

    def test_library_loads(self):
        l = _lib.lib()
        self.assertEqual(l.eep_status_name(-40), b"EEP_ERR_PEER_TIMEOUT")


class TestStructLayout(unittest.TestCase):
    """Each ctypes struct against its C definition, compiled here."""

    STRUCTS = {"eep_dispatch_args_t": _lib.DispatchArgs, "eep_combine_args_t": _lib.CombineArgs,
               "eep_ep_shape_desc_t": _lib.ShapeDesc, "eep_bootstrap_params_t": _lib.BootstrapParams,
               "eep_runtime_params_t": _lib.RuntimeParams, "eep_runtime_info_t": _lib.RuntimeInfo,
               "eep_membership_info_t": membership.MembershipInfoT,
               "eep_expert_place_t": membership.ExpertPlace, "eep_membership_t": membership.MembershipT,
               "eep_agent_params_t": membership.AgentParams,
               "eep_agent_membership_params_t": membership.AgentMembershipParams}

    def test_layouts_match_c(self):
        lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "eep/eep.h"',
                 '#include "eep/ep.h"', '#include "eep/membership.h"',
                 '#include "control/agent/agent_membership.h"', "int main(void) {"]
        for cname, py in self.STRUCTS.items():
            lines.append('printf("%s sizeof %%zu\\n", sizeof(%s));' % (cname, cname))
            for f, _ in py._fields_:
                lines.append('printf("%s %s %%zu\\n", offsetof(%s, %s));' % (cname, f, cname, f))
        consts = {"EEP_EP_MODE_CPU_SYNC": _lib.MODE_CPU_SYNC,
                  "EEP_EP_MODE_NO_CPU_SYNC": _lib.MODE_NO_CPU_SYNC,
                  "EEP_EP_MODE_CACHED": _lib.MODE_CACHED,
                  "EEP_EP_LAYOUT_EXPERT_MAJOR": _lib.LAYOUT_EXPERT_MAJOR,
                  "EEP_EP_LAYOUT_RANK_MAJOR": _lib.LAYOUT_RANK_MAJOR,
                  "EEP_DTYPE_FP8_E4M3": _lib.DTYPE_FP8_E4M3}
        for name in consts:
            lines.append('printf("const %s %%d\\n", (int)%s);' % (name, name))
        lines.append("return 0; }")
        with tempfile.TemporaryDirectory() as d:
            src, exe = os.path.join(d, "l.c"), os.path.join(d, "l")
            with open(src, "w") as fh:
                fh.write("\n".join(lines))
            cc = os.environ.get("CC", "cc")
            r = subprocess.run([cc, "-I", os.path.join(ROOT, "include"), "-I", ROOT, src, "-o", exe],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            got = subprocess.run([exe], capture_output=True, text=True).stdout.split("\n")
        c = {}
        for line in got:
            if line:
                parts = line.split()
                c[tuple(parts[:-1])] = int(parts[-1])
        for name, value in consts.items():
            self.assertEqual(c[("const", name)], value, name)
        for cname, py in self.STRUCTS.items():
            self.assertEqual(c[(cname, "sizeof")], ctypes.sizeof(py), cname)
            for f, _ in py._fields_:
                self.assertEqual(c[(cname, f)], getattr(py, f).offset, "%s.%s" % (cname, f))


class TestErrors(unittest.TestCase):
    def test_classes(self):
        cases = {-1: errors.InvalidArgument, -7: errors.InvalidArgument,
                 -20: errors.ResourceError, -40: errors.PeerLost, -41: errors.PeerLost,
                 -60: errors.GroupLost, -80: errors.NoDevice, -83: errors.DeviceError,
                 -100: errors.ControlPlaneError, -120: errors.InternalError}
        for status, cls in cases.items():
            e = errors.from_status(status, "N", "m")
            self.assertIs(type(e), cls)
            self.assertEqual(e.status, status)
        self.assertTrue(issubclass(errors.InvalidArgument, ValueError))

    def test_check_carries_last_error(self):
        with self.assertRaises(errors.InvalidArgument) as cm:
            elasticep.window_size(0, [(128, 1024, 8, 64, "bf16")])
        self.assertIn("EEP_ERR_INVALID_ARG", str(cm.exception))
        self.assertIn("world", str(cm.exception))
        self.assertEqual(cm.exception.status, -1)


class TestWindowSize(unittest.TestCase):
    def test_hint(self):
        one = elasticep.window_size(2, [(128, 7168, 8, 256, "bf16")])
        both = elasticep.window_size(2, [(128, 7168, 8, 256, "fp8"), (128, 7168, 8, 256, "bf16"),
                                         (128, 2048, 8, 256, "bf16")])
        fp8 = elasticep.window_size(2, [(128, 7168, 8, 256, "fp8")])
        self.assertEqual(one % (2 << 20), 0)
        self.assertGreaterEqual(both, one)
        self.assertLess(fp8, one)

    def test_bad_shape_named(self):
        with self.assertRaises(errors.InvalidArgument) as cm:
            elasticep.window_size(2, [(128, 7168, 8, 256, "bf16"), (64, 7168, 8, 256, "bf16")])
        self.assertIn("shapes[1].max_tokens_per_rank", str(cm.exception))
        with self.assertRaises(errors.InvalidArgument) as cm:
            elasticep.window_size(2, [(128, 7168, 8, 256, "int4")])
        self.assertIn("dtype", str(cm.exception))


class TestChecks(unittest.TestCase):
    H, K, T = 1024, 4, 16

    def ok_inputs(self):
        return (FakeTensor("bfloat16", (self.T, self.H)), FakeTensor("int64", (self.T, self.K)),
                FakeTensor("float32", (self.T, self.K)))

    def expect(self, needle, x, idx, w):
        with self.assertRaises(errors.InvalidArgument) as cm:
            _checks.dispatch_inputs(x, idx, w, self.H, self.K, 128)
        self.assertIn(needle, str(cm.exception))

    def test_valid(self):
        x, i, w = self.ok_inputs()
        self.assertEqual(_checks.dispatch_inputs(x, i, w, self.H, self.K, 128),
                         (_lib.DTYPE_BF16, None, _lib.INDEX_INT64, self.T))
        q, s = FakeTensor("float8_e4m3fn", (self.T, self.H)), FakeTensor("float32", (self.T, 8))
        code, scales, _, _ = _checks.dispatch_inputs((q, s), i, w, self.H, self.K, 128)
        self.assertEqual((code, scales), (_lib.DTYPE_FP8_E4M3, s))

    def test_dtype(self):
        x, i, w = self.ok_inputs()
        self.expect("invalid argument x: dtype torch.float16", FakeTensor("float16", (16, 1024)), i, w)
        self.expect("topk_idx: dtype torch.float32", x, FakeTensor("float32", (16, 4)), w)
        self.expect("topk_weights: dtype torch.bfloat16", x, i, FakeTensor("bfloat16", (16, 4)))
        self.expect("fp8 input needs its scales", FakeTensor("float8_e4m3fn", (16, 1024)), i, w)
        self.expect("x_scales: dtype torch.bfloat16",
                    (FakeTensor("float8_e4m3fn", (16, 1024)), FakeTensor("bfloat16", (16, 8))), i, w)

    def test_shape(self):
        x, i, w = self.ok_inputs()
        self.expect("x: shape [16, 512]", FakeTensor("bfloat16", (16, 512)), i, w)
        self.expect("topk_idx: shape [16, 3]", x, FakeTensor("int64", (16, 3)), w)
        self.expect("topk_weights: shape [15, 4]", x, i, FakeTensor("float32", (15, 4)))
        self.expect("more than num_max_tokens_per_rank", FakeTensor("bfloat16", (129, 1024)),
                    FakeTensor("int64", (129, 4)), FakeTensor("float32", (129, 4)))

    def test_contiguity_alignment_device(self):
        x, i, w = self.ok_inputs()
        self.expect("x: not contiguous", FakeTensor("bfloat16", (16, 1024), contiguous=False), i, w)
        self.expect("topk_idx: data pointer 0x10008 is not 16-byte aligned", x,
                    FakeTensor("int64", (16, 4), ptr=0x10008), w)
        self.expect("x: on device cpu", FakeTensor("bfloat16", (16, 1024), device="cpu"), i, w)

    def test_mode_sms_shape_args(self):
        with self.assertRaises(errors.InvalidArgument) as cm:
            _checks.mode("fast", None)
        self.assertIn("mode", str(cm.exception))
        with self.assertRaises(errors.InvalidArgument) as cm:
            _checks.mode("cached", None)
        self.assertIn("handle", str(cm.exception))
        self.assertEqual(_checks.mode(None, None), _lib.MODE_NO_CPU_SYNC)
        self.assertEqual(_checks.mode(None, object()), _lib.MODE_CACHED)
        with self.assertRaises(errors.InvalidArgument):
            _checks.num_sms(-1)
        # layouts: expert by default; a cached dispatch takes its handle's and refuses another
        ranked = type("H", (), {"layout_code": _lib.LAYOUT_RANK_MAJOR})()
        self.assertEqual(_checks.layout(None, None, _lib.MODE_NO_CPU_SYNC),
                         _lib.LAYOUT_EXPERT_MAJOR)
        self.assertEqual(_checks.layout("rank", None, _lib.MODE_CPU_SYNC), _lib.LAYOUT_RANK_MAJOR)
        self.assertEqual(_checks.layout(None, ranked, _lib.MODE_CACHED), _lib.LAYOUT_RANK_MAJOR)
        self.assertEqual(_checks.layout("expert", ranked, _lib.MODE_NO_CPU_SYNC),
                         _lib.LAYOUT_EXPERT_MAJOR)  # a refill may change it
        for bad, needle in ((("token", None, _lib.MODE_CPU_SYNC), "layout"),
                            (("expert", ranked, _lib.MODE_CACHED), "handle's layout")):
            with self.assertRaises(errors.InvalidArgument) as cm:
                _checks.layout(*bad)
            self.assertIn(needle, str(cm.exception))
        for args, needle in (((0, 1024, 8, 64, 1), "num_max_tokens_per_rank"),
                             ((128, 1020, 8, 64, 1), "hidden"),
                             ((128, 1024, 33, 64, 1), "num_topk"),
                             ((128, 1024, 8, 4, 1), "num_experts"),
                             ((128, 1024, 8, 64, 3), "expert_alignment")):
            with self.assertRaises(errors.InvalidArgument) as cm:
                _checks.shape_args(*args)
            self.assertIn(needle, str(cm.exception))
        with self.assertRaises(errors.InvalidArgument) as cm:
            _checks.hidden_of(FakeTensor("bfloat16", (4, 512)), [1024, 2048])
        self.assertIn("extra_hidden", str(cm.exception))

    def test_dead_ranks(self):
        # world 4, this rank 1: the C mask, and each bad set named
        self.assertEqual(_checks.dead_mask(None, 4, 1), 0)
        self.assertEqual(_checks.dead_mask([], 4, 1), 0)
        self.assertEqual(_checks.dead_mask([0, 3], 4, 1), 0b1001)
        self.assertEqual(_checks.dead_mask((3, 3), 4, 1), 0b1000)
        for bad, needle in (([1], "own"), ([4], "outside"), ([-1], "outside"),
                            (["0"], "not a rank"), ([True], "not a rank"), (2, "iterable")):
            with self.assertRaises(errors.InvalidArgument) as cm:
                _checks.dead_mask(bad, 4, 1)
            self.assertIn("dead_ranks", str(cm.exception))
            self.assertIn(needle, str(cm.exception))


class TestNoGpu(unittest.TestCase):
    def test_buffer_raises_no_device(self):
        try:
            import torch  # noqa: F401
        except Exception:
            self.skipTest("torch is not installed here (the check without torch is "
                          "test_buffer_without_torch_says_so)")
        if torch.cuda.is_available():
            self.skipTest("a GPU is visible")
        with self.assertRaises(errors.NoDevice) as cm:
            elasticep.Buffer(None, 128, 1024, 8, 64)
        self.assertIn("no CUDA device", str(cm.exception))

    def test_bad_args_raise_before_torch(self):
        with self.assertRaises(errors.InvalidArgument):
            elasticep.Buffer(None, 128, 1020, 8, 64)


class TestMembershipInfo(unittest.TestCase):
    def test_decoding_copies_the_arrays(self):
        local = (ctypes.c_int32 * 3)(4, 5, 6)
        place = (membership.ExpertPlace * 7)(*[(r, sl) for r, sl in
                                               [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1),
                                                (1, 2)]])
        s = membership.MembershipInfoT(ctypes.sizeof(membership.MembershipInfoT), 9, 1, 2, 7, 3,
                                       local, place, 1, 4, b"shrink", 12.5)
        info = membership.info_from_struct(s, 1)
        local[0] = 99  # a copy: libeep's arrays live only until the next sync
        self.assertTrue(info.changed and info.degraded and not info.fenced)
        self.assertEqual((info.epoch, info.rank, info.world, info.num_experts), (9, 1, 2, 7))
        self.assertEqual(info.local_experts, [4, 5, 6])
        self.assertEqual(info.placement[4], (1, 0))
        self.assertEqual((info.n_lost, info.action, info.apply_ms), (4, "shrink", 12.5))
        empty = membership.info_from_struct(membership.MembershipInfoT(), 0, fenced=True)
        self.assertEqual((empty.local_experts, empty.placement, empty.action), ([], [], "none"))
        self.assertTrue(empty.fenced and not empty.changed)


class TestMembershipArgs(unittest.TestCase):
    def test_membership_args(self):
        for kw, needle in (({"lease_ttl_s": -1}, "lease_ttl_s"), ({"job": ""}, "job"),
                           ({"endpoint": 3}, "endpoint")):
            with self.assertRaises(errors.InvalidArgument) as cm:
                elasticep.Membership(**kw)
            self.assertIn(needle, str(cm.exception))

    def test_buffer_membership_args_before_torch(self):
        with self.assertRaises(errors.InvalidArgument) as cm:
            elasticep.Buffer(None, 128, 1024, 8, 64, membership="agent", max_world=4)
        self.assertIn("membership", str(cm.exception))
        fake = membership.Membership.__new__(membership.Membership)  # no agent behind it
        for kw, needle in (({"max_world": 0}, "max_world"),
                           ({"max_world": 4, "join_timeout_ms": -1}, "join_timeout_ms")):
            with self.assertRaises(errors.InvalidArgument) as cm:
                elasticep.Buffer(None, 128, 1024, 8, 64, membership=fake, **kw)
            self.assertIn(needle, str(cm.exception))
        with self.assertRaises(errors.InvalidArgument) as cm:
            elasticep.Buffer("env", 128, 1024, 8, 64, membership=fake, max_world=4)
        self.assertIn("group_or_bootstrap", str(cm.exception))


class _StandInLib:
    """A stand-in for libeep's GPU runtime (not under test here): eep_membership_sync writes a
    view's info as libeep would; the Buffer's marshalling and bookkeeping are what is tested."""

    def __init__(self, status=0):
        self.status, self.reserved, self.rows_args = status, 0, None
        self.local = (ctypes.c_int32 * 2)(5, 6)
        self.place = (membership.ExpertPlace * 7)(*[(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0),
                                                    (2, 1)])

    def eep_membership_sync(self, rt, changed_p, addr):
        s = membership.MembershipInfoT.from_address(addr)
        assert s.size == ctypes.sizeof(membership.MembershipInfoT)
        s.epoch, s.rank, s.world, s.num_experts, s.num_local = 7, 2, 3, 7, 2
        s.local_experts = ctypes.cast(self.local, ctypes.POINTER(ctypes.c_int32))
        s.placement = ctypes.cast(self.place, ctypes.POINTER(membership.ExpertPlace))
        s.action = b"shrink"
        changed_p._obj.value = 1
        return self.status

    def eep_ep_recv_rows_max_placed(self, world, t, k, e, align, place):
        pairs = ctypes.cast(place, ctypes.POINTER(ctypes.c_int32))
        self.rows_args = (world, t, k, e, align, [pairs[i] for i in range(14)])
        return 1234

    def eep_ep_reserve(self, rt, shapes, n):
        self.reserved += 1
        return 0


class TestBufferMembershipSync(unittest.TestCase):
    def _buffer(self, lib):
        b = elasticep.Buffer.__new__(elasticep.Buffer)
        b._lib, b._rt, b.membership, b.info = lib, ctypes.c_void_p(0x20), object(), None
        b.max_tokens, b.num_topk, b.num_experts, b.alignment = 16, 2, 7, 1
        b._shapes = (_lib.ShapeDesc * 1)()
        b.rank, b.world, b.num_local, b.rows_max = -1, 4, 0, 0
        return b

    def test_a_view_resizes_the_buffer(self):
        lib = _StandInLib()
        b = self._buffer(lib)
        info = b.membership_sync()
        self.assertTrue(info.changed and not info.fenced)
        self.assertEqual((b.rank, b.world, b.num_local, b.rows_max), (2, 3, 2, 1234))
        self.assertEqual(info.local_experts, [5, 6])
        self.assertEqual(lib.rows_args, (3, 16, 2, 7, 1, [0, 0, 0, 1, 0, 2, 1, 0, 1, 1, 2, 0, 2, 1]))
        self.assertEqual(lib.reserved, 1)  # shapes reserved again for the view

    def test_fenced_is_an_answer_not_an_error(self):
        lib = _StandInLib(status=_lib.STATUS_FENCED)
        b = self._buffer(lib)
        info = b.membership_sync()
        self.assertTrue(info.fenced)
        self.assertEqual((b.rank, b.world, lib.reserved), (-1, 4, 0))  # nothing taken from it

    def test_without_membership(self):
        b = self._buffer(_StandInLib())
        b.membership = None
        with self.assertRaises(errors.InvalidArgument):
            b.membership_sync()
        with self.assertRaises(errors.InvalidArgument):
            elasticep.Buffer.membership_fault(b, "forward")

def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _etcd_keys(url, prefix):
    key = base64.b64encode(prefix.encode()).decode()
    end = base64.b64encode(prefix[:-1].encode() + bytes([prefix.encode()[-1] + 1])).decode()
    req = urllib.request.Request(url + "/v3/kv/range", data=json.dumps(
        {"key": key, "range_end": end, "keys_only": True}).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        kvs = json.load(r).get("kvs", [])
    return [base64.b64decode(kv["key"]).decode() for kv in kvs]


class TestMembershipEtcd(unittest.TestCase):
    """A real member: libeep_agent.so against a real etcd on 127.0.0.1 (bounded, stopped)."""

    def setUp(self):
        etcd = shutil.which("etcd")
        if etcd is None:
            self.skipTest("no etcd binary on PATH (scripts/deps.sh test installs it)")
        try:
            membership.agent_lib()
        except errors.LibraryNotFound as e:
            self.skipTest("libeep_agent.so is not loadable here: %s" % e)
        self.dir = tempfile.mkdtemp(prefix="eep-py-etcd-")
        cport, pport = _free_port(), _free_port()
        self.url = "http://127.0.0.1:%d" % cport
        self.proc = subprocess.Popen(
            [etcd, "--data-dir", os.path.join(self.dir, "data"), "--listen-client-urls", self.url,
             "--advertise-client-urls", self.url, "--listen-peer-urls",
             "http://127.0.0.1:%d" % pport, "--initial-advertise-peer-urls",
             "http://127.0.0.1:%d" % pport, "--initial-cluster",
             "default=http://127.0.0.1:%d" % pport],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.time() + 20
        while time.time() < end:
            try:
                urllib.request.urlopen(self.url + "/health", timeout=1).read()
                break
            except Exception:
                time.sleep(0.1)
        else:
            self.tearDown()
            self.fail("etcd did not answer on %s within 20 s" % self.url)
        self.env = {k: os.environ.get(k) for k in ("EEP_ETCD_ENDPOINTS", "EEP_JOB")}
        os.environ["EEP_ETCD_ENDPOINTS"] = self.url.replace("http://", "")
        os.environ["EEP_JOB"] = "py-membership-%d" % os.getpid()

    def tearDown(self):
        if getattr(self, "env", None):
            for k, v in self.env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        if getattr(self, "proc", None):
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(getattr(self, "dir", ""), ignore_errors=True)

    def test_member_registers_and_leaves(self):
        job = os.environ["EEP_JOB"]
        m = elasticep.Membership(job=job, lease_ttl_s=5)
        mid = m.member_id
        self.assertTrue(mid)
        self.assertIn("/eep/%s/members/%s" % (job, mid), _etcd_keys(self.url, "/eep/%s/" % job))
        self.assertTrue(m.provider().value)
        m.close()
        self.assertNotIn("/eep/%s/members/%s" % (job, mid),
                         _etcd_keys(self.url, "/eep/%s/" % job))
        with self.assertRaises(errors.InvalidArgument):
            m.provider()

    def test_no_etcd_is_a_control_plane_error(self):
        os.environ["EEP_ETCD_ENDPOINTS"] = "127.0.0.1:%d" % _free_port()
        t0 = time.time()
        with self.assertRaises(errors.ControlPlaneError):
            elasticep.Membership(job=os.environ["EEP_JOB"], lease_ttl_s=3)
        self.assertLess(time.time() - t0, 30)


if __name__ == "__main__":
    unittest.main()
