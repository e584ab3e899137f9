"""The results browser, driven by a real headless Chromium through selenium."""

from __future__ import annotations

import json
import shutil
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from harness.core.history import HistoryWriter, Op
from harness.report.serve import list_runs, make_server


def _make_run(store: Path, test: str, stamp: str, valid, anomalies=None, samples=0) -> Path:
    run = store / test / stamp
    run.mkdir(parents=True)
    with HistoryWriter(run / "history.jsonl") as w:
        w.append(Op("invoke", 0, "append", {"payload": "0-0"}, time=10))
        w.append(Op("ok", 0, "append", {"payload": "0-0", "index": 1, "term": 1}, time=20))
        w.append(Op("invoke", "nemesis", "start-partition", {"grudge": {}}, time=30))
        w.append(Op("info", "nemesis", "start-partition", {"grudge": {}}, time=40))
        w.append(Op("invoke", 1, "append", {"payload": "1-0"}, time=50))
        w.append(Op("ok", 1, "append", {"payload": "1-0", "index": 2, "term": 1}, time=60))
        for k in range(samples):
            w.append(Op("invoke", 1_000_000, "sample", None, node="n1", time=100 + k))
            w.append(Op("ok", 1_000_000, "sample", {"role": "leader"}, node="n1", time=101 + k))
    (run / "test.json").write_text(
        json.dumps(
            {
                "name": test,
                "nemesis": ["partition", "kill"],
                "bug": "ack-before-quorum" if not valid else None,
            }
        )
    )
    (run / "results.json").write_text(
        json.dumps(
            {
                "valid": valid,
                "checkers": {"log-safety": {"valid": valid}},
                "anomalies": anomalies or {},
            }
        )
    )
    return run


@pytest.fixture
def store(tmp_path):
    s = tmp_path / "store"
    _make_run(s, "append-ok", "20261122T100000Z", True)
    _make_run(
        s,
        "append-bug",
        "20261122T110000Z",
        False,
        {"lost-ack": [{"indexes": [5], "payload": "1-0"}]},
    )
    (s / "append-bug" / "latest").symlink_to("20261122T110000Z")
    return s


@pytest.fixture
def server(store):
    srv = make_server(store, "127.0.0.1", 0)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_list_runs_reads_the_store(store):
    runs = list_runs(store)
    assert [(r.test, r.valid, r.ops) for r in runs] == [
        ("append-bug", False, 2),
        ("append-ok", True, 2),
    ]
    assert runs[0].anomalies == ["lost-ack"] and runs[0].faults == ["partition", "kill"]


def test_the_browser_counts_client_ops_as_the_summary_does(tmp_path):
    """Issue 45: the browser counted every client invocation, the samplers' too (21,906
    for a run whose summary said 4,483/7,079/217): now the run's own count, the one the
    summary line and the report show, and without one the history's, samplers left out."""
    from harness.report.html import write_report
    from harness.run.summary import client_op_counts, verdict_line

    store = tmp_path / "store"
    run = _make_run(store, "sampled", "20261122T100000Z", True, samples=5)
    assert "client ops</th><td>2 (ok 2, fail 0, info 0)" in write_report(run).read_text()
    assert [r.ops for r in list_runs(store)] == [2]  # the history: samples are not client ops
    results = json.loads((run / "results.json").read_text())
    results["run"] = {"ops": 16, "ok": 4483, "fail": 7079, "info": 217, "extra_ops": 10117}
    (run / "results.json").write_text(json.dumps(results))
    assert client_op_counts(results) == {"ok": 4483, "fail": 7079, "info": 217}
    assert "ops ok/fail/info: 4483/7079/217" in verdict_line(results)
    assert [r.ops for r in list_runs(store)] == [4483 + 7079 + 217]
    assert "client ops</th><td>11,779 (ok 4,483, fail 7,079, info 217)" in (
        write_report(run).read_text()
    )


def test_index_and_lazy_report_over_http(server, store):
    page = urllib.request.urlopen(server + "/").read().decode()
    assert "append-bug" in page and "INVALID" in page and "VALID" in page
    report = (
        urllib.request.urlopen(server + "/append-bug/20261122T110000Z/report.html").read().decode()
    )
    assert "lost-ack" in report
    assert (store / "append-bug" / "20261122T110000Z" / "report.html").exists()
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(server + "/../../etc/passwd")


@pytest.mark.integration
def test_a_newcomer_clicks_through_in_a_real_browser(server, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_bin = shutil.which("chromedriver")
    if not (chromium and driver_bin):
        pytest.skip("Debian's chromium and chromium-driver are not installed")
    from PIL import Image
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1280,900",
    ):
        opts.add_argument(flag)
    browser = webdriver.Chrome(service=Service(driver_bin), options=opts)
    try:
        browser.get(server + "/")
        rows = browser.find_elements(By.CSS_SELECTOR, "tr.INVALID")
        assert len(rows) == 1 and "append-bug" in rows[0].text and "lost-ack" in rows[0].text
        shot = tmp_path / "index.png"
        browser.save_screenshot(str(shot))
        img = Image.open(shot).convert("RGB")
        colours = {c for _, c in img.getcolors(maxcolors=1 << 20)}
        assert (0xFF, 0xD6, 0xD6) in colours, "the invalid run's red verdict cell is not on screen"
        rows[0].find_element(By.LINK_TEXT, "report").click()
        assert "INVALID" in browser.find_element(By.CSS_SELECTOR, ".verdict").text
        # The served page is the interactive one: its script runs and draws over HTTP too.
        for _ in range(100):
            if browser.execute_script("return window.__reportReady || null") is not None:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the served report never became ready")
        browser.find_element(By.CSS_SELECTOR, "li[data-kind='lost-ack']").click()
        detail = browser.find_element(By.ID, "detail").text
        assert "Ops cited: #5" in detail and "#4 → #5" in detail, "offending op not explained"
        browser.save_screenshot(str(tmp_path / "report.png"))
    finally:
        browser.quit()
