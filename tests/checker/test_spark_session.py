"""The Spark session's end with its process: stopped, nothing left behind, no waiting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]

_SCRIPT = """
import json
from pyspark import SparkContext
from checker.spark import session
spark = session.get_session("local[1]")
assert spark.range(3).count() == 3
server = spark.sparkContext._accumulatorServer
pid = session.driver_jvm_pid()
work = str(session.work_dir())
session._stop_at_exit()
print(json.dumps({
    "pid": pid,
    "work": work,
    "closed": server.socket.fileno() == -1,
    "stopped": SparkContext._active_spark_context is None and session._session is None,
}))
"""


def test_the_session_ends_with_its_process_and_leaves_nothing() -> None:
    pytest.importorskip("pyspark")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["closed"] and got["stopped"]
    assert not Path(got["work"]).exists()  # removed at exit, after the session stopped
    end = time.monotonic() + 60
    while Path(f"/proc/{got['pid']}").exists() and time.monotonic() < end:
        time.sleep(0.2)
    assert not Path(f"/proc/{got['pid']}").exists(), "the driver JVM outlived its process"
