#!/usr/bin/env bash
# deploy/install.sh install|uninstall - what `make install` / `make uninstall` do (deploy/install.mk
# passes the paths in the environment).  Installs under $DESTDIR$PREFIX:
#
#   lib/libeep.so.X.Y.Z (soname libeep.so.X) + libeep.so.X, libeep.so links; libeep.a
#   lib/libeep_agent.so.X.Y.Z (soname libeep_agent.so.X; NEEDS libeep.so.X) + links
#   lib/pkgconfig/eep.pc, eep-agent.pc         pkg-config --cflags --libs eep-agent
#   include/eep/*.h                            the public headers, and the agent's API as
#                                              eep/agent.h, eep/agent_bootstrap.h
#   bin/eepd eepctl eep-agent eep-info ...     the tools ($EEP_INSTALL_TOOLS)
#   share/eep/{kernels,barrier,bench/kernels,include/eep}
#                                              the kernel sources the JIT compiles at run time;
#                                              libeep finds them from its own path
#                                              (elastic/jit/jit.c, eep_jit_default_source_root)
#   share/eep/install-manifest.txt             every file above: what uninstall removes
#
# Uninstall removes exactly the files of the manifest, then the directories it leaves empty.
set -eu
mode=${1:-}
: "${PREFIX:?}" "${BUILD:?}"
root=$(cd "$(dirname "$0")/.." && pwd)
dest=${DESTDIR:-}$PREFIX
manifest=$dest/share/eep/install-manifest.txt
die() { echo "install.sh: $*" >&2; exit 1; }

uninstall() {
    [ -f "$manifest" ] || die "nothing to uninstall: $manifest is missing"
    local f d dirs=()
    while IFS= read -r f; do
        [ -n "$f" ] || continue
        case $f in /*|*..*) die "manifest line '$f' is not a path under the prefix" ;; esac
        rm -f "$dest/$f"
        dirs+=("$(dirname "$f")")
    done <"$manifest"
    rm -f "$manifest"
    dirs+=(share/eep)
    # the deepest directories first; only empty ones go, never the prefix itself
    for d in $(printf '%s\n' "${dirs[@]}" | sort -u | awk '{ print length, $0 }' | sort -rn |
               cut -d' ' -f2-); do
        while [ "$d" != "." ] && [ "$d" != "/" ]; do
            rmdir "$dest/$d" 2>/dev/null || break
            d=$(dirname "$d")
        done
    done
    echo "uninstalled ElasticEP from $dest"
}

# put MODE SRC REL: install SRC as $dest/REL and record it
put() {
    install -D -m "$1" "$2" "$dest/$3"
    echo "$3" >>"$manifest.tmp"
}
# link TARGET REL: a symlink $dest/REL -> TARGET (relative), recorded
link() {
    ln -sfn "$1" "$dest/$2"
    echo "$2" >>"$manifest.tmp"
}

# pc NAME: lib/pkgconfig/NAME.pc from deploy/pkgconfig/NAME.pc.in
pc() {
    mkdir -p "$dest/lib/pkgconfig"
    sed -e "s|@PREFIX@|$PREFIX|g" -e "s|@VERSION@|$EEP_VERSION|g" \
        -e "s|@NCCL_LIBS@|$EEP_NCCL_LIBS|g" -e "s|@AGENT_LIBS@|$EEP_AGENT_LIBS|g" \
        "$root/deploy/pkgconfig/$1.pc.in" >"$dest/lib/pkgconfig/$1.pc"
    grep -q '@[A-Z_]*@' "$dest/lib/pkgconfig/$1.pc" && die "$1.pc: a placeholder is left"
    echo "lib/pkgconfig/$1.pc" >>"$manifest.tmp"
}

install_all() {
    : "${EEP_VERSION:?}" "${EEP_SOVERSION:?}"
    local lib f v=$EEP_VERSION so=$EEP_SOVERSION
    mkdir -p "$dest/share/eep"
    : >"$manifest.tmp"
    for lib in libeep libeep_agent; do
        [ -f "$BUILD/lib/$lib.so.$v" ] || die "$BUILD/lib/$lib.so.$v is missing (make first)"
        put 755 "$BUILD/lib/$lib.so.$v" "lib/$lib.so.$v"
        link "$lib.so.$v" "lib/$lib.so.$so"
        link "$lib.so.$so" "lib/$lib.so"
    done
    put 644 "$BUILD/lib/libeep.a" lib/libeep.a
    for f in ${EEP_INSTALL_TOOLS:-}; do
        put 755 "$f" "bin/$(basename "$f")"
    done
    for f in "$root"/include/eep/*.h; do
        put 644 "$f" "include/eep/$(basename "$f")"
    done
    # The agent's API (control/agent/), its includes rewritten to the installed names.
    for f in agent agent_bootstrap; do
        sed 's|#include "control/agent/\([a-z_]*\.h\)"|#include "eep/\1"|' \
            "$root/control/agent/$f.h" >"$BUILD/$f.installed.h"
        put 644 "$BUILD/$f.installed.h" "include/eep/$f.h"
    done
    # Kernel sources: everything the JIT may read (relative includes keep the tree's shape).
    (cd "$root" && find kernels barrier bench/kernels \( -name '*.cuh' -o -name '*.h' \) -type f |
        LC_ALL=C sort) | while IFS= read -r f; do
        put 644 "$root/$f" "share/eep/$f"
    done
    for f in "$root"/include/eep/*.h; do
        put 644 "$f" "share/eep/include/eep/$(basename "$f")"
    done
    pc eep
    pc eep-agent
    mv "$manifest.tmp" "$manifest"
    echo "installed ElasticEP $v under $dest ($(wc -l <"$manifest") files; make uninstall" \
         "PREFIX=$PREFIX removes them)"
}

case $mode in
    install) install_all ;;
    uninstall) uninstall ;;
    *) echo "usage: deploy/install.sh install|uninstall (PREFIX, BUILD in the environment)" >&2
       exit 2 ;;
esac
