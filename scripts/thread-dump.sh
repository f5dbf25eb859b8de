#!/usr/bin/env bash
# scripts/thread-dump.sh PID... - where every thread of a process is, without a debugger: one line
# a thread (tid, name, state, kernel wait channel, the system call it sits in), and, where gdb is
# installed, the user stacks too.  For a rank that stalls on the one-GPU cluster: a thread in
# ioctl (syscall 16 on x86-64) on the NVIDIA device sits inside a driver call, e.g. NCCL's proxy
# thread behind a module load or a free of another thread (gin/README.md, known limits).
#   scripts/thread-dump.sh $(pgrep -f gpu_python.py)
set -u
[ $# -gt 0 ] || { echo "usage: scripts/thread-dump.sh PID..." >&2; exit 2; }
for pid in "$@"; do
    [ -d "/proc/$pid/task" ] || { echo "thread-dump: no process $pid" >&2; continue; }
    echo "== pid $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" | cut -c1-120)"
    for t in /proc/"$pid"/task/*; do
        tid=${t##*/}
        name=$(cat "$t/comm" 2>/dev/null)
        state=$(awk '/^State:/ { print $2 }' "$t/status" 2>/dev/null)
        wchan=$(cat "$t/wchan" 2>/dev/null)
        sc=$(cut -d' ' -f1 "$t/syscall" 2>/dev/null)
        case $sc in
            16) sc="16 (ioctl)" ;;
            202) sc="202 (futex)" ;;
            7) sc="7 (poll)" ;;
            232) sc="232 (epoll_wait)" ;;
            35) sc="35 (nanosleep)" ;;
            230) sc="230 (clock_nanosleep)" ;;
            running) sc="running (user code)" ;;
        esac
        printf '  %-8s %-16s %-2s wchan %-24s syscall %s\n' "$tid" "$name" "$state" "${wchan:--}" \
            "${sc:--}"
    done
    if command -v gdb >/dev/null 2>&1; then
        timeout 60 gdb -p "$pid" -batch -ex "thread apply all bt 12" 2>/dev/null |
            grep -E '^(Thread|#)' | cut -c1-160
    fi
done
