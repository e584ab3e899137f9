"""A LogStore whose writes fail: appends still succeed, and the log recovers once the
disk takes writes again.

Seen on the lab (seed 7304, a torn-write fault holding a node's writes with EIO): the
append that crossed the 1 MiB hand-off raised the disk's error after the entry was
already in the log, so a leader answered ``UNSUPPORTED`` (a definite failure) for an
entry it went on to replicate; and the failed write's traceback kept the buffer
exported, so every later append raised ``BufferError`` until the garbage collector ran
(node.log: ``client-error ... Existing exports of data``).

The write errors are real: the file size limit (``RLIMIT_FSIZE``, SIGXFSZ ignored)
makes ``pwrite`` past it fail with EFBIG, in a child process so nothing else is limited.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

CHILD = textwrap.dedent(
    """
    import gc, resource, signal, sys
    from pathlib import Path
    from node_impl.store import LogStore, encode_body

    gc.disable()  # as between two of the collector's runs on a busy node
    d = Path(sys.argv[1])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, hard))
    s = LogStore(d)
    body = encode_body({"op": "append", "p": "x" * 4000})
    n = 0
    for i in range(600):  # ~2.4 MB: crosses the 1 MiB hand-off, the limit refuses it
        e = s.append_leader(1, body)
        assert e.index == i, (e.index, i)
        n += 1
    kept = None
    try:
        s.flush()
        raise SystemExit("flush under the limit should fail")
    except OSError as err:
        kept = err  # held, as the flush thread's future holds it, traceback and all
    assert s.append_leader(1, body).index == n  # no BufferError from the failed write
    n += 1
    del kept
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    assert s.flush() == n - 1
    s.close()
    again = LogStore(d)
    assert again.end_index == n - 1, again.end_index
    assert again.get(n - 1).body == body
    again.close()
    print("ok", n)
    """
)


def test_appends_survive_failed_writes_and_the_log_recovers(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "data")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["ok", "601"]
