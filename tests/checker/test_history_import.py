"""Importing Jepsen/Knossos EDN and Porcupine logs into ops."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.core.errors import HistoryError
from harness.core.foreign import read_edn, read_porcupine
from harness.core.history import read_history, validate_history

EDN = """; a comment line
[{:process 0, :type :invoke, :f :write, :value 3, :time 10}
 ; between elements
 {:process 0, :type :ok, :f :write, :value 3}
 {:process :nemesis, :type :info, :f :start, :value "partition \\"a\\""}
 {:type :invoke, :f :cas, :process 1, :value [3 4]}
 {:type :fail, :f :cas, :process 1, :value [3 4], :error [:not-found "x"]}]
"""


def test_edn_fields(tmp_path: Path) -> None:
    p = tmp_path / "h.edn"
    p.write_text(EDN)
    ops = read_history(p)
    assert [o.index for o in ops] == [0, 1, 2, 3, 4]
    assert ops[0].type == "invoke" and ops[0].f == "write" and ops[0].value == 3 and ops[0].time == 10
    assert ops[1].time == 0
    assert ops[2].process == "nemesis" and ops[2].value == 'partition "a"'
    assert ops[3].value == [3, 4] and ops[3].key is None      # unkeyed cas stays a pair
    assert ops[4].error == '["not-found", "x"]'
    validate_history(ops)


def test_edn_independent_tuples_and_list_form(tmp_path: Path) -> None:
    p = tmp_path / "k.edn"
    p.write_text("""({:process 3, :type :invoke, :f :cas, :value [7 [1 2]]}
 {:process 3, :type :ok, :f :cas, :value [7 [1 2]]}
 {:process 4, :type :invoke, :f :read, :value [:k nil]}
 {:process :nemesis, :type :info, :f :stop, :value nil}
 {:process 4, :type :ok, :f :read, :value [:k 4]})""")
    ops = read_edn(p)
    assert (ops[0].key, ops[0].value) == ("7", [1, 2])
    assert (ops[4].key, ops[4].value) == ("k", 4)
    assert ops[3].key is None


def test_edn_fallback_to_edn_format(tmp_path: Path) -> None:
    p = tmp_path / "t.edn"
    p.write_text('[{:process 0, :type :invoke, :f :read, :value #{1 2}, :time 1}'
                 ' {:process 0, :type :ok, :f :read, :value 1.5}]')
    ops = read_edn(p)
    assert ops[0].value == [1, 2] and ops[1].value == 1.5


def test_edn_errors_name_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.edn"
    p.write_text('[{:process 0, :type :invoke, :f :read}\n\n {:process 0, :type :done, :f :read}]')
    with pytest.raises(HistoryError, match=r"bad\.edn:3: op 1, field 'type'"):
        read_edn(p)
    p.write_text("[{:process 0 :type")
    with pytest.raises(HistoryError, match=r"bad\.edn:1: not valid EDN"):
        read_edn(p)


def test_porcupine_etcd_log(tmp_path: Path) -> None:
    p = tmp_path / "etcd_x.log"
    p.write_text("INFO  jepsen.util - 0\t:invoke\t:cas\t[1 2]\n"
                 "INFO  jepsen.util - 1\t:invoke\t:write\t4\n"
                 "INFO  jepsen.util - 0   :fail   :cas    [1 2]\n"
                 "INFO  jepsen.util - 1\t:info\t:write\t:timed-out\n"
                 "INFO  jepsen.util - 2\t:invoke\t:read\tnil\n"
                 "INFO  jepsen.util - 2\t:ok\t:read\tnil\n")
    ops = read_porcupine(p)
    assert [(o.process, o.type, o.f) for o in ops][:4] == [
        (0, "invoke", "cas"), (1, "invoke", "write"), (0, "fail", "cas"), (1, "info", "write")]
    assert ops[0].value == [1, 2] and ops[3].value is None and ops[3].error == "timed-out"
    assert ops[5].value is None and ops[5].key is None
    p.write_text("INFO  jepsen.util - 0\t:invoke\t:read\tnil\nINFO  jepsen.util - 0 :ok :read x\n")
    with pytest.raises(HistoryError, match=r"etcd_x\.log:2: field 'value'"):
        read_porcupine(p)


def test_porcupine_kv(tmp_path: Path) -> None:
    p = tmp_path / "c01.txt"
    p.write_text('{:process 0, :type :invoke, :f :get, :key "3", :value nil}\n'
                 '{:process 0, :type :ok, :f :get, :key "3", :value ""}\n'
                 '{:type :invoke, :process 1, :f :append, :key "2", :value "x 1 y"}\n'
                 '{:process 1, :type :ok, :f :append, :key "2", :value "x 1 y"}\n')
    ops = read_porcupine(p)
    assert [(o.f, o.key, o.value) for o in ops] == [
        ("get", "3", None), ("get", "3", ""), ("append", "2", "x 1 y"), ("append", "2", "x 1 y")]
    p.write_text('{:process 0, :type :invoke, :f :get, :key "3", :value nil}\nnonsense\n')
    with pytest.raises(HistoryError, match=r"c01\.txt:2"):
        read_porcupine(p)
