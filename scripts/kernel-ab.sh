#!/usr/bin/env bash
# scripts/kernel-ab.sh - A/B of a kernel change in one device call: the same eep-bench binary runs
# the kernels of this tree and those of an older revision (JIT-compiled from the headers that
# EEP_JIT_SOURCE_ROOT names), one after the other, so that both rows come from one run on one
# machine.  Host code is the same in both halves: only kernels/ and include/ differ.
#
#   scripts/kernel-ab.sh prepare REV          (here, with git: REV's kernels/ and include/ into
#                                              build/kernel-ab/REV; carry "build/kernel-ab")
#   scripts/kernel-ab.sh run REV -- EEP-BENCH-ARGS...   (on the GPU machine)
#       e.g. scripts/kernel-ab.sh run 06d730a -- ep --nranks 1 --experts 256 --hidden 7168 \
#                --topk 8 --tokens 4096 --layout rank --num-sms 8,24,0 --no-check --iters 50
#
# run prints eep-bench's table rows twice, prefixed "new" and "old" (REV), and the ratio new / old
# of each "ours" row's dispatch and combine us.  Its kernels compile into one JIT cache
# (EEP_JIT_CACHE_DIR, default build/kernel-ab/jit): the two trees' keys differ by their headers.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
usage() { sed -n '2,18p' "$0" >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1 rev=$2
shift 2
dir=build/kernel-ab/$rev
case $cmd in
prepare)
    git rev-parse --verify -q "$rev^{commit}" >/dev/null || { echo "kernel-ab: no revision $rev" >&2; exit 2; }
    rm -rf "$dir" && mkdir -p "$dir" || exit 1
    git archive "$rev" kernels include | tar -x -C "$dir" || exit 1
    echo "kernel-ab: $rev's kernels/ and include/ in $dir (carry build/kernel-ab)"
    ;;
run)
    [ "${1:-}" = -- ] || usage
    shift
    [ -d "$dir/kernels" ] || { echo "kernel-ab: $dir missing: run 'prepare $rev' first and carry build/kernel-ab" >&2; exit 2; }
    bench=${EEP_BENCH:-build/bin/eep-bench}
    [ -x "$bench" ] || make -s "$bench" >&2 || exit 1
    export EEP_JIT_CACHE_DIR=${EEP_JIT_CACHE_DIR:-$root/build/kernel-ab/jit}
    out=$(mktemp -d)
    "$bench" "$@" >"$out/new" 2>&1 || { cat "$out/new" >&2; exit 1; }
    EEP_JIT_SOURCE_ROOT=$root/$dir "$bench" "$@" >"$out/old" 2>&1 || { cat "$out/old" >&2; exit 1; }
    for v in new old; do grep -E '^\|' "$out/$v" | sed "s/^/$v /"; done
    # the ratio of each "ours" row (same budget column, same order in both halves)
    paste -d'\n' <(grep -E '^\| ours ' "$out/new") <(grep -E '^\| ours ' "$out/old") |
        awk -F'|' 'NR % 2 == 1 { d = $10; c = $12; b = $16; next }
                   { printf "new/old %-14s dispatch %.2f  combine %.2f\n", b, d / $10, c / $12 }'
    rm -rf "$out"
    ;;
*) usage ;;
esac
