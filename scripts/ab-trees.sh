#!/usr/bin/env bash
# scripts/ab-trees.sh - A/B rounds of kernel variants in one device call.
#
#   scripts/ab-trees.sh prepare NAME [REV]   here: the tree of REV (default HEAD) into
#                                            exp-trees/NAME, to edit; untracked, so it travels
#                                            with the working tree to the GPU machine (never
#                                            commit exp-trees/)
#   scripts/ab-trees.sh run [REPS]           there: builds eep-bench in the working tree ("main")
#                                            and in every exp-trees/*/, then runs each config
#                                            REPS times (default 3), trees interleaved, and
#                                            prints the median pair / eager dispatch / eager
#                                            combine per tree and config
#
# Each tree's eep-bench runs from its own directory with EEP_JIT_SOURCE_ROOT set to it, so its
# kernels are compiled from its sources (before 39cfc71 a binary started from the main checkout
# compiled main's kernel header, whatever tree it came from).  Configs: the lines of
# $AB_CONFIGS (eep-bench ep arguments), by default one rank's decode and prefill rows.  Logs and
# ab.txt go to $OUT; with AB_KEEP=1 every run's whole output too ($OUT/runs.txt, e.g. for
# --trace).  Few files (the device tool brings back only so many): builds.log, runs.txt,
# errors.txt, ab.txt, ab-summary.md.  Check a candidate with `make gpu-check` before trusting its numbers; the
# runs here use --no-check unless a config says otherwise.  $AB_BENCH replaces each tree's
# eep-bench (a stub, to try this script without a GPU).
set -u
out=${OUT:-/tmp/eep-ab}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1

case "${1:-}" in
prepare)
    name=${2:?usage: ab-trees.sh prepare NAME [REV]}
    rev=${3:-HEAD}
    case $name in */* | .* | "") echo "ab-trees.sh: NAME must be a plain name" >&2; exit 2 ;; esac
    [ -e "exp-trees/$name" ] && { echo "ab-trees.sh: exp-trees/$name exists" >&2; exit 2; }
    mkdir -p "exp-trees/$name" && git archive "$rev" | tar -x -C "exp-trees/$name" || exit 1
    echo "exp-trees/$name: $(git rev-parse --short "$rev"); edit it, then run on the GPU machine"
    ;;
run)
    reps=${2:-3}
    ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    [ "$ngpu" -ge 1 ] || [ -n "${AB_BENCH:-}" ] || { echo "ab-trees.sh: no GPU" >&2; exit 1; }
    ranks=$(( ngpu < 2 ? (ngpu < 1 ? 1 : ngpu) : 2 ))
    base="ep --nranks $ranks --experts 256 --hidden 7168 --topk 8 --iters 50"
    configs=${AB_CONFIGS:-"--tokens 128 --align 1 --mode no-cpu-sync --no-check
--tokens 128 --align 1 --mode cached --no-check
--tokens 128 --align 1 --mode no-cpu-sync --dtype fp8 --no-check
--tokens 4096 --mode no-cpu-sync --no-check"}
    mkdir -p "$out"
    export NCCL_NVLS_ENABLE=0
    trees="main"
    for d in exp-trees/*/; do
        [ -f "$d/Makefile" ] && trees="$trees $(basename "$d")"
    done
    dir_of() { if [ "$1" = main ]; then echo "$root"; else echo "$root/exp-trees/$1"; fi; }
    jobs=$(( $(nproc) / $(echo $trees | wc -w) + 1 ))
    for t in $trees; do
        (cd "$(dir_of "$t")" && make -j"$jobs" build/bin/eep-bench >"$out/build-$t.tmp" 2>&1 ||
            echo "ab-trees.sh: $t does not build (its log is in builds.log)") &
    done
    wait
    for t in $trees; do
        { echo "== $t"; cat "$out/build-$t.tmp"; } >>"$out/builds.log" && rm -f "$out/build-$t.tmp"
    done
    : >"$out/ab.txt"
    for rep in $(seq 1 "$reps"); do
        for t in $trees; do
            d=$(dir_of "$t")
            bin=${AB_BENCH:-$d/build/bin/eep-bench}
            while IFS= read -r cfg; do
                [ -n "$cfg" ] || continue
                # shellcheck disable=SC2086
                res=$(cd "$d" && EEP_JIT_SOURCE_ROOT="$d" "$bin" $base $cfg 2>&1)
                pair=$(echo "$res" | sed -n 's/^ours\/pair:.*: \([0-9.]*\) us per pair.*/\1/p')
                eager=$(echo "$res" | awk -F'|' '$2 ~ /^ *ours *$/ {gsub(/ /, "", $10);
                                                                  gsub(/ /, "", $12);
                                                                  print $10 " " $12; exit}')
                echo "$t|$cfg|${pair:--}|${eager:-- -}" >>"$out/ab.txt"
                [ -z "${AB_KEEP:-}" ] || { echo "== $t | $cfg | rep $rep"; echo "$res"; } \
                    >>"$out/runs.txt"
                [ -n "$pair$eager" ] || { echo "== $t | $cfg"; echo "$res" | tail -5; } \
                    >>"$out/errors.txt"
            done <<<"$configs"
        done
    done
    # median per (tree, config): pair, eager dispatch, eager combine
    awk -F'|' '{ split($4, e, " "); k = $2 "|" $1; n[k]++; p[k, n[k]] = $3; d[k, n[k]] = e[1];
                 c[k, n[k]] = e[2]; if (!(k in seen)) { seen[k] = 1; order[++m] = k } }
         function med(a, k, cnt,   i, j, t, v) {
             for (i = 1; i <= cnt; i++) v[i] = a[k, i];
             for (i = 1; i <= cnt; i++) for (j = i + 1; j <= cnt; j++)
                 if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
             return v[int((cnt + 1) / 2)] }
         END { for (i = 1; i <= m; i++) { k = order[i]; split(k, f, "|");
                   printf "| %s | %s | %s | %s | %s | %d |\n", f[1], f[2], med(p, k, n[k]),
                          med(d, k, n[k]), med(c, k, n[k]), n[k] } }' "$out/ab.txt" |
        sort -t'|' -k2,2 -s >"$out/ab-rows.md"
    { echo "| config | tree | pair us | dispatch us | combine us | reps |"
      echo "|---|---|---|---|---|---|"
      cat "$out/ab-rows.md"; } | tee "$out/ab-summary.md"
    rm -f "$out/ab-rows.md"
    ;;
*)
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
