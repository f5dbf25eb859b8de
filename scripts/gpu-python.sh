#!/usr/bin/env bash
# scripts/gpu-python.sh [parts...] - the Python package on the GPU machine (issue 26): one summary
# line per part, then every check's line at the end; logs in /tmp/eep-gpu-python and, under $OUT,
# summary.txt, key.txt and gpu-python-logs.tar.gz.
#
# Parts (default: all, in this order; about 6-9 minutes on 1 x H200, most of it JIT compiles):
#   build   libeep.so, the GIN test plugin, eep-bench, libeep_ref.so (the CPU reference, for the
#           tests' expected values); `pip install --no-build-isolation --no-deps --target` of
#           ./python (the machine has torch and no internet), else PYTHONPATH=python
#   cpu     python/tests/test_cpu.py, test_autograd_cpu.py and test_buffer_mock.py (the Buffer's
#           marshalling against a stand-in libeep) with the machine's torch
#   one     python/tests/gpu_python.py at one rank (C reference, autograd, CUDA graph, overhead)
#   two     the same at 2 ranks on the one GPU (scripts/one-gpu-cluster.sh)
#   four    the same at 4 ranks
#   bench   the same pair from C (eep-bench ep, T 32 H 1024 K 4 E 8, no-cpu-sync), to set
#           against the OVERHEAD lines of `one`
#   train   python/examples/train_moe.py at one rank (ElasticEP and the torch reference, 300
#           steps), --fp8, and --layout rank
#   train2  the example at 2 ranks (150 steps)
#   members python/tests/gpu_membership.py: etcd + eepd, 3 Python ranks with elasticep.Membership,
#           a SIGKILL (shrink) and a newcomer (grow); needs build/device-bundle.tar.xz carried
#           (scripts/device-bundle.sh: etcd, eepd, libeep_agent.so); not in the default parts
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
# logs in a work folder; $OUT (the device tool's, at most 8 files come back) gets summary.txt,
# key.txt (every PASS/FAIL/RESULT/OVERHEAD/SUMMARY line) and one tarball of the logs
out=/tmp/eep-gpu-python
rm -rf "$out" && mkdir -p "$out"
finish() {
    grep -hE "^(PASS|FAIL|RESULT|OVERHEAD|SUMMARY|eep step|ref step)" "$out"/*.log \
        "$out"/ranks*/rank*.log 2>/dev/null | awk '!seen[$0]++' >"$out/key.txt"
    [ -f "$out/bench.log" ] && { echo "== eep-bench (C)"; tail -12 "$out/bench.log"; } \
        >>"$out/key.txt"
    echo "==== key lines"
    cat "$out/key.txt"
    echo "==== summary"
    cat "$out/summary.txt"
    if [ -n "${OUT:-}" ]; then
        cp "$out/summary.txt" "$out/key.txt" "$OUT/" 2>/dev/null
        tar -C /tmp -czf "$OUT/gpu-python-logs.tar.gz" eep-gpu-python 2>/dev/null
    fi
}
trap finish EXIT
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 EEP_JIT_CACHE_DIR=${EEP_JIT_CACHE_DIR:-/tmp/eep-jit-py}
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(build cpu one two four bench train train2)
echo "gpu-python $(date -u +%FT%TZ): parts ${parts[*]}" | tee "$out/summary.txt"

run_part() {
    local name=$1 limit=$2 start rc
    shift 2
    start=$(date +%s)
    if [ "$(type -t "$1")" = function ]; then # bounded inside (one-gpu-cluster --timeout)
        "$@" >"$out/$name.log" 2>&1
    else
        timeout "$limit" "$@" >"$out/$name.log" 2>&1
    fi
    rc=$?
    echo "$name: exit $rc after $(( $(date +%s) - start )) s" | tee -a "$out/summary.txt"
    grep -E "^(PASS|FAIL|RESULT|OVERHEAD|SUMMARY|eep step|ref step)|passed|failed|us" \
        "$out/$name.log" | tail -40
    return $rc
}

