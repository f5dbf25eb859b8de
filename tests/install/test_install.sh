#!/usr/bin/env bash
# test_install.sh - `make install PREFIX=...` gives a tree a program can build and run against with
# `pkg-config --cflags --libs`, and `make uninstall` takes back exactly what it wrote (issue 28).
#
#  1. sonames: lib/libeep.so.X.Y.Z is libeep.so.X (links libeep.so.X, libeep.so), the same for
#     libeep_agent, which needs libeep.so.X; pkg-config knows eep and eep-agent at the version of
#     eep/version.h;
#  2. every installed header compiles alone (the agent's API as eep/agent.h, eep/agent_bootstrap.h);
#  3. a tiny C program built with `pkg-config --cflags --libs eep-agent` runs from the installed
#     libraries only: version, placement (libeep), and an agent that joins a real etcd on
#     127.0.0.1 (libeep_agent) and leaves; libeep.so finds the kernel sources under share/eep
#     from its own path;
#  4. the installed tools: eep-info names <prefix>/share/eep as the kernel source root, also after
#     the prefix is moved, and eep-jit-bench compiles a probe kernel from there (NVRTC, no GPU);
#  5. make uninstall removes every installed file and directory and nothing else;
#  6. DESTDIR stages: files under DESTDIR/PREFIX, pkg-config files naming PREFIX alone.
# Exit 0 pass, 1 fail, 77 skip.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
if [ -n "${SANITIZER:-}" ]; then
    echo "skip: a sanitizer build (a program linking its libeep.so needs the sanitizer's runtime)"
    exit 77
fi
command -v pkg-config >/dev/null || { echo "skip: pkg-config is not installed"; exit 77; }
tmp=$(mktemp -d /tmp/eep-install-test.XXXXXX)
prefix=$tmp/prefix
trap 'rm -rf "$tmp"' EXIT
failed=0 mark=0
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }
ok() { echo "ok: $*"; }
# clean: no failure since the last call (each part reports its own ok line)
clean() { local r=$((failed == mark)); mark=$failed; [ $r -eq 1 ]; }

version=$(sed -n 's/^#define EEP_VERSION_STRING *"\(.*\)"/\1/p' "$root/include/eep/version.h")
major=${version%%.*}
if ! make -C "$root" --no-print-directory BUILD="$build" install PREFIX="$prefix" \
        >"$tmp/install.log" 2>&1; then
    cat "$tmp/install.log"
    echo "FAIL: make install exited non-zero"
    exit 1
fi
tail -1 "$tmp/install.log"

# 1. sonames, links, pkg-config
for lib in libeep libeep_agent; do
    real=$prefix/lib/$lib.so.$version
    so=$(readelf -d "$real" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
    [ "$so" = "$lib.so.$major" ] || fail "$real: soname '$so', expected $lib.so.$major"
    [ "$(readlink "$prefix/lib/$lib.so.$major")" = "$lib.so.$version" ] ||
        fail "$lib.so.$major does not link to $lib.so.$version"
    [ "$(readlink "$prefix/lib/$lib.so")" = "$lib.so.$major" ] ||
        fail "$lib.so does not link to $lib.so.$major"
done
readelf -d "$prefix/lib/libeep_agent.so.$version" | grep -q "NEEDED.*\[libeep.so.$major\]" ||
    fail "libeep_agent.so does not need libeep.so.$major"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
for pc in eep eep-agent; do
    v=$(pkg-config --modversion "$pc" 2>&1)
    [ "$v" = "$version" ] || fail "pkg-config --modversion $pc: '$v', expected $version"
done
flags=$(pkg-config --cflags --libs eep-agent)
case " $flags " in
    *" -I$prefix/include "*"-L$prefix/lib "*"-leep_agent "*"-leep "*) ok "pkg-config: $flags" ;;
    *) fail "pkg-config --cflags --libs eep-agent: '$flags'" ;;
esac
clean && ok "sonames libeep.so.$major, libeep_agent.so.$major; pkg-config $version"

