#!/usr/bin/env bash
# scripts/device-bundle.sh - pack what `make run` needs on the GPU machine, which has no gRPC,
# protobuf-c, libmicrohttpd or etcd and cannot install them (shared/DEVICE.md).
#
# Writes $BUILD/device-bundle.tar.xz (~13 MB): eepd, eepctl and eep-agent as built here, the
# objects of eep-rank (tools/eep_rank.o and the control-plane archives), libeep_agent.so (for
# Python's elasticep.Membership), every shared library they
# need except glibc, libstdc++ and NCCL, and the etcd binary.  The data plane (libeep.a) is NOT
# packed: it is built on the GPU machine against its own NCCL (scripts/device-run.sh), because the
# JIT bakes the NCCL include path in.  Hand the bundle over with the device tool's `carry`
# (build/ is ignored by git), then run scripts/device-run.sh there.
set -eu
build=${BUILD:-build}
make -s all "$build/lib/libeep_agent.so" >/dev/null
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib" "$stage/bin" "$stage/build/bin" "$stage/obj"
for l in $(ldd "$build"/bin/eep-rank "$build"/bin/eepd "$build"/bin/eepctl "$build"/bin/eep-agent |
           awk '/=> \// { print $3 }' | sort -u); do
    b=$(basename "$l")
    case $b in libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libstdc++*|libgcc_s*|libnccl*) continue ;; esac
    cp -L "$l" "$stage/lib/"
    ln -sf "$b" "$stage/lib/${b%%.so.*}.so"
done
cp "$build"/bin/eepd "$build"/bin/eepctl "$build"/bin/eep-agent "$stage/build/bin/"
cp "$build"/tools/eep_rank.o "$build"/tools/eep_rank_fault.o "$build"/tools/eep_step.o "$build"/tools/eep_fault.o "$build"/tools/eep_rank_obs.o \
   "$build"/lib/libeep_agent.a "$build"/lib/libeep_rank.a "$build"/lib/libeep_control.a \
   "$build"/lib/libeep_proto.a "$stage/obj/"
# the agent as a shared library, for Python's elasticep.Membership (gpu-python.sh members)
cp -L "$build"/lib/libeep_agent.so "$stage/lib/libeep_agent.so"
cp "$(command -v etcd)" "$stage/bin/"
tar -C "$stage" -cJf "$build/device-bundle.tar.xz" .
echo "$build/device-bundle.tar.xz: $(du -h "$build/device-bundle.tar.xz" | cut -f1)"
