#!/usr/bin/env bash
# The README's main command: set up, build a 5-host lab, run one real campaign
# (the default campaign cut to 60 s: mixed workload, the deck of fault scripts), print the verdict.
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
# The default campaign (the reference node's strongest workload under the deck of fault
# scripts), cut to one minute: `splitbrain run` alone plays the whole deck (2-3 minutes).
.venv/bin/splitbrain run --time-limit 60 "$@"
rc=$?
set -e
echo "quickstart: run finished with exit code $rc (store/ holds the history, results and report)"
exit $rc