# 2. every installed header alone
clean
n=0
for h in "$prefix"/include/eep/*.h; do
    n=$((n + 1))
    echo "#include \"eep/$(basename "$h")\"" >"$tmp/one.c"
    cc -std=c11 -Wall -Wextra -Werror $(pkg-config --cflags eep) -fsyntax-only "$tmp/one.c" \
        2>"$tmp/one.err" || fail "eep/$(basename "$h") does not compile alone: $(cat "$tmp/one.err")"
done
for h in agent.h agent_bootstrap.h membership.h eep.h ep.h status.h version.h; do
    [ -f "$prefix/include/eep/$h" ] || fail "include/eep/$h is not installed"
done
clean && ok "$n installed headers compile alone"

# 3. a tiny program against the installed tree
clean
cat >"$tmp/tiny.c" <<'EOF'
#include <stdio.h>
#include <string.h>

#include "eep/agent.h"
#include "eep/membership.h"
#include "eep/version.h"

/* Not a public API: declared here to check that libeep.so finds share/eep from its own path. */
eep_status_t eep_jit_default_source_root(char *buf, size_t len);

int main(int argc, char **argv)
{
    eep_expert_place_t place[8];
    eep_agent_params_t p;
    eep_agent_t       *agent = NULL;
    eep_status_t       st;
    char               id[256], kroot[4096];

    if (argc != 2 || strcmp(eep_version(), EEP_VERSION_STRING) != 0) {
        fprintf(stderr, "tiny: library %s, headers %s\n", eep_version(), EEP_VERSION_STRING);
        return 1;
    }
    if (eep_placement_default(8, 3, place) != EEP_OK || place[7].rank != 2 ||
        eep_jit_default_source_root(kroot, sizeof(kroot)) != EEP_OK) {
        fprintf(stderr, "tiny: libeep calls failed\n");
        return 1;
    }
    memset(&p, 0, sizeof(p));
    p.size = sizeof(p);
    p.job  = argv[1];
    st     = eep_agent_create(&p, &agent);
    if (st != EEP_OK || eep_agent_member_id(agent, id, sizeof(id)) != EEP_OK) {
        fprintf(stderr, "tiny: agent: %s\n", eep_status_string(st));
        return 1;
    }
    printf("version %s\nkernels %s\nmember %s\n", eep_version(), kroot, id);
    eep_agent_leave(agent);
    eep_agent_destroy(agent);
    return 0;
}
EOF
if cc -std=c11 -Wall -Wextra -Werror -o "$tmp/tiny" "$tmp/tiny.c" $(pkg-config --cflags --libs eep-agent) \
        2>"$tmp/cc.err"; then
    ok "the tiny program builds with pkg-config --cflags --libs eep-agent"
    for lib in libeep.so.$major libeep_agent.so.$major; do
        LD_LIBRARY_PATH=$prefix/lib ldd "$tmp/tiny" | grep -q "$lib => $prefix/lib/$lib" ||
            fail "tiny does not load $lib from $prefix/lib: $(LD_LIBRARY_PATH=$prefix/lib ldd "$tmp/tiny")"
    done
    if ! command -v etcd >/dev/null; then
        echo "skip part: etcd is not installed (the agent's join is not run)"
    else
        LD_LIBRARY_PATH=$prefix/lib EEP_LOG_LEVEL=warn timeout 60 \
            "$root/tests/control/etcd_server.sh" -- "$tmp/tiny" install-test >"$tmp/tiny.out" 2>&1
        rc=$?
        if [ $rc -ne 0 ]; then
            fail "tiny exited $rc: $(cat "$tmp/tiny.out")"
        else
            grep -q "^version $version$" "$tmp/tiny.out" || fail "tiny: no version line"
            grep -q "^member [A-Za-z0-9._:-]*-[0-9a-f]*$" "$tmp/tiny.out" ||
                fail "tiny: the agent printed no member id: $(cat "$tmp/tiny.out")"
            grep -q "^kernels $(realpath "$prefix")/share/eep$" "$tmp/tiny.out" ||
                fail "libeep.so's kernel root is not $prefix/share/eep: $(grep '^kernels' "$tmp/tiny.out")"
            clean && ok "tiny ran from the installed libraries: $(grep '^member' "$tmp/tiny.out")"
        fi
    fi
