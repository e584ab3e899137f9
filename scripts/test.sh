#!/usr/bin/env bash
# Sets everything up, then runs the test suite (real sshd, real namespaces, real
# PySpark). The default run leaves out tests marked slow (whole campaigns, VMs,
# Spark clusters, soaks): `-m slow` runs just those, `-m ""` everything. Extra
# arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --with-test-tools
set +e
.venv/bin/python -m pytest -p no:cacheprovider "$@"
rc=$?
set -e
# pytest exits 5 when it collected no test: that is a failure of the suite, not a pass.
if [ $rc -eq 5 ]; then echo "no tests ran" >&2; exit 1; fi
exit $rc
