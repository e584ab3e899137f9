"""torn-write's default tear, through a real lazy fs under a real store.

The store is written by a child process that is SIGKILLed with its last batch
handed to the OS but not fsynced; the lazy fs then tears that write the way the
``torn-write`` fault does by default (``tear``: 1..16 bytes cut off its end). The
tear lands in the batch's last record, past its header: the correct recovery cuts
exactly that record, the seeded bug ``trust-torn-tail`` keeps it, zero-padded.
(A prefix of any length, the old default, most often tore a header or dropped
whole records, which both recoveries cut alike.)
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from nemesis.disk import DiskFaultOptions
from node_impl.store import LogStore
from tests.harness.test_lazyfs import _lazy, needs_fuse

ROOT = Path(__file__).resolve().parents[2]
N = 12  # entries; the first 5 are fsynced, the other 7 one pending write


def _writer(d: Path) -> str:
    return (
        "import sys, os, signal\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from node_impl.store import LogStore\n"
        "from node_impl.kv import body_append\n"
        f"s = LogStore({str(d)!r})\n"
        f"for i in range({N}):\n"
        "    s.append_leader(1, body_append('%d-%d' % (i % 5, i)))\n"
        "    if i == 4: s.flush()\n"
        "s.hand_to_os()\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )


@needs_fuse
@pytest.mark.integration
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_default_tear_lands_in_the_last_record(tmp_path: Path, seed: int) -> None:
    from harness.control.disk.fsd import find_mounts

    tear = DiskFaultOptions().tear
    ends = {}
    for bug in (False, True):
        d = tmp_path / f"data-{int(bug)}"
        lz = _lazy(d)
        lz.mount()
        try:
            p = subprocess.run([sys.executable, "-c", _writer(d)], capture_output=True)
            assert p.returncode == -signal.SIGKILL, p.stderr
            rec = lz.crash("torn-write", path="data.log", seed=seed, tail=tear)
            torn = rec["torn"]
            assert torn["tail"] == tear
            assert torn["length"] - tear <= torn["kept"] < torn["length"]
            s = LogStore(d, trust_torn_tail=bug)
            ends[bug] = s.end_index
            if bug:  # kept whole in length, its body's end zeros
                assert s.get(N - 1).body.endswith(b"\0")
            s.close()
        finally:
            lz.unmount()
        assert str(d) not in find_mounts()
    assert ends == {False: N - 2, True: N - 1}