else
    fail "the tiny program does not build: $(cat "$tmp/cc.err")"
fi

# 4. installed tools find the installed kernels, wherever the prefix is
clean
k=$(env -u EEP_JIT_SOURCE_ROOT "$prefix/bin/eep-info" | sed -n 's/^kernel source: \([^ ]*\) .*/\1/p')
[ "$k" = "$(realpath "$prefix")/share/eep" ] || fail "installed eep-info: kernel source '$k'"
[ -f "$prefix/share/eep/kernels/ep/dispatch.cuh" ] && [ -f "$prefix/share/eep/include/eep/layout.h" ] &&
    [ -f "$prefix/share/eep/barrier/barrier_kernel.cuh" ] || fail "share/eep lacks kernel sources"
mv "$prefix" "$tmp/moved"
k=$("$tmp/moved/bin/eep-info" | sed -n 's/^kernel source: \([^ ]*\) .*/\1/p')
[ "$k" = "$(realpath "$tmp/moved")/share/eep" ] || fail "after a move, eep-info: kernel source '$k'"
mv "$tmp/moved" "$prefix"
clean && ok "installed eep-info reads kernels from <prefix>/share/eep, also after a move"
if [ -e /usr/local/cuda/lib64/libnvrtc.so.13 ] || ldconfig -p 2>/dev/null | grep -q libnvrtc; then
    out=$(env -u EEP_JIT_SOURCE_ROOT "$prefix/bin/eep-jit-bench" --cache "$tmp/jit-cache" --reps 1 \
          --only "lsa probe / nvrtc" 2>&1)
    rc=$?
    if [ $rc -ne 0 ] || ! grep -q "sources $(realpath "$prefix")/share/eep" <<<"$out" ||
       ! grep -q "^lsa probe / nvrtc *cold" <<<"$out"; then
        fail "installed eep-jit-bench (exit $rc) did not compile from share/eep: $out"
    else
        ok "installed eep-jit-bench compiled the lsa probe from $prefix/share/eep"
    fi
else
    echo "skip part: no NVRTC here (the installed JIT compile is not run)"
fi

# 5. uninstall: everything it installed goes, a file of someone else's stays
clean
echo keep >"$prefix/lib/someone-elses.txt"
if make -C "$root" --no-print-directory BUILD="$build" uninstall PREFIX="$prefix" \
        >"$tmp/uninstall.log" 2>&1; then
    left=$(cd "$prefix" && find . -mindepth 1 ! -path ./lib ! -path ./lib/someone-elses.txt)
    [ -z "$left" ] || fail "uninstall left: $left"
    [ -f "$prefix/lib/someone-elses.txt" ] || fail "uninstall removed a file it did not install"
    clean && ok "uninstall removed what install wrote, and only that"
else
    fail "make uninstall exited non-zero: $(cat "$tmp/uninstall.log")"
fi
make -C "$root" --no-print-directory BUILD="$build" uninstall PREFIX="$prefix" >/dev/null 2>&1 &&
    fail "a second uninstall (no manifest) succeeded"

# 6. DESTDIR stages a package: files under DESTDIR/PREFIX, the .pc files name PREFIX alone
clean
if make -C "$root" --no-print-directory BUILD="$build" install DESTDIR="$tmp/stage" \
        PREFIX=/opt/eep-pkg >"$tmp/stage.log" 2>&1; then
    [ -f "$tmp/stage/opt/eep-pkg/lib/libeep.so.$version" ] || fail "DESTDIR: no staged libeep"
    grep -qx "prefix=/opt/eep-pkg" "$tmp/stage/opt/eep-pkg/lib/pkgconfig/eep.pc" ||
        fail "DESTDIR: eep.pc does not say prefix=/opt/eep-pkg"
    grep -rq "$tmp/stage" "$tmp/stage/opt/eep-pkg/lib/pkgconfig" && fail "DESTDIR leaked into .pc"
    clean && ok "DESTDIR=... PREFIX=/opt/eep-pkg stages a package"
else
    fail "make install DESTDIR: $(tail -3 "$tmp/stage.log")"
fi

[ $failed -eq 0 ] && echo "ok" || echo "$failed failures"
[ $failed -eq 0 ]
