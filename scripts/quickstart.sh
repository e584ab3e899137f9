#!/usr/bin/env bash
# The README's main command: set up, build a 5-host lab, run one real campaign
# (append workload; partitions, kills and clock faults for 30 s), print the verdict.
# The lab is removed on every exit path, including Ctrl-C. Exit code: the run's
# (0 valid, 1 invalid, 2 unknown, 3+ usage or environment error).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh

lab_down() {
  # Never let a failed teardown hide the run's own exit code.
  .venv/bin/splitbrain lab down >/dev/null 2>&1 \
    || echo "quickstart: 'splitbrain lab down' failed; run it by hand" >&2
}
trap lab_down EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

.venv/bin/splitbrain lab up --nodes 5

set +e
.venv/bin/splitbrain run --workload append --nemesis partition,kill,clock --time-limit 30 "$@"
rc=$?
set -e
echo "quickstart: run finished with exit code $rc (store/ holds the history, results and report)"
exit $rc
