#!/usr/bin/env bash
# test_eepctl_cli.sh - the command lines of the control tools, no server needed (issue 28):
#  - --version and --help on every tool; eepctl COMMAND --help for every command (its own usage);
#  - --opt=value and --opt value both parse, options after the command too;
#  - bad input exits 2 with a message naming the flag or argument;
#  - eepctl's default address is eepd's default listen address (same host and port), and
#    EEP_EEPCTL_ADDR moves it (the error of the failed call names the address it tried).
# Exit 0 pass, 1 fail.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
bin=$build/bin
version=$(sed -n 's/^#define EEP_VERSION_STRING *"\(.*\)"/\1/p' "$root/include/eep/version.h")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0 n=0
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }
# expect RC NEEDLE CMD...: exit RC and NEEDLE in stdout+stderr
expect() {
    local want=$1 needle=$2 rc
    shift 2
    n=$((n + 1))
    env -u EEP_EEPCTL_ADDR timeout 10 "$@" >"$tmp/out" 2>&1
    rc=$?
    [ "$rc" -eq "$want" ] || { fail "$*: exit $rc, expected $want: $(head -3 "$tmp/out")"; return; }
    grep -qF -- "$needle" "$tmp/out" || fail "$*: output lacks '$needle': $(head -3 "$tmp/out")"
}
dead=127.0.0.1:1

for t in eepctl eepd eep-agent eep-info eep-jit-bench eep-bench; do
    expect 0 "$t (ElasticEP) $version" "$bin/$t" --version
    expect 0 "usage: $t" "$bin/$t" --help
    expect 2 "--no-such-flag" "$bin/$t" --no-such-flag
done
for c in status watch drain cordon uncordon report-fault inject-fault health top; do
    expect 0 "usage: eepctl [OPTIONS] $c" "$bin/eepctl" "$c" --help
done
expect 0 "--from=E" "$bin/eepctl" watch --help

# bad input: exit 2, the flag or argument named
expect 2 "--timeout-ms" "$bin/eepctl" --timeout-ms=abc health
expect 2 "--timeout-ms" "$bin/eepctl" health --timeout-ms=0
expect 2 "--from" "$bin/eepctl" watch --from=-1
expect 2 "--count" "$bin/eepctl" --addr=$dead watch --count 0
expect 2 "--from belongs to watch" "$bin/eepctl" --from=3 status
expect 2 "--addr needs a value" "$bin/eepctl" --addr
expect 2 "--metrics needs http://HOST:PORT/PATH" "$bin/eepctl" top --metrics=ftp://x/metrics
expect 2 "--interval-ms" "$bin/eepctl" top --interval-ms=5
expect 2 "--iterations belongs to top" "$bin/eepctl" status --iterations=2
expect 2 "missing MEMBER" "$bin/eepctl" drain
expect 2 "too many arguments" "$bin/eepctl" drain a-1-1 b-2-2
expect 2 "unknown command 'bogus'" "$bin/eepctl" bogus
expect 2 "no COMMAND" "$bin/eepctl" --json
expect 2 "unknown fault kind 'nuke'" "$bin/eepctl" --addr=$dead inject-fault nuke
expect 2 "--cert and --key go together" "$bin/eepctl" --cert=x.pem health
expect 2 "--ttl" "$bin/eep-agent" --ttl=0
expect 2 "--reps" "$bin/eep-jit-bench" --reps=0
expect 2 "unexpected argument 'extra'" "$bin/eep-info" extra
expect 2 "unexpected argument 'extra'" "$bin/eepd" extra

# good input in both spellings, options after the command: the call is made (and fails: 1)
expect 1 "ipv4:127.0.0.1:1" "$bin/eepctl" --addr=$dead --timeout-ms=300 health
expect 1 "ipv4:127.0.0.1:1" "$bin/eepctl" health --addr $dead --timeout-ms 300 --json
expect 1 "ipv4:127.0.0.1:1" "$bin/eepctl" --timeout-ms=300 drain 3 --addr=$dead
n=$((n + 1))
EEP_EEPCTL_ADDR=127.0.0.1:2 timeout 10 "$bin/eepctl" --timeout-ms=300 health >"$tmp/out" 2>&1
[ $? -eq 1 ] && grep -q "ipv4:127.0.0.1:2" "$tmp/out" ||
    fail "EEP_EEPCTL_ADDR=127.0.0.1:2 was not used: $(cat "$tmp/out")"

# the default address is where eepd listens by default
n=$((n + 1))
cfg=$(env -u EEP_EEPCTL_ADDR -u EEP_EEPD_LISTEN "$bin/eep-info" --config)
ctl=$(sed -n 's/^EEP_EEPCTL_ADDR=//p' <<<"$cfg")
eepd=$(sed -n 's/^EEP_EEPD_LISTEN=//p' <<<"$cfg")
[ -n "$ctl" ] && [ "$ctl" = "$eepd" ] ||
    fail "eepctl's default address '$ctl' is not eepd's default listen address '$eepd'"
expect 1 "ipv4:$ctl" "$bin/eepctl" --timeout-ms=300 health

echo "$n checks, $failed failed"
[ $failed -eq 0 ]
