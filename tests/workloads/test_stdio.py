"""The stdio client against real misbehaving programs: crash, hang, garbage, half lines.

Each bad answer must end the op in flight as ``info`` (or ``fail`` when nothing
was sent), the next op must get a fresh program, and a whole run through the
runner must leave a well-formed history with every invocation completed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.control.memory import MemoryRemote
from harness.core.errors import ConfigError
from harness.core.history import read_jsonl, validate_history
from harness.core.op import Op
from harness.core.remote import Host
from harness.core.spec import TestSpec
from harness.dbs.null import NullDB
from harness.run.runner import RunOptions, run_test
from workloads import get_workload
from workloads.stdio import StdioClient

pytestmark = pytest.mark.integration

# Misbehaves by a counter shared by every copy of the program (a file), so that
# successive ops meet: ok, crash, ok, hang, ok, garbage, ok, half line, ok, bad type.
PROGRAM = textwrap.dedent("""\
    #!{python}
    import json, os, sys, time
    counter = {counter!r}
    for line in sys.stdin:
        op = json.loads(line)
        with open(counter, "a+") as f:
            f.seek(0); n = len(f.read()); f.write("x")
        mode = n % 10
        if mode == 1:
            sys.exit(3)                                   # crash with the op in flight
        if mode == 3:
            time.sleep(60)                                # hang
        if mode == 5:
            print("hello, I am not JSON", flush=True)     # garbage
            continue
        if mode == 7:
            sys.stdout.write('{{"type": "o'); sys.stdout.flush(); sys.exit(0)  # half a line
        if mode == 9:
            print(json.dumps({{"type": "maybe"}}), flush=True)  # not ok/fail/info
            continue
        print(json.dumps({{"type": "ok", "value": op["value"] if op["f"] != "read" else None,
                          "seen": op}}), flush=True)
