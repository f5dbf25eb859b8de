#!/usr/bin/env bash
# test_format.sh - every C, C++ and CUDA source in the tree is formatted as .clang-format says
# (STYLE.md: one format, checked in CI).  `make format` rewrites the tree.  The check needs
# clang-format 14 (Debian 12's; scripts/deps.sh installs it): other versions break lines
# differently, so with another one it skips and says so rather than fail on a version.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1

fmt=${CLANG_FORMAT:-}
if [ -z "$fmt" ]; then
    for c in clang-format-14 clang-format; do
        if command -v "$c" > /dev/null 2>&1; then
            fmt=$c
            break
        fi
    done
fi
if [ -z "$fmt" ]; then
    echo "SKIP: clang-format is not installed (scripts/deps.sh test installs clang-format-14)"
    exit 77
fi
version=$("$fmt" --version | sed -n 's/.*clang-format version \([0-9][0-9]*\)\..*/\1/p')
if [ "$version" != "14" ]; then
    echo "SKIP: $fmt is version ${version:-unknown}; the tree is formatted by clang-format 14"
    exit 77
fi

if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    files=$(git ls-files '*.c' '*.h' '*.cc' '*.cu' '*.cuh')
else
    files=$(find . \( -path './build*' -o -path ./exp-trees \) -prune -o -type f \
            \( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \) -print)
fi
bad=""
n=0
for f in $files; do
    [ -f "$f" ] || continue # deleted in the work tree, not yet in the index
    n=$((n + 1))
    if ! "$fmt" --style=file --dry-run --Werror "$f" > /dev/null 2>&1; then
        bad="$bad $f"
    fi
done
if [ -n "$bad" ]; then
    echo "FAIL: not formatted as .clang-format says (run make format):"
    for f in $bad; do
        echo "  $f"
        "$fmt" --style=file "$f" | diff "$f" - | head -8 | sed 's/^/    /'
    done
    exit 1
fi
echo "ok: $n files formatted ($fmt $version)"