build() {
    make -j"$(nproc)" build/lib/libeep.so build/lib/libnccl-net-eep-gin.so build/bin/eep-bench ||
        return 1
    cc -shared -fPIC -O2 -std=c11 -ffp-contract=off -Iinclude -I. tests/common/ep_reference.c \
        -o build/lib/libeep_ref.so -L"$root/build/lib" -l:libeep.so \
        -Wl,-rpath,"$root/build/lib" -lm || return 1
    rm -rf /tmp/eep-site
    if ELASTICEP_LIBRARY=$root/build/lib/libeep.so python3 -m pip install -q \
        --no-build-isolation --no-deps --target /tmp/eep-site ./python; then
        echo "installed with pip into /tmp/eep-site"
    else
        echo "pip install failed: using PYTHONPATH=python (the source tree)"
    fi
    python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.is_available())'
}

py_path() {
    if [ -f /tmp/eep-site/elasticep/__init__.py ]; then
        export PYTHONPATH=/tmp/eep-site
    else
        export PYTHONPATH=$root/python ELASTICEP_LIBRARY=$root/build/lib/libeep.so
    fi
}

members() { # the membership path: the bundle's etcd, eepd and agent library
    local b=/tmp/eep-py-bundle rc
    [ -f build/device-bundle.tar.xz ] ||
        { echo "members: no build/device-bundle.tar.xz (scripts/device-bundle.sh, carried)"; return 1; }
    rm -rf "$b" && mkdir -p "$b" && tar -C "$b" -xJf build/device-bundle.tar.xz || return 1
    [ -f "$b/lib/libeep_agent.so" ] ||
        { echo "members: the bundle has no lib/libeep_agent.so: run scripts/device-bundle.sh again"; return 1; }
    LD_LIBRARY_PATH=$b/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
        ELASTICEP_AGENT_LIBRARY=$b/lib/libeep_agent.so \
        scripts/one-gpu-cluster.sh --ranks 1 --no-mps --timeout 280 --logs "$out/members" -- \
        python3 "$root/python/tests/gpu_membership.py" --eepd-bin "$b/build/bin/eepd" \
        --etcd-bin "$b/bin/etcd" --work "$out/members-work"
    rc=$?
    grep -hE "^(PASS|FAIL|RESULT)" "$out/members"/rank*.log 2>/dev/null
    return $rc
}

cluster() { # N, then the command
    local n=$1
    shift
    # time-sliced unless GPU_PYTHON_MPS=1, as deploy/launch.sh and make gpu-elastic: the
    # configuration the one-GPU cluster's data-plane runs are measured in (bench/RESULTS.md)
    scripts/one-gpu-cluster.sh --ranks "$n" $([ "${GPU_PYTHON_MPS:-0}" = 1 ] || echo --no-mps) \
        --timeout 280 --logs "$out/ranks$n" -- "$@"
    local rc=$?
    cat "$out/ranks$n"/rank*.log 2>/dev/null | grep -E "^(PASS|FAIL|RESULT|OVERHEAD|SUMMARY)"
    return $rc
}

for part in "${parts[@]}"; do
    case $part in
    build) run_part build 300 build || exit 1 ;;
    cpu) py_path; run_part cpu 180 sh -c 'r=0; for t in test_cpu test_autograd_cpu \
             test_buffer_mock; do python3 python/tests/$t.py -v || r=1; done; exit $r' ;;
    one) py_path; run_part one 280 python3 python/tests/gpu_python.py ;;
    two) py_path; run_part two 300 cluster 2 python3 "$root/python/tests/gpu_python.py" ;;
    four) py_path; run_part four 300 cluster 4 python3 "$root/python/tests/gpu_python.py" ;;
    bench) run_part bench 120 build/bin/eep-bench ep --nranks 1 --tokens 32 --hidden 1024 \
               --topk 4 --experts 8 --align 4 --mode no-cpu-sync --iters 200 ;;
    train) py_path; run_part train 400 sh -c 'python3 python/examples/train_moe.py --steps 300 &&
               python3 python/examples/train_moe.py --steps 300 --fp8 &&
               python3 python/examples/train_moe.py --steps 300 --layout rank' ;;
    train2) py_path; run_part train2 300 cluster 2 python3 "$root/python/examples/train_moe.py" \
                --steps 150 ;;
    members) py_path; run_part members 300 members ;;
    *) echo "gpu-python.sh: unknown part '$part'" >&2; exit 2 ;;
    esac
done
