#!/usr/bin/env bash
# test_layering.sh [ROOT] - the floors of docs/architecture.md, checked on the tree and the built
# library so that a later change cannot quietly break them (tests/repo/test_layering_plants.sh
# plants a violation of each rule and expects this to name it):
#  1. libeep (the data plane) links only NCCL and libc (CUDA and NVRTC come through dlopen);
#  2. util/ includes nothing above it (only util/ and include/eep/status.h, version.h);
#  3. control/ includes nothing of elastic/, kernels/ or barrier/ (only include/eep/), and no CUDA
#     or NCCL header;
#  4. elastic/ includes nothing of control/;
#  5. bench/ and tools/ include no private *_int.h header and nothing of tests/ but tests/common/;
#  6. device code (kernels/, barrier/, bench/kernels/) includes no host header (util/, elastic/,
#     control/);
#  7. the environment is read only in util/config.c (the knob tables) and gin/gin_log.c (the NCCL
#     plugin, a library of its own that NCCL loads);
#  8. device code never traps (a trap kills the survivor's CUDA context).
# ROOT defaults to this checkout; LIBEEP_SO names the library to check (default: the build's).
set -u
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root" || exit 1
build=${BUILD:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
lib=${LIBEEP_SO:-$build/lib/libeep.so}
failed=0
fail() { echo "FAIL rule $1: $2"; failed=1; }
# includes "X" of the files under the given folders, as "file:line:#include ..."
incs() { grep -rnE '#[[:space:]]*include[[:space:]]*"' --include='*.c' --include='*.cc' \
         --include='*.h' --include='*.cu' --include='*.cuh' "$@" 2>/dev/null; }

if [ -f "$lib" ]; then
    for n in $(readelf -d "$lib" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p'); do
        case $n in
            libnccl.so.2|libc.so.6|libm.so.6|libdl.so.2|libpthread.so.0|librt.so.1|libstdc++.so.6|libgcc_s.so.1|ld-linux*) ;;
            # make asan / make ubsan link the sanitizer's runtime into everything they build
            libasan.so.*|libubsan.so.*) [ -n "${SANITIZER:-}" ] || fail 1 "libeep.so needs $n outside a sanitizer build" ;;
            *) fail 1 "libeep.so needs $n (allowed: NCCL, libc and its parts)" ;;
        esac
    done
else
    fail 1 "$lib is missing (build first)"
fi

hits=$(incs util | grep -vE '#[[:space:]]*include[[:space:]]*"(util/|eep/status\.h"|eep/version\.h")')
[ -z "$hits" ] || fail 2 "util/ includes what is above it: $hits"

hits=$(incs control | grep -E '"(elastic|kernels|barrier)/')
[ -z "$hits" ] || fail 3 "control/ includes the data plane's private headers: $hits"
hits=$(grep -rnE '#[[:space:]]*include[[:space:]]*[<"](cuda|cuda_runtime|nvrtc|nccl|nccl_device)(\.h|/)' control 2>/dev/null)
[ -z "$hits" ] || fail 3 "control/ includes CUDA or NCCL: $hits"

hits=$(incs elastic | grep -E '"control/')
[ -z "$hits" ] || fail 4 "elastic/ includes the control plane: $hits"

hits=$(incs bench tools | grep -E '_int\.h"|"tests/' | grep -v '"tests/common/')
[ -z "$hits" ] || fail 5 "bench/ or tools/ include private or test headers: $hits"

hits=$(incs kernels barrier bench/kernels | grep -E '"(\.\./)*(util|elastic|control)/')
[ -z "$hits" ] || fail 6 "device code includes host headers: $hits"

hits=$(grep -rnE '\bgetenv[[:space:]]*\(' --include='*.c' --include='*.cc' --include='*.h' \
       --include='*.cu' --include='*.cuh' util elastic control barrier kernels tools include gin \
       bench 2>/dev/null | grep -vE '^(util/config\.c|gin/gin_log\.c):')
[ -z "$hits" ] || fail 7 "getenv outside util/config.c and gin/gin_log.c: $hits"

hits=$(grep -rnE '__trap[[:space:]]*\(|asm[^;]*\btrap\b' kernels barrier bench/kernels 2>/dev/null)
[ -z "$hits" ] || fail 8 "device code traps: $hits"

[ $failed -eq 0 ] && echo "ok: layering rules 1-8 hold ($(readelf -d "$lib" | grep -c NEEDED) libraries needed by libeep.so)"
exit $failed
