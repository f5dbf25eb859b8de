#!/usr/bin/env bash
# scripts/gpu-elastic.sh [--rounds N] [--steps barrier|moe] [--ranks N] [--budget-s S]
#                        [--timeout-ms MS] [--mps] [--merge SUMMARY_JSON] [--nccl-debug LVL]
#                        [--settle-s S] [--gpus G] [--layout expert|rank] [--mode MODE]
#                        - `make gpu-elastic`: the elastic GPU check.
#
# N ranks (default 4) of eep-rank on the one GPU (scripts/one-gpu-cluster.sh: own NCCL_HOSTIDs,
# the GIN test plugin; time-sliced, or with --mps under an MPS daemon of its own), or with
# --gpus G (2 or more; N defaults to G) one rank per GPU, NVLink peers of one NCCL node, with etcd
# and eepd on 127.0.0.1.  --merge takes an earlier call's summary.json (carried over, e.g. as
# build/gpu-elastic-prior.json): its rounds count toward --rounds of each kind, so 20 rounds a
# kind add up over several device calls of at most 10 minutes.  Rounds of each
# kind (barrier steps: SIGKILL and SIGSTOP of a rank right after it launched a barrier kernel;
# --steps moe adds dispatch and combine, in eep-rank's --layout and --mode: expert-major and
# no-cpu-sync unless given) measure detection, interruption and grow times and check
# that no survivor hangs, gets a wrong step or dies, and that GPU memory and fds stay flat
# (scripts/gpu_elastic.py has the details).  Output in $OUT (else build/gpu-elastic): summary.txt,
# summary.json, logs.tar.gz (every rank's JSON lines and stderr, eepd, etcd, MPS), build.log.
#
# Binaries: when etcd and the control plane build here (a development machine), from this build;
# on the GPU machine (no etcd, gRPC or protobuf-c) from build/device-bundle.tar.xz, made on the
# development machine by scripts/device-bundle.sh and carried over: libeep.a and the plugin are
# built there against its NCCL, eep-rank is linked from the bundle's objects (as device-run.sh).
# --budget-s (300) bounds the rounds: kinds alternate, so a budget that runs out leaves every kind
# measured (summary.txt says how many rounds ran); the whole command, build included, fits in
# ~8 minutes with the default.  --nccl-debug (WARN) is the ranks' NCCL_DEBUG, with
# NCCL_DEBUG_SUBSYS from the environment (default INIT,NET: INFO then carries the GIN plugin's
# registration census).  --settle-s (0) waits S s after the rounds and judges the fds on one more
# sample (a connection that times out a while after each view is no leak; the fd kinds that
# moved are printed, e.g. the sockets NCCL's RAS kept when it was on).  Exit 0 when every
# round passed, 1 otherwise, 2 for usage, 77 without a GPU.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
rounds=20 steps=barrier ranks=4 budget=300 timeout_ms=500 mps_flag=--no-mps merge="" nccl_debug=WARN
settle_s=0 gpus=0 ranks_given=0 layout=expert mode=no-cpu-sync
while [ $# -gt 0 ]; do
    case $1 in
        --rounds) rounds=$2; shift 2 ;;
        --steps) steps=$2; shift 2 ;;
        --ranks) ranks=$2; ranks_given=1; shift 2 ;;
        --gpus) gpus=$2; shift 2 ;;
        --budget-s) budget=$2; shift 2 ;;
        --timeout-ms) timeout_ms=$2; shift 2 ;;
        --no-mps) mps_flag=--no-mps; shift ;; # the default
        --mps) mps_flag=""; shift ;;
        --merge) merge=$2; shift 2 ;;
        --nccl-debug) nccl_debug=$2; shift 2 ;;
        --settle-s) settle_s=$2; shift 2 ;;
        --layout) layout=$2; shift 2 ;;
        --mode) mode=$2; shift 2 ;;
        -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
        *) echo "gpu-elastic: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
for v in "$rounds" "$ranks" "$budget" "$timeout_ms" "$settle_s" "$gpus"; do
    case $v in ''|*[!0-9]*) echo "gpu-elastic: '$v' is not a number" >&2; exit 2 ;; esac
done
case $steps in barrier|moe) ;; *) echo "gpu-elastic: --steps is barrier or moe" >&2; exit 2 ;; esac
case $layout in expert|rank) ;; *) echo "gpu-elastic: --layout is expert or rank" >&2; exit 2 ;; esac
case $mode in no-cpu-sync|cpu-sync|cached) ;;
    *) echo "gpu-elastic: --mode is no-cpu-sync, cpu-sync or cached" >&2; exit 2 ;; esac
[ "$steps" = moe ] || [ "$layout$mode" = expertno-cpu-sync ] ||
    { echo "gpu-elastic: --layout and --mode need --steps moe" >&2; exit 2; }
[ "$gpus" -eq 1 ] && { echo "gpu-elastic: --gpus wants 2 or more (without it: the one GPU)" >&2; exit 2; }
[ "$gpus" -ge 2 ] && [ "$ranks_given" -eq 0 ] && ranks=$gpus
[ "$gpus" -ge 2 ] && [ "$ranks" -gt "$gpus" ] &&
    { echo "gpu-elastic: --gpus $gpus runs one rank per GPU: --ranks $ranks is too many" >&2; exit 2; }

out=${OUT:-$root/build/gpu-elastic}
work=$(mktemp -d "${TMPDIR:-/tmp}/eep-gpu-elastic.XXXXXX")
mkdir -p "$out" "$work/logs"
blog=$out/build.log
: >"$blog"
finish() {
    tar -C "$work" -czf "$out/logs.tar.gz" logs 2>/dev/null
    rm -rf "$work"
}
trap finish EXIT

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-elastic: no GPU here (nvidia-smi lists none): this check runs on the GPU machine"
    exit 77
