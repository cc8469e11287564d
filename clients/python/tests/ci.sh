#!/bin/sh
# The package's test suite as CI runs it (ctest python/pytest): a fresh
# virtualenv over Debian's packages, `pip install clients/python` into it,
# then pytest against RESHARD_PYTEST_DAEMON. pytest runs outside the source
# tree, so the installed package (with its generated modules) is the one
# tested. Usage: ci.sh WORK_DIR (a build directory; recreated each run).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
work=$1
: "${RESHARD_PYTEST_DAEMON:?set RESHARD_PYTEST_DAEMON to the reshardd binary}"
python=${RESHARD_PYTHON:-/usr/bin/python3}
rm -rf "$work/venv"
mkdir -p "$work"
"$python" -m venv --system-site-packages "$work/venv"
PIP_DISABLE_PIP_VERSION_CHECK=1 "$work/venv/bin/pip" install --no-cache-dir \
  --quiet "$here"
cd "$work"
# Exit status 5 (no tests collected) fails like any other; conftest.py fails
# the run on any skip but the daemon-feature ones. Skip reasons and the
# closing summary line go to pytest-summary.txt for scripts/test.sh.
status=0
PYTHONDONTWRITEBYTECODE=1 "$work/venv/bin/python" -m pytest -p no:cacheprovider \
  -rs "$here/tests" > "$work/pytest.log" 2>&1 || status=$?
cat "$work/pytest.log"
{ grep "^SKIPPED" "$work/pytest.log" || true; tail -n 1 "$work/pytest.log"; } > "$work/pytest-summary.txt"
exit "$status"
