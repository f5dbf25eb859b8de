#!/usr/bin/env bash
# scripts/deps.sh PROFILE - install what PROFILE needs and is missing, quietly.
#
# Profiles: build (compilers, -dev packages), test (build + etcd server, cmocka, Python grpcio),
# run (build + etcd).  Only packages that dpkg does not already list are installed; apt-get
# update runs only when something is missing.  The CUDA toolkit cannot come from apt here: its
# absence is one clear sentence and a non-zero exit.
set -u
profile=${1:-build}
cuda=${CUDA_HOME:-/usr/local/cuda}

build_pkgs=(build-essential pkg-config libgrpc-dev protobuf-c-compiler libprotobuf-c-dev
            libibverbs-dev libmicrohttpd-dev libcmocka-dev)
case "$profile" in
    build) pkgs=("${build_pkgs[@]}") ;;
    test)  pkgs=("${build_pkgs[@]}" etcd-server etcd-client python3-grpcio python3-protobuf python3-yaml python3-venv clang
                 libclang-rt-14-dev clang-format-14 openssl) ;;
    run)   pkgs=("${build_pkgs[@]}" etcd-server etcd-client) ;;
    *) echo "deps.sh: unknown profile '$profile' (build, test or run)" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "deps: installing ${missing[*]}"
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo -n"
    export DEBIAN_FRONTEND=noninteractive
    if ! { $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >/tmp/eep-deps.log 2>&1; then
        echo "error: could not install ${missing[*]} with apt-get (log: /tmp/eep-deps.log)." >&2
        exit 1
    fi
fi
if [ ! -x "$cuda/bin/nvcc" ]; then
    echo "error: no CUDA toolkit at $cuda (nvcc missing): install CUDA 13 or set CUDA_HOME." >&2
    exit 1
fi