fi
nvidia-smi -L | head -1
if [ "$gpus" -ge 2 ] && [ "$(nvidia-smi -L | grep -c '^GPU')" -lt "$gpus" ]; then
    echo "gpu-elastic: --gpus $gpus, but nvidia-smi lists $(nvidia-smi -L | grep -c '^GPU')"
    exit 77
fi

bundle=${BUNDLE:-build/device-bundle.tar.xz}
if command -v etcd >/dev/null 2>&1 && pkg-config --exists grpc 2>/dev/null; then
    echo "gpu-elastic: building here (etcd and gRPC present)"
    make -j"$(nproc)" all build/lib/libnccl-net-eep-gin.so >>"$blog" 2>&1 ||
        { echo "gpu-elastic: build failed:"; tail -30 "$blog"; exit 1; }
    bin=$root/build/bin etcd_bin=$(command -v etcd)
elif [ -f "$bundle" ]; then
    echo "gpu-elastic: using $bundle for etcd, eepd and eep-rank's objects"
    b=$work/bundle
    mkdir -p "$b" && tar -C "$b" -xJf "$bundle" || { echo "gpu-elastic: cannot unpack $bundle"; exit 1; }
    [ -f "$b/obj/eep_step.o" ] && [ -f "$b/obj/eep_fault.o" ] ||
        { echo "gpu-elastic: $bundle predates eep-rank's step loop or fault injection (no obj/eep_step.o or obj/eep_fault.o): run scripts/device-bundle.sh again"; exit 1; }
    make -j"$(nproc)" build/lib/libeep.a build/lib/libnccl-net-eep-gin.so >>"$blog" 2>&1 ||
        { echo "gpu-elastic: build of libeep.a / the plugin failed:"; tail -30 "$blog"; exit 1; }
    nccl=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
    nccl_lib=${nccl:+-L$nccl/lib -Wl,-rpath,$nccl/lib}
    # shellcheck disable=SC2086  # nccl_lib is a list of flags
    g++ -o "$b/build/bin/eep-rank" "$b"/obj/eep_rank.o "$b"/obj/eep_rank_fault.o "$b"/obj/eep_step.o "$b"/obj/eep_fault.o "$b"/obj/eep_rank_obs.o \
        "$b"/obj/libeep_agent.a "$b"/obj/libeep_rank.a "$b"/obj/libeep_control.a "$b"/obj/libeep_proto.a build/lib/libeep.a -L"$b/lib" \
        -Wl,-rpath-link,"$b/lib" -lgrpc -lgpr -lprotobuf-c -libverbs -lmicrohttpd -pthread $nccl_lib \
        -l:libnccl.so.2 -ldl >>"$blog" 2>&1 || { echo "gpu-elastic: linking eep-rank failed:"; tail -20 "$blog"; exit 1; }
    export PATH=$b/bin:$PATH LD_LIBRARY_PATH=$b/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    bin=$b/build/bin etcd_bin=$b/bin/etcd
else
    echo "gpu-elastic: no etcd/gRPC here and no $bundle: on the development machine run"
    echo "  scripts/device-bundle.sh   and carry build/device-bundle.tar.xz over"
    exit 1
fi
for x in "$bin/eep-rank" "$bin/eepd" "$etcd_bin"; do
    [ -x "$x" ] || { echo "gpu-elastic: $x is missing"; exit 1; }
done

echo "gpu-elastic: $ranks ranks, --steps $steps, $rounds rounds of each kind, budget $budget s" \
     "(logs: $out/logs.tar.gz)"
drv=(python3 "$root/scripts/gpu_elastic.py" --rank-bin "$bin/eep-rank" --eepd-bin "$bin/eepd"
     --etcd-bin "$etcd_bin" --work "$work/logs" --out "$out" --ranks "$ranks" --rounds "$rounds"
     --steps "$steps" --timeout-ms "$timeout_ms" --budget-s "$budget" --settle-s "$settle_s"
     --gpus "$gpus" --layout "$layout" --mode "$mode")
[ -n "$merge" ] && drv+=(--merge "$(cd "$(dirname "$merge")" && pwd)/$(basename "$merge")")
if [ "$gpus" -ge 2 ]; then
    # one rank per GPU: one NCCL node, NVLink between the ranks (multicast off, as on the lent
    # machines); the driver starts the ranks itself
    NCCL_DEBUG=$nccl_debug NCCL_SOCKET_IFNAME=lo NCCL_NVLS_ENABLE=0 NCCL_MNNVL_ENABLE=0 \
        CUDA_MODULE_LOADING=EAGER timeout --kill-after=10 $((budget + settle_s + 240)) "${drv[@]}"
else
    # The driver runs as the cluster's only "rank": the launcher gives it MPS and the NCCL/plugin
    # environment, and the driver starts the real ranks itself (a newcomer at any time).
    scripts/one-gpu-cluster.sh --ranks 1 $mps_flag --timeout $((budget + settle_s + 240)) \
        --nccl-debug "$nccl_debug" --logs "$work/logs/cluster" -- "${drv[@]}"
fi
rc=$?
echo "---- $out/summary.txt"
cat "$out/summary.txt" 2>/dev/null || { echo "(none: the driver did not finish; its log:)"; tail -40 "$work/logs/cluster/rank0.log"; }
if [ "$rc" -ne 0 ]; then
    echo "---- last lines of each rank's stderr"
    for f in "$work"/logs/rank-*.err; do
        [ -f "$f" ] || continue
        echo "== $(basename "$f")"; tail -8 "$f"
    done
fi
exit "$rc"
