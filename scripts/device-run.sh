#!/usr/bin/env bash
# scripts/device-run.sh [launch.sh flags] - `make run` on the GPU machine from the bundle that
# scripts/device-bundle.sh made here (carried as build/device-bundle.tar.xz).
#
# Builds libeep.a there (against the machine's NCCL wheel), links eep-rank from the bundle's
# objects, and runs deploy/launch.sh with the bundle's etcd, eepd and libraries.  Logs and the
# launcher's run directory are copied to $OUT when it is set.  Example (2 x H200, 25 s):
#   scripts/device-run.sh --seconds 25
# and 4 ranks on one GPU through the GIN test plugin: scripts/device-run.sh --ranks-per-gpu 4
set -u
bundle=${BUNDLE:-build/device-bundle.tar.xz}
dest=/tmp/eep-device-run
[ -f "$bundle" ] || { echo "device-run.sh: $bundle missing: run scripts/device-bundle.sh here first" >&2; exit 1; }
rm -rf "$dest" && mkdir -p "$dest" && tar -C "$dest" -xJf "$bundle" || exit 1
export NCCL_NVLS_ENABLE=0
out=${OUT:-$dest}
make -j"$(nproc)" build/lib/libeep.a build/lib/libnccl-net-eep-gin.so >"$out/build.log" 2>&1 ||
    { tail -30 "$out/build.log"; exit 1; }
# --ranks-per-gpu K: the launcher loads the GIN test plugin from its build folder
mkdir -p "$dest/build/lib" && cp build/lib/libnccl-net-eep-gin.so "$dest/build/lib/"
nccl=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
nccl_lib=${nccl:+-L$nccl/lib -Wl,-rpath,$nccl/lib}
g++ -o "$dest/build/bin/eep-rank" "$dest"/obj/eep_rank.o "$dest"/obj/eep_rank_fault.o "$dest"/obj/eep_step.o "$dest"/obj/eep_fault.o "$dest"/obj/eep_rank_obs.o \
        "$dest"/obj/libeep_agent.a "$dest"/obj/libeep_rank.a "$dest"/obj/libeep_control.a "$dest"/obj/libeep_proto.a build/lib/libeep.a -L"$dest/lib" \
    -Wl,-rpath-link,"$dest/lib" -lgrpc -lgpr -lprotobuf-c -libverbs -lmicrohttpd -pthread $nccl_lib \
    -l:libnccl.so.2 -ldl >"$out/link.log" 2>&1 || { cat "$out/link.log"; exit 1; }
PATH=$dest/bin:$PATH LD_LIBRARY_PATH=$dest/lib BUILD=$dest/build \
    deploy/launch.sh "$@" 2>&1 | tee "$out/run.log"
rc=${PIPESTATUS[0]}
run_dir=$(sed -n 's/^logs in \([^;]*\);.*/\1/p' "$out/run.log")
[ -n "$run_dir" ] && [ "$out" != "$dest" ] && cp -r "$run_dir" "$out/rundir"
exit "$rc"
