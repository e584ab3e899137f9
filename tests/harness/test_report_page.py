"""The interactive report page in a real headless Chromium: clicks, views, timing.

The page is JavaScript over an embedded JSON document; these tests load real pages
written by ``write_report`` from real files, click the way a reader does and check
what the page then shows, so a broken script, a wrong index or a view that does not
move fails here and not in front of a user.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from harness.core.history import HistoryWriter, Op
from harness.report.html import fault_colour, write_report

S = 1_000_000_000
STAMP = "20261126T120000.000Z"
ORIGIN_NS = int(datetime(2026, 11, 26, 12, 0, 0, tzinfo=timezone.utc).timestamp()) * S + 3_000_000
"""Wall time at which the fixture's history clock reads 0 (3 ms after its directory)."""


def _wall(t_ns: int) -> float:
    return (ORIGIN_NS + t_ns) / S


def make_explained_run(store: Path) -> Path:
    """A stored run with everything the page explains: faults, samples, an anomaly, logs.

    Appends every 100 ms from three workers; a partition from 2 s to 6 s; n2's clock set
    back 5 s from 4 s to 8 s; a lost ack of the append invoked at 4.5 s (57 in all, one
    example kept); splitbrain.log in a zone one hour east of UTC, as a user's laptop
    writes it; node logs with ``time=`` stamps, n2's moved by its clock fault.
    """
    run = store / "t" / STAMP
    (run / "nodes" / "n1").mkdir(parents=True)
    (run / "nodes" / "n2").mkdir(parents=True)
    ops: list[Op] = []
    for k in range(1, 90):
        t = k * S // 10
        p = k % 3
        ops.append(Op("invoke", p, "append", {"payload": f"{p}-{k}"}, node="n1", time=t))
        ops.append(
            Op("ok", p, "append", {"payload": f"{p}-{k}", "index": k}, node="n1", time=t + S // 20)
        )
    for k in range(0, 10):
        for j, node in enumerate(("n1", "n2")):
            t = k * S + j * 1000 + 7_000_000
            role = "leader" if (node == "n1") == (k < 5) else "follower"
            v = {"role": role, "term": 1 if k < 5 else 2, "leader": "n1" if k < 5 else "n2"}
            ops.append(Op("invoke", 1_000_000 + j, "sample", None, node=node, time=t))
            ops.append(
                Op("ok", 1_000_000 + j, "sample", {**v, "committed": k}, node=node, time=t + 500)
            )
    clock = {"nodes": ["n2"], "mode": "bump", "offset_ms": -5000}
    nem = [
        ("start-partition", 2 * S, {"shape": "leader"}, {"grudge": {"n1": ["n2"]}}),
        ("start-clock", 4 * S, clock, {**clock, "offsets_ms": {"n2": -5000.0}}),
        ("stop-partition", 6 * S, None, {"healed": ["n1", "n2"]}),
        ("stop-clock", 8 * S, None, {"mode": "reset"}),
    ]
    for f, t, v_in, v_out in nem:
        ops.append(Op("invoke", "nemesis", f, v_in, time=t))
        ops.append(Op("info", "nemesis", f, v_out, time=t + 10_000_000))
    ops.sort(key=lambda op: op.time)
    with HistoryWriter(run / "history.jsonl") as w:
        written = [w.append(op) for op in ops]
    lost = next(op for op in written if op.type == "ok" and op.time == 45 * S // 10 + S // 20)
    log_lines = ["2026-11-26 13:00:00,000 INFO MainThread harness.run.runner: run t: store x"]
    for op in written:
        if op.process == "nemesis" and op.type == "info" and op.f.startswith("start-"):
            # Logged 1.2 ms after the append, in the log's zone: UTC+1.
            local = datetime.fromtimestamp(_wall(op.time) + 0.0012 + 3600, tz=timezone.utc)
            stamp = local.strftime("%Y-%m-%d %H:%M:%S")
            ms = local.microsecond // 1000
            log_lines.append(
                f"{stamp},{ms:03d} INFO nemesis harness.run.phases: nemesis {op.f} x -> y"
            )
    (run / "splitbrain.log").write_text("\n".join(log_lines) + "\n")
    (run / "nodes" / "n1" / "node.log").write_text(
        f"INFO event=start long before time={_wall(1 * S):.6f}\n"
        f"ROLE term=1 role=leader became leader again time={_wall(4 * S):.6f}\n"
        "  a continuation line without a stamp\n"
        f"INFO event=other much later time={_wall(9 * S):.6f}\n"
    )
    (run / "nodes" / "n2" / "node.log").write_text(
        f"INFO event=clock-moved saw the append time={_wall(46 * S // 10 - 5 * S):.6f}\n"
    )
    (run / "test.json").write_text(
        json.dumps({"name": "explained", "db": "dledger", "nemesis": ["partition", "clock"]})
    )
    example = {"payload": "0-45", "index": 45, "indexes": [lost.index]}
    note = {"node": "n1", "indexes": [written[-1].index]}
    (run / "results.json").write_text(
        json.dumps(
            {
                "valid": False,
                "checkers": {
                    "log-safety": {
                        "valid": False,
                        "anomalies": {"lost-ack": [example]},
                        "notes": {"something-odd": [note]},
                        "stats": {"appends": {"ok": 89}, "anomaly_counts": {"lost-ack": 57}},
                    }
                },
                "anomalies": {"lost-ack": [example]},
            }
        )
    )
    return run


def _chromium_or_skip() -> None:
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        pytest.skip("Debian's chromium is not installed")
    if not shutil.which("chromedriver"):
        pytest.skip("Debian's chromium-driver is not installed")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    _chromium_or_skip()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    from harness.bench.report import chromium_options

    profile = tmp_path_factory.mktemp("chromium-profile")
    drv = webdriver.Chrome(
        service=Service(shutil.which("chromedriver")),
        options=chromium_options(profile, width=1400, height=1100),
    )
    yield drv
    drv.quit()


def _open(browser: Any, page: Path, timeout_s: float = 30.0) -> float:
    browser.get(page.resolve().as_uri())
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready = browser.execute_script("return window.__reportReady || null")
        if ready is not None:
            severe = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
            assert not severe, severe
            return float(ready)
        time.sleep(0.05)
    raise AssertionError(f"{page} never became ready")


def _view(browser: Any) -> tuple[int, int]:
    from selenium.webdriver.common.by import By

    raw = browser.find_element(By.ID, "timeline").get_attribute("data-view")
    lo, hi = raw.split(",")
    return int(lo), int(hi)


def _shot_dir(tmp_path: Path) -> Path:
    """Where screenshots go: ``$SPLITBRAIN_SCREENSHOT_DIR`` to keep them, else the test's tmp."""
    keep = os.environ.get("SPLITBRAIN_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        return Path(keep)
    return tmp_path


@pytest.mark.integration
def test_clicking_an_anomaly_zooms_to_its_ops_and_explains_them(browser, tmp_path):
    from PIL import Image
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    run = make_explained_run(tmp_path / "store")
    page = write_report(run)
    _open(browser, page)
    whole = _view(browser)
    assert whole[0] == 0 and whole[1] >= 9 * S // 1000
    heads = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".kind-head")]
    assert any(h.startswith("lost-ack 57") for h in heads), heads  # the true count
    assert any("something-odd" in h for h in heads)
    item = browser.find_element(By.CSS_SELECTOR, "li[data-kind='lost-ack']")
    item.click()
    time.sleep(0.3)
    lo, hi = _view(browser)
    # The view moved onto the op (4.5 s .. 4.55 s) and narrowed around it.
    assert (lo, hi) != whole
    assert lo < 4_500_000 and hi > 4_550_000 and hi - lo < 2_000_000
    detail = browser.find_element(By.ID, "detail").text
    results = json.loads((run / "results.json").read_text())
    [cited] = results["anomalies"]["lost-ack"][0]["indexes"]
    assert f"Ops cited: #{cited}" in detail
    assert f"→ #{cited}" in detail  # the row names the op by its invoke and completion
    assert "partition" in detail and "clock" in detail  # both faults were in force
    assert "became leader again" in detail and "clock-moved" in detail
    assert "long before" not in detail and "much later" not in detail
    assert "[clock -5000 ms]" in detail
    assert "selected" in item.get_attribute("class")
    # Hovering the outlined op names it.
    at = browser.execute_script(f"return window.__report.pointOf({cited})")
    canvas = browser.find_element(By.ID, "timeline")
    ActionChains(browser).move_to_element_with_offset(
        canvas, int(at["x"] - canvas.rect["width"] / 2), int(at["y"] - canvas.rect["height"] / 2)
    ).perform()
    time.sleep(0.2)
    tip = browser.find_element(By.ID, "tip")
    assert tip.is_displayed() and f"→ #{cited}  append  ok" in tip.text, tip.text
    ActionChains(browser).move_by_offset(0, 400).perform()  # off the op: the tip goes
    shot = _shot_dir(tmp_path) / "report-page.png"
    browser.save_screenshot(str(shot))
    img = Image.open(shot).convert("RGB")
    colours = {c for _, c in img.getcolors(maxcolors=1 << 22)}
    assert (0xD0, 0x00, 0x00) in colours, "the cited op is not outlined"
    partition = tuple(int(fault_colour("partition")[i : i + 2], 16) for i in (1, 3, 5))
    assert partition in colours, "no partition bar drawn"


@pytest.mark.integration
def test_dragging_and_the_wheel_move_the_view(browser, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.actions.wheel_input import ScrollOrigin
    from selenium.webdriver.common.by import By

    page = write_report(make_explained_run(tmp_path / "store"))
    _open(browser, page)
    canvas = browser.find_element(By.ID, "timeline")
    browser.find_element(By.ID, "zoom-in").click()
    time.sleep(0.1)
    a = _view(browser)
    assert a[1] - a[0] < 6 * S // 1000
    ActionChains(browser).move_to_element(canvas).click_and_hold().move_by_offset(
        -200, 0
    ).release().perform()
    time.sleep(0.1)
    b = _view(browser)
    assert b[0] > a[0] and b[1] - b[0] == pytest.approx(a[1] - a[0], abs=2)
    ActionChains(browser).scroll_from_origin(ScrollOrigin.from_element(canvas), 0, -300).perform()
    time.sleep(0.2)
    c = _view(browser)
    assert c[1] - c[0] < b[1] - b[0]  # wheel up zooms in


@pytest.mark.integration
def test_a_plugin_db_run_without_sampler_or_logs_still_explains(browser, tmp_path):
    """Another system's history: its own fs, string keys, no sampler, no node logs."""
    from selenium.webdriver.common.by import By

    run = tmp_path / "plugin-run"
    run.mkdir()
    with HistoryWriter(run / "history.jsonl") as w:
        for k in range(200):
            t = k * 10_000_000
            f = ("put", "get", "enqueue")[k % 3]
            w.append(Op("invoke", k % 4, f, k, key=f"key-{k % 5}", time=t + 1))
            typ = "fail" if k % 17 == 0 else "ok"
            w.append(Op(typ, k % 4, f, k, key=f"key-{k % 5}", time=t + 5_000_000))
    cex = {"key": "key-2", "window": [154, 155], "op": {}, "state": None, "why": "stale read"}
    (run / "results.json").write_text(
        json.dumps(
            {
                "valid": False,
                "checkers": {
                    "linearizable": {
                        "valid": False,
                        "counterexample": cex,
                        "anomalies": {"nonlinearizable": [{"key": "key-2", "indexes": [154, 155]}]},
                    }
                },
                "anomalies": {"nonlinearizable": [{"key": "key-2", "indexes": [154, 155]}]},
            }
        )
    )
    page = write_report(run)
    _open(browser, page)
    legend = browser.find_element(By.ID, "legend").text
    assert "no sampler ops" in legend and "key key-2" in legend
    browser.find_element(By.CSS_SELECTOR, "li[data-kind='nonlinearizable']").click()
    time.sleep(0.2)
    detail = browser.find_element(By.ID, "detail").text
    assert "Ops cited: #154, #155" in detail and "enqueue" in detail
    assert "wall-clock time is unknown" in detail
    lo, hi = _view(browser)
    assert lo < 770_000 < hi and hi - lo < 2_000_000


@pytest.mark.integration
def test_a_20k_op_report_opens_within_3_s(tmp_path):
    _chromium_or_skip()
    from harness.bench.report import measure

    got = measure(20_000, tmp_path, opens=1)
    assert got["open_to_ready_ms_best"] <= 3000, got
    assert got["page_bytes"] < 1_500_000, got


@pytest.mark.slow
@pytest.mark.integration
def test_a_100k_op_report_opens_within_3_s(tmp_path):
    _chromium_or_skip()
    from harness.bench.report import measure

    got = measure(100_000, tmp_path, opens=3)
    assert got["open_to_ready_ms_median"] <= 3000, got
    assert got["page_bytes"] < 6_000_000, got


COVERAGE = {
    "concurrent-candidates": {"count": 3, "first_s": 4.5},
    "kill-with-ops-in-flight": {"count": 0, "first_s": None},
    "unobservable": {"healed-minority-uncommitted": "needs samples, which this run did not have"},
    "sources": ["events:vote", "history"],
    "events": {"count": 40, "kinds": ["vote"]},
}


@pytest.mark.integration
def test_coverage_section_shows_each_state_and_jumps_to_the_first_time(browser, tmp_path):
    """Issue 27: reached, not reached and unobservable are three different rows; the first
    time of a reached situation opens that moment on the timeline."""
    from selenium.webdriver.common.by import By

    run = make_explained_run(tmp_path / "store")
    results = json.loads((run / "results.json").read_text())
    (run / "results.json").write_text(json.dumps({**results, "coverage": COVERAGE}))
    page = write_report(run)
    _open(browser, page)

    def row(name: str) -> Any:
        return browser.find_element(By.CSS_SELECTOR, f"#coverage tr[data-situation='{name}']")

    assert row("concurrent-candidates").find_element(By.CLASS_NAME, "state").text == "reached"
    assert row("kill-with-ops-in-flight").find_element(By.CLASS_NAME, "state").text == (
        "not reached"
    )
    blind = row("healed-minority-uncommitted")
    assert blind.find_element(By.CLASS_NAME, "state").text == "unobservable"
    assert "needs samples" in blind.text
    section = browser.find_element(By.ID, "coverage").text
    assert "1 of 2 observable situations reached; 1 not observable with this DB" in section
    whole = _view(browser)
    row("concurrent-candidates").find_element(By.CSS_SELECTOR, "button.cov-t").click()
    time.sleep(0.3)
    lo, hi = _view(browser)
    assert (lo, hi) != whole and lo < 4_500_000 < hi and hi - lo <= 4_000_000


def test_a_run_without_coverage_says_so(tmp_path):
    run = make_explained_run(tmp_path / "store")
    text = write_report(run).read_text()
    assert "<h2>Coverage</h2>" in text and "no coverage block" in text


@pytest.mark.integration
def test_a_valid_run_lists_no_anomaly_and_its_notes_apart(browser, tmp_path):
    """Issue 45: a VALID run's "Anomalies" panel listed the checkers' notes as if they
    were anomalies, and the nemesis of nine faults read "9 items; first: [...]"."""
    from selenium.webdriver.common.by import By

    run = make_explained_run(tmp_path / "store")
    results = json.loads((run / "results.json").read_text())
    ls = results["checkers"]["log-safety"]
    ls.update(valid=True, anomalies={}, stats={"anomaly_counts": {}})
    results.update(valid=True, anomalies={})
    (run / "results.json").write_text(json.dumps(results))
    faults = ["partition", "kill", "pause", "clock", "loss", "delay", "disk", "lull", "membership"]
    test = json.loads((run / "test.json").read_text())
    (run / "test.json").write_text(json.dumps({**test, "nemesis": faults}))
    page = write_report(run)
    assert f"<th>nemesis</th><td>{', '.join(faults)}</td>" in page.read_text()
    _open(browser, page)
    panel = browser.find_element(By.ID, "anomalies")
    heads = [e.text for e in panel.find_elements(By.CSS_SELECTOR, "#no-anomalies, h3, .kind-head")]
    assert heads[0] == "None: the checkers found no anomaly."
    assert heads[1] == "Notes (not anomalies)" and heads[2].startswith("something-odd")
    assert len(heads) == 3
