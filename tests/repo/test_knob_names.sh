#!/usr/bin/env bash
# test_knob_names.sh - every knob has one owner: util/gen_knob_names.sh (the build's list of knob
# names) fails on a name that two tables declare, naming it, and passes on the tree.  The planted
# case is the one the tree had until the layout change: EEP_JOB in both agent's and eepd's table.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
tables=$(ls util/*_knobs.c elastic/*/*_knobs.c control/*/*_knobs.c)

if util/gen_knob_names.sh "$tmp/names.c" $tables gin/*.c 2>"$tmp/err"; then
    n=$(grep -c '^    "EEP_' "$tmp/names.c")
    echo "ok: the tree's $n knob names are unique"
else
    echo "FAIL: the tree has a knob declared twice: $(cat "$tmp/err")"
    failed=1
fi

# plant: a copy of the agent's table that declares EEP_JOB, which the etcd table owns
sed 's|^static const eep_knob_t eep_agent_knobs\[\] = {|&\n    EEP_KNOB_ROW(eep_agent_config_t, "EEP_JOB", "default", EEP_KNOB_STRING, job, EEP_KNOB_STARTUP, 0, 0, "x"),|' \
    control/agent/agent_knobs.c >"$tmp/agent_knobs.c"
grep -q '"EEP_JOB"' "$tmp/agent_knobs.c" || { echo "FAIL: could not plant the duplicate"; exit 1; }
planted=$(echo "$tables" | sed "s|control/agent/agent_knobs.c|$tmp/agent_knobs.c|")
if util/gen_knob_names.sh "$tmp/names2.c" $planted 2>"$tmp/err2"; then
    echo "FAIL: a knob declared twice (EEP_JOB) was accepted"
    failed=1
elif ! grep -q 'EEP_JOB is declared twice' "$tmp/err2"; then
    echo "FAIL: the error does not name the knob: $(cat "$tmp/err2")"
    failed=1
else
    echo "ok: a planted second EEP_JOB fails the build: $(cat "$tmp/err2")"
fi
exit $failed
