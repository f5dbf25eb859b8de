#!/usr/bin/env bash
# test_layering.sh - the layering rules of DESIGN.md and STYLE.md, checked on the tree and the
# built library so that a later change cannot quietly break them:
#  - libeep (the data plane) links only NCCL and libc (CUDA and NVRTC come through dlopen);
#  - device code (kernels/, barrier/) includes no host header of elastic/ or control/;
#  - control/ never includes CUDA or NCCL headers;
#  - the environment is read only in util/config.c (the knob tables);
#  - device code never traps (a trap kills the survivor's CUDA context).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
cd "$root" || exit 1
failed=0
fail() { echo "FAIL: $*"; failed=1; }

lib=$build/lib/libeep.so
if [ -f "$lib" ]; then
    needed=$(readelf -d "$lib" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p')
    for n in $needed; do
        case $n in
            libnccl.so.2|libc.so.6|libm.so.6|libdl.so.2|libpthread.so.0|librt.so.1|libstdc++.so.6|libgcc_s.so.1|ld-linux*) ;;
            # make asan / make ubsan link the sanitizer's runtime into everything they build
            libasan.so.*|libubsan.so.*) [ -n "${SANITIZER:-}" ] || fail "libeep.so needs $n outside a sanitizer build" ;;
            *) fail "libeep.so needs $n (allowed: NCCL, libc and its parts)" ;;
        esac
    done
    echo "libeep.so needs: $(echo $needed)"
else
    fail "$lib is missing (build first)"
fi

hits=$(grep -rnE '#[[:space:]]*include[[:space:]]*"(elastic|control)/' kernels barrier 2>/dev/null)
[ -z "$hits" ] || fail "device code includes host headers: $hits"

hits=$(grep -rnE '#[[:space:]]*include[[:space:]]*[<"](cuda|cuda_runtime|nvrtc|nccl|nccl_device)(\.h|/)' control 2>/dev/null)
[ -z "$hits" ] || fail "control/ includes CUDA or NCCL: $hits"

hits=$(grep -rnE '\bgetenv[[:space:]]*\(' --include='*.c' --include='*.cc' --include='*.h' \
       --include='*.cu' --include='*.cuh' elastic control barrier kernels tools include 2>/dev/null |
       grep -v '^elastic/config\.c:')
[ -z "$hits" ] || fail "getenv outside util/config.c: $hits"

hits=$(grep -rnE '__trap[[:space:]]*\(|asm[^;]*\btrap\b' kernels barrier 2>/dev/null)
[ -z "$hits" ] || fail "device code traps: $hits"

[ $failed -eq 0 ] && echo "ok: layering rules hold"
exit $failed