""")


@pytest.fixture
def program(tmp_path: Path) -> Path:
    p = tmp_path / "bad-client"
    p.write_text(PROGRAM.format(python=sys.executable, counter=str(tmp_path / "count")))
    p.chmod(0o755)
    return p


def _ctx(tmp_path: Path) -> Any:
    return SimpleNamespace(addresses={"client": {"n1": ("127.0.0.1", 9)}}, store_dir=str(tmp_path))


def _op(i: int) -> Op:
    return Op(type="invoke", process=i, f="write", value=i, key="k", node="n1")


def test_each_misbehaviour_is_info_and_the_next_op_gets_a_fresh_program(tmp_path, program):
    client = StdioClient([str(program)], timeout=0.5).open(_ctx(tmp_path), "n1")
    results, pids = [], []
    for i in range(10):
        results.append(client.invoke(_ctx(tmp_path), _op(i)))
        pids.append(client.proc.pid if client.proc else None)
    client.close(_ctx(tmp_path))
    kinds = [(r.type, (r.error or "").split(":")[0]) for r in results]
    assert kinds == [("ok", ""), ("info", "client crashed"), ("ok", ""), ("info", "timeout"),
                     ("ok", ""), ("info", "client answered garbage"), ("ok", ""),
                     ("info", "client crashed"), ("ok", ""), ("info", "client answered garbage")]
    assert [r.value for r in results] == list(range(10))  # info keeps the invocation's value
    assert pids[1::2] == [None] * 5  # the program is dropped after every doubt...
    assert len({p for p in pids[0::2]}) == 5  # ...and the next op runs in a new one
    # The op the program saw is what the protocol promises.
    assert client.proc is None


def test_the_program_sees_the_documented_fields(tmp_path):
    echo = tmp_path / "echo"
    echo.write_text(f"#!{sys.executable}\nimport sys, json\nfor l in sys.stdin:\n"
                    "    print(json.dumps({'type': 'ok', 'value': json.loads(l)}), flush=True)\n")
    echo.chmod(0o755)
    client = StdioClient([str(echo)], timeout=2).open(_ctx(tmp_path), "n1")
    done = client.invoke(_ctx(tmp_path), Op(type="invoke", process=4, f="cas", value=[1, 2],
                                            key="k7", node="n1"))
    client.close(_ctx(tmp_path))
    assert done.type == "ok" and done.value == {"f": "cas", "key": "k7", "value": [1, 2],
                                                "process": 4, "node": "n1",
                                                "address": "127.0.0.1:9"}


def test_a_hung_program_is_killed_with_its_children(tmp_path):
    marker = tmp_path / "child-alive"
    hang = tmp_path / "hang"
    hang.write_text(f"#!/bin/sh\n(while true; do touch {marker}; sleep 0.1; done) &\nsleep 60\n")
    hang.chmod(0o755)
    client = StdioClient([str(hang)], timeout=0.3).open(_ctx(tmp_path), "n1")
    done = client.invoke(_ctx(tmp_path), _op(1))
    assert done.type == "info" and done.error.startswith("timeout")
    time.sleep(0.3)
    marker.unlink(missing_ok=True)
    time.sleep(0.4)
    assert not marker.exists(), "the program's child survived the kill"


def test_a_whole_run_records_every_op_and_loses_nothing(tmp_path, program):
    hosts = [Host(name=f"n{i}", address=f"127.0.0.{i}") for i in (1, 2, 3)]
    spec = TestSpec(name="stdio-bad", nodes=("n1", "n2", "n3"), db="null",
                    workload=f"stdio:{program}", time_limit=4.0, concurrency=3, rate=50, seed=1,
                    options={"stdio_timeout": 0.3})
    wl = get_workload(spec.workload, spec.options)
    res = run_test(spec, hosts, store_root=tmp_path / "store", db=NullDB(), workload=wl,
                   options=RunOptions(check=False, progress=False, recovery_s=0.0,
                                      join_timeout_s=5.0), connect_fn=MemoryRemote)
    ops = list(read_jsonl(res.store_dir / "history.jsonl"))
    validate_history(ops)  # pairing, no process reused after info
    client_ops = [o for o in ops if o.is_client]
    invokes = [o for o in client_ops if o.type == "invoke"]
    completions = [o for o in client_ops if o.type != "invoke"]
    assert len(invokes) == len(completions) > 10
    errors = {(o.error or "").split(":")[0] for o in completions if o.type == "info"}
    assert {"client crashed", "timeout", "client answered garbage"} <= errors
    assert any(o.type == "ok" for o in completions)
    left = subprocess.run(["pgrep", "-f", str(program)], capture_output=True, text=True)
    assert left.stdout.strip() == "", "a client program outlived the run"


def test_a_missing_or_non_executable_program_is_one_config_error(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        get_workload(f"stdio:{tmp_path}/nope", {})
    plain = tmp_path / "plain"
    plain.write_text("")
    with pytest.raises(ConfigError, match="not executable"):
        get_workload(f"stdio:{plain}", {})
    with pytest.raises(ConfigError, match="needs a program"):
        get_workload("stdio", {})


def test_example_clients_speak_the_protocol(tmp_path):
    """The shipped shell and Perl clients against a real tinykv node."""
    root = Path(__file__).resolve().parents[2] / "examples" / "tinykv"
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, str(root / "tinykv_plugin" / "server.py"), "--node", "n1",
                               "--peers", f"n1=127.0.0.1:{port}", "--data-dir", str(tmp_path)])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        for client in ("client.sh", "client.pl"):
            key = client
            lines = [{"f": "read", "key": key, "value": None}, {"f": "write", "key": key, "value": 3},
                     {"f": "cas", "key": key, "value": [3, 4]}, {"f": "cas", "key": key, "value": [3, 1]},
                     {"f": "read", "key": key, "value": None}]
            text = "".join(json.dumps({**x, "address": f"127.0.0.1:{port}"}) + "\n" for x in lines)
            out = subprocess.run([str(root / client)], input=text, capture_output=True, text=True,
                                 timeout=30, env={**os.environ})
            answers = [json.loads(line) for line in out.stdout.splitlines()]
            assert [(a["type"], a.get("value")) for a in answers] == [
                ("ok", None), ("ok", None), ("ok", None), ("fail", None), ("ok", 4)], client
    finally:
        server.kill()
        server.wait()


def test_an_extra_line_is_never_taken_for_the_next_answer(tmp_path):
    chatty = tmp_path / "chatty"
    chatty.write_text(f"#!{sys.executable}\nimport sys, json\nfor l in sys.stdin:\n"
                      "    v = json.loads(l)['value']\n"
                      "    print(json.dumps({'type': 'ok', 'value': v}))\n"
                      "    print(json.dumps({'type': 'ok', 'value': 'stale'}), flush=True)\n")
    chatty.chmod(0o755)
    client = StdioClient([str(chatty)], timeout=2).open(_ctx(tmp_path), "n1")
    got = []
    for i in range(4):
        got.append(client.invoke(_ctx(tmp_path), Op(type="invoke", process=i, f="read",
                                                    value=i, key="k", node="n1")).value)
        time.sleep(0.1)  # let the extra line arrive
    client.close(_ctx(tmp_path))
    assert got == [0, 1, 2, 3]
