"""The results store: layout, the latest link, secrets kept out of test.json."""

from __future__ import annotations

import json
import logging
import os

import pytest

from harness.core.errors import ConfigError
from harness.core.history import HistoryWriter, Op, read_parquet
from harness.core.layout import safe_name
from harness.run.store import RunStore, latest_run, scrub, utc_stamp


def test_layout_and_latest_link(tmp_path):
    a = RunStore.create(tmp_path, "dledger-append")
    b = RunStore.create(tmp_path, "dledger-append")
    assert a.path != b.path
    assert a.path.parent == tmp_path / "dledger-append"
    assert (a.path / "nodes").is_dir()
    link = tmp_path / "dledger-append" / "latest"
    assert link.is_symlink() and not os.readlink(link).startswith("/")
    assert latest_run(tmp_path, "dledger-append") == b.path.resolve()
    # names sort in time order
    assert sorted([a.path.name, b.path.name]) == [a.path.name, b.path.name]


def test_timestamp_format():
    s = utc_stamp()
    assert len(s) == len("20261122T215822.123Z") and s.endswith("Z") and "T" in s


def test_safe_name():
    assert safe_name("a/b c") == "a-b-c"
    with pytest.raises(ConfigError, match="name"):
        safe_name("///")


def test_test_json_has_no_secrets(tmp_path):
    st = RunStore.create(tmp_path, "t")
    st.write_test(
        {
            "name": "t",
            "options": {"db": {"ssh_password": "hunter2", "root": "/x"}},
            "hosts": [{"name": "n1", "token": "abc"}],
        }
    )
    text = (st.path / "test.json").read_text()
    assert "hunter2" not in text and "abc" not in text
    data = json.loads(text)
    assert data["options"]["db"]["root"] == "/x"
    assert scrub({"passphrase": 1}) == {"passphrase": "<redacted>"}


def test_parquet_and_results(tmp_path):
    st = RunStore.create(tmp_path, "t")
    with HistoryWriter(st.history_path) as w:
        w.append(Op(type="invoke", process=0, f="append", value={"payload": "a"}))
        w.append(Op(type="ok", process=0, f="append", value={"payload": "a", "index": 1}))
    assert st.write_parquet() == 2
    ops = read_parquet(st.parquet_path)
    assert [o.type for o in ops] == ["invoke", "ok"] and ops[1].value["index"] == 1
    st.write_results({"valid": True})
    assert json.loads(st.results_path.read_text()) == {"valid": True}
    assert not list(st.path.glob(".*tmp"))


def test_capture_log_writes_debug_and_restores(tmp_path):
    st = RunStore.create(tmp_path, "t")
    root = logging.getLogger()
    before = root.level
    with st.capture_log():
        logging.getLogger("harness.x").debug("deep detail %d", 42)
    logging.getLogger("harness.x").warning("after the run")
    assert root.level == before
    text = st.log_path.read_text()
    assert "deep detail 42" in text and "after the run" not in text
