#!/usr/bin/env bash
# test_layering_plants.sh - tests/repo/test_layering.sh fails on a violation of each of its rules:
# the tree's sources are copied to a scratch folder, one violation is planted at a time, and the
# lint must fail naming that rule (and pass on the unplanted copy).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
lint=$root/tests/repo/test_layering.sh
build=${BUILD:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
lib=$build/lib/libeep.so
[ -f "$lib" ] || { echo "SKIP: $lib is missing (build first)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
fresh() {
    rm -rf "$tmp/tree" && mkdir -p "$tmp/tree"
    (cd "$root" && git ls-files -z util elastic control kernels barrier bench tools include gin 2>/dev/null |
        xargs -0 cp --parents -t "$tmp/tree") 2>/dev/null
}
expect() { # expect RULE WHAT [LIBEEP_SO]
    local out
    out=$(LIBEEP_SO=${3:-$lib} "$lint" "$tmp/tree" 2>&1)
    if [ $? -ne 0 ] && echo "$out" | grep -q "FAIL rule $1:"; then
        echo "ok: rule $1 caught: $2"
    else
        echo "FAIL: rule $1 not caught ($2): $out"
        failed=1
    fi
}
fresh
if out=$(LIBEEP_SO=$lib "$lint" "$tmp/tree" 2>&1); then echo "ok: the copy passes"; else
    echo "FAIL: the unplanted copy fails: $out"; failed=1; fi

printf 'int eep_plant(void) { return 0; }\n' >"$tmp/plant.c"
if cc -shared -fPIC -o "$tmp/libplant.so" "$tmp/plant.c" -Wl,--no-as-needed -lcmocka 2>/dev/null; then
    expect 1 "a library that needs libcmocka" "$tmp/libplant.so"
else
    echo "FAIL: could not build the planted library"; failed=1
fi
fresh;
    echo '#include "elastic/runtime/runtime.h"' >>"$tmp/tree/util/log.c"
expect 2 "util/ including elastic/"
fresh; echo '#include "elastic/ep/ep_layout.h"' >>"$tmp/tree/control/eepd/eepd.c"
expect 3 "control/ including elastic/"
fresh; echo '#include <cuda.h>' >>"$tmp/tree/control/agent/agent.c"
expect 3 "control/ including CUDA"
fresh; echo '#include "control/agent/agent.h"' >>"$tmp/tree/elastic/ep/ep.c"
expect 4 "elastic/ including control/"
fresh; echo '#include "elastic/jit/jit_int.h"' >>"$tmp/tree/bench/eep_bench.c"
expect 5 "bench/ including a private _int.h"
fresh; echo '#include "tests/emu/ep_kernel_shim.h"' >>"$tmp/tree/tools/eep_info.c"
expect 5 "tools/ including tests/ outside tests/common/"
fresh; echo '#include "../../util/log.h"' >>"$tmp/tree/kernels/ep/combine.cuh"
expect 6 "a kernel including a host header"
fresh; echo 'static const char *p(void) { return getenv("X"); }' >>"$tmp/tree/elastic/ep/ep.c"
expect 7 "getenv outside util/config.c"
fresh; echo '__device__ void eep_plant(void) { __trap(); }' >>"$tmp/tree/barrier/barrier_kernel.cuh"
expect 8 "a trap in device code"
exit $failed
