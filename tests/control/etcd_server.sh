#!/usr/bin/env bash
# tests/control/etcd_server.sh - real etcd members for tests: 127.0.0.1, free ports, a temp dir.
#
# Run a command with etcd up:
#   tests/control/etcd_server.sh [-n MEMBERS] -- COMMAND [ARGS...]
# starts MEMBERS (default 1) members, waits until each answers /health (bounded, 20 s), exports
# EEP_ETCD_ENDPOINTS (host:port,...), EEP_TEST_ETCD_DIR and EEP_TEST_ETCD_CLIENT_PORTS, prints
# the endpoints, runs COMMAND, then kills every member and removes the dir (also on a signal).
# Its exit status is COMMAND's; 77 (skip) with the reason when etcd is not installed.
#
# Or source it from a bash test and drive the members yourself (index from 0):
#   . tests/control/etcd_server.sh
#   eep_etcd_start 3            # sets EEP_ETCD_ENDPOINTS; trap eep_etcd_stop EXIT is installed
#   eep_etcd_kill 0             # SIGKILL member 0
#   eep_etcd_restart 0          # same data dir and ports; waits until healthy
#   eep_etcd_stop               # kill all, remove the dir
#
# Members run in their own sessions (setsid; a script's background job keeps its pid): only the
# clean-up stops them.  Members run with 50 ms heartbeats and a 500 ms election timeout (fast elections, 1 s minimum
# lease TTL) and --grpc-keepalive-min-time 500ms so clients may ping every second (a client must
# ping strictly less often than that minimum, or etcd closes the connection: "too_many_pings").
EEP_ETCD_BIN=${EEP_ETCD_BIN:-$(command -v etcd 2>/dev/null || echo /usr/bin/etcd)}
EEP_TEST_ETCD_DIR=
_eep_client_ports=()
_eep_peer_ports=()
_eep_pids=()

eep_free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

eep_etcd_healthy() { # PORT
    local reply
    reply=$(timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1 && \
        printf 'GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3 && cat <&3" 2>/dev/null)
    [[ $reply == *'"health":"true"'* ]]
}

eep_etcd_spawn() { # INDEX
    local i=$1 cluster="" j n=${#_eep_client_ports[@]}
    for ((j = 0; j < n; j++)); do
        cluster+="${cluster:+,}m$j=http://127.0.0.1:${_eep_peer_ports[$j]}"
    done
    local client=http://127.0.0.1:${_eep_client_ports[$i]}
    local peer=http://127.0.0.1:${_eep_peer_ports[$i]}
    case $(uname -m) in x86_64|aarch64) ;; *) export ETCD_UNSUPPORTED_ARCH=$(uname -m) ;; esac
    # its own session: a terminal's Ctrl-C to the caller's group must not kill etcd before the
    # caller's clean-up has stopped its clients (eepd revokes its lease on the way out)
    setsid "$EEP_ETCD_BIN" --name "m$i" --data-dir "$EEP_TEST_ETCD_DIR/m$i.etcd" \
        --listen-client-urls "$client" --advertise-client-urls "$client" \
        --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
        --initial-cluster "$cluster" --initial-cluster-state new \
        --initial-cluster-token "$EEP_TEST_ETCD_DIR" --heartbeat-interval 50 \
        --election-timeout 500 --grpc-keepalive-min-time 500ms --logger zap --log-level warn \
        >>"$EEP_TEST_ETCD_DIR/m$i.log" 2>&1 &
    _eep_pids[$i]=$!
}

eep_etcd_wait() { # INDEX
    local i=$1 tries
    for ((tries = 0; tries < 200; tries++)); do
        if ! kill -0 "${_eep_pids[$i]}" 2>/dev/null; then
            echo "etcd member $i exited early; log:" >&2
            tail -20 "$EEP_TEST_ETCD_DIR/m$i.log" >&2
            return 1
        fi
        eep_etcd_healthy "${_eep_client_ports[$i]}" && return 0
        sleep 0.1
    done
    echo "etcd member $i not healthy after 20 s (log $EEP_TEST_ETCD_DIR/m$i.log)" >&2
    return 1
}

eep_etcd_start() { # [MEMBERS]
    local n=${1:-1} i
    if [ ! -x "$EEP_ETCD_BIN" ]; then
        echo "skip: no etcd binary (install etcd-server)"
        return 77
    fi
    EEP_TEST_ETCD_DIR=$(mktemp -d /tmp/eep-etcd-test-XXXXXX) || return 1
    trap eep_etcd_stop EXIT
    trap 'exit 143' TERM INT
    for ((i = 0; i < n; i++)); do
        _eep_client_ports[$i]=$(eep_free_port)
        _eep_peer_ports[$i]=$(eep_free_port)
    done
    for ((i = 0; i < n; i++)); do eep_etcd_spawn "$i"; done
    for ((i = 0; i < n; i++)); do eep_etcd_wait "$i" || return 1; done
    EEP_ETCD_ENDPOINTS=$(printf '127.0.0.1:%s,' "${_eep_client_ports[@]}")
    EEP_ETCD_ENDPOINTS=${EEP_ETCD_ENDPOINTS%,}
    export EEP_ETCD_ENDPOINTS EEP_TEST_ETCD_DIR
    export EEP_TEST_ETCD_CLIENT_PORTS="${_eep_client_ports[*]}"
}

eep_etcd_kill() { # INDEX
    local pid=${_eep_pids[$1]:-}
    if [ -n "$pid" ]; then
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        _eep_pids[$1]=
    fi
}

eep_etcd_restart() { # INDEX
    eep_etcd_kill "$1"
    eep_etcd_spawn "$1"
    eep_etcd_wait "$1"
}

eep_etcd_stop() {
    local i
    for i in "${!_eep_pids[@]}"; do eep_etcd_kill "$i"; done
    case $EEP_TEST_ETCD_DIR in /tmp/eep-etcd-test-*) rm -rf "$EEP_TEST_ETCD_DIR" ;; esac
    EEP_TEST_ETCD_DIR=
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -u
    members=1
    while [ $# -gt 0 ]; do
        case $1 in
            -n) members=$2; shift 2 ;;
            --) shift; break ;;
            *) break ;;
        esac
    done
    if [ $# -eq 0 ]; then
        echo "usage: $0 [-n MEMBERS] -- COMMAND [ARGS...]" >&2
        exit 2
    fi
    eep_etcd_start "$members"
    rc=$?
    [ $rc -ne 0 ] && exit $rc
    echo "etcd: $EEP_ETCD_ENDPOINTS"
    "$@"
    exit $?
fi
