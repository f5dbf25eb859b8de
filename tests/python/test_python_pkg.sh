#!/usr/bin/env bash
# test_python_pkg.sh - the Python package (python/, issue 26) as a user gets it: `pip install
# ./python` into a fresh venv ($BUILD/python-venv; setuptools from PyPI through pip's build
# isolation), then its CPU tests (python/tests/test_cpu.py: imports without torch, ctypes structs
# equal to the C ones, status -> exceptions, the window-size hint, argument checks before any
# launch, a clear error without a GPU) run from outside the source tree, so they import the
# installed copy and the libeep.so it was installed with.  torch is not installed: its CUDA wheel
# and libraries are gigabytes (the GPU machine has its own); the checks need none of it.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
lib=$build/lib/libeep.so
[ -f "$lib" ] || { echo "SKIP: $lib is not built (make)"; exit 77; }
command -v python3 > /dev/null || { echo "SKIP: no python3"; exit 77; }
venv=$build/python-venv
rm -rf "$venv" "$build/python-src"
python3 -m venv "$venv" || { echo "FAIL: python3 -m venv"; exit 1; }
# a copy of the package: pip builds in place and must not leave files in the tree
cp -r "$root/python" "$build/python-src"
rm -rf "$build/python-src/elasticep/_native"
start=$(date +%s)
if ! BUILD=$build ELASTICEP_LIBRARY=$lib "$venv/bin/pip" install -q "$build/python-src"; then
    echo "FAIL: pip install ./python"
    exit 1
fi
echo "pip install ./python: $(( $(date +%s) - start )) s"
cd "$build" || exit 1
where=$("$venv/bin/python" -c 'import elasticep, os; print(os.path.dirname(elasticep.__file__))')
case $where in
    "$venv"/*) echo "imports the installed package: $where" ;;
    *) echo "FAIL: elasticep imported from $where, not from the venv"; exit 1 ;;
esac
[ -f "$where/_native/libeep.so" ] || { echo "FAIL: libeep.so was not installed with the package"; exit 1; }
EEP_LOG_LEVEL=none ELASTICEP_SOURCE_ROOT=$root "$venv/bin/python" "$root/python/tests/test_cpu.py" -v 2>&1
rc=$?
# the autograd Functions and the example's two paths with a stand-in Buffer: skipped without torch
EEP_LOG_LEVEL=none "$venv/bin/python" "$root/python/tests/test_autograd_cpu.py" -v 2>&1 || rc=1
EEP_LOG_LEVEL=none "$venv/bin/python" "$root/python/tests/test_buffer_mock.py" -v 2>&1 || rc=1
exit $rc
