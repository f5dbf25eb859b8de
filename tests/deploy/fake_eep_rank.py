#!/usr/bin/env python3
"""tests/deploy/fake_eep_rank.py - a FAKE eep-rank for the CPU tests of scripts/gpu_elastic.py
and scripts/eep_run.py (make run's driver).

No GPU, no etcd: the fake ranks of one test find each other through pid files in $FAKE_RANK_DIR
(the members are the registered processes that are alive and not stopped).  They print eep-rank's
JSON lines (view, step, fault, fenced, dying, inject), honour --arm-file + SIGUSR1: the old line
"PHASE KILL|STOP" raises SIGKILL or SIGSTOP on themselves, a fault spec (tools/eep_fault.h) plays
its effect - kill/stop as that, exit* exits 4, stall/delay sleep, hang and corrupt-id leave the
membership for a while (as eviction does) and come back fenced - each after an "inject" line.
Woken from SIGSTOP, they say they are fenced and register again.  With FAKE_WRONG=1 the rank
whose NCCL_HOSTID ends in -0 prints one step with a wrong result ("bad") and exits 3.  Its view
lines carry the EEP_DEVICE and NCCL_HOSTID it was given (fake_device, fake_hostid) for the tests.
"""
import argparse
import json
import os
import signal
import sys
import time

armed = []


def now_ms():
    return int(time.time() * 1000)


def say(**kw):
    kw = dict({"t_ms": now_ms()}, **kw)
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


def state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def members(d):
    out = []
    for name in sorted(os.listdir(d)):
        pid = int(name.split("-")[1])
        st = state(pid)
        if st is None or st == "Z":
            try:
                os.unlink(os.path.join(d, name))
            except OSError:
                pass
        elif st != "T":
            out.append(pid)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--arm-file")
    p.add_argument("--steps", default="barrier")
    args, _ = p.parse_known_args()
    d = os.environ["FAKE_RANK_DIR"]
    serial = [0]

    def register():
        serial[0] += 1
        open(os.path.join(d, f"{now_ms():015d}{serial[0]:03d}-{os.getpid()}"), "w").close()

    def unregister():
        for name in os.listdir(d):
            if name.endswith(f"-{os.getpid()}"):
                os.unlink(os.path.join(d, name))

    register()
    signal.signal(signal.SIGUSR1, lambda s, f: armed.append(1))
    signal.signal(signal.SIGTERM, lambda s, f: sys.exit(0))
    wrong = os.environ.get("FAKE_WRONG") == "1" and os.environ.get("NCCL_HOSTID", "").endswith("-0")
    epoch, world, step, last = 0, 0, 0, None
    while True:
        ms = members(d)
        if ms != last:
            if last is not None and len(ms) < len(last):
                say(event="fault", epoch=epoch, status="EEP_ERR_PEER_TIMEOUT", phase="barrier", peer=-1)
                time.sleep(0.05)
            epoch += 1
            world = len(ms)
            say(event="view", epoch=epoch, rank=ms.index(os.getpid()), world=world, action="shrink",
                apply_ms=1.0, local_experts=1, degraded=0, fds=5, gpu_free_mb=0,
                fake_device=os.environ.get("EEP_DEVICE"), fake_hostid=os.environ.get("NCCL_HOSTID"))
            last = ms
        if armed:
            armed.clear()
            words = open(args.arm_file).read().split()
            if len(words) == 2 and words[1] in ("KILL", "STOP"):
                phase, sig = words
            else:
                kv = dict(w.split("=", 1) for w in words[1:])
                act, phase = words[0], kv.get("phase", "dispatch")
                say(event="inject", action=act, phase=phase, epoch=epoch, step=step + 1,
                    ms=int(kv.get("ms", 0)))
                sig = {"kill": "KILL", "stop": "STOP"}.get(act)
                if act.startswith("exit"):
                    say(event="dying", epoch=epoch, phase=phase, signal="EXIT")
                    os._exit(4)
                if act in ("stall", "delay"):
                    time.sleep(int(kv["ms"]) * int(kv.get("steps", 1)) / 1000)
                if act in ("hang", "corrupt-id"):
                    unregister()
                    if act == "corrupt-id":
                        say(event="fault", epoch=epoch, status="EEP_ERR_DEVICE_FAULT",
                            phase="dispatch", peer=-1)
                    idle_ms = int(kv.get("ms", 0)) if act == "hang" else 300
                    end = time.time() + (idle_ms / 1000 if idle_ms else 1e9)
                    while time.time() < end:
                        time.sleep(0.01)
                    say(event="fenced", epoch=epoch, status="EEP_ERR_FENCED")
                    register()
                    last = None
                    continue
                if sig is None:
                    continue
            say(event="dying", epoch=epoch, phase=phase, signal=sig)
            if sig == "KILL":
                os.kill(os.getpid(), signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGSTOP)
            say(event="fenced", epoch=epoch, status="EEP_ERR_LEASE_LOST")
            unregister()
            time.sleep(0.3)
            register()
            last = None
            continue
        step += 1
        e = dict(event="step", epoch=epoch, rank=ms.index(os.getpid()) if os.getpid() in ms
                 else -1, world=world, step=step, ok=1, mode=args.steps, barrier_us=20,
                 dispatch_us=80 if args.steps == "moe" else 0,
                 combine_us=95 if args.steps == "moe" else 0, status="EEP_OK")
        if wrong and step == 3:
            e.update(ok=0, bad="out")
            say(**e)
            sys.exit(3)  # as eep-rank does after a wrong step
        say(**e)
        time.sleep(0.01)


if __name__ == "__main__":
    main()
