"""JUnit output and exit codes for CI."""

import xml.etree.ElementTree as ET

from harness.core.verdict import exit_code_for, worst_exit_code
from harness.report.junit import junit_xml


def test_exit_codes():
    assert [exit_code_for(v) for v in (True, False, "unknown")] == [0, 1, 2]
    assert exit_code_for("unknown", fail_on_unknown=True) == 1
    assert worst_exit_code([0, 2, 0]) == 2
    assert worst_exit_code([0, 2, 1]) == 1
    assert worst_exit_code([0, 0]) == 0
    assert worst_exit_code([1, 4]) == 4
    assert worst_exit_code([]) == 2


def test_junit_marks_invalid_as_failure_and_unknown_as_skipped():
    runs = [
        {"name": "run-1", "path": "store/a/1", "seconds": 3.5, "results": {"valid": True}},
        {
            "name": "run-2",
            "path": "store/a/2",
            "seconds": 4,
            "results": {"valid": False, "anomalies": {"lost-ack": [{"indexes": [3]}]}},
        },
        {
            "name": "run-3",
            "path": "store/a/3",
            "results": {"valid": "unknown", "reason": "timeout <&>"},
        },
    ]
    root = ET.fromstring(junit_xml(runs))
    assert root.get("tests") == "3" and root.get("failures") == "1"
    cases = root.findall("testcase")
    assert cases[1].find("failure").get("message") == "anomalies: lost-ack"
    assert cases[2].find("skipped").get("message") == "unknown: timeout <&>"
    strict = ET.fromstring(junit_xml(runs, fail_on_unknown=True))
    assert strict.get("failures") == "2"
