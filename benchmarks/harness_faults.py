"""Harness-fault soak: campaigns back to back, each under one fault of the harness itself.

``benchmarks/interrupts.py`` only interrupts the harness. This soak (issue 43 item 6)
draws, for each of N short campaigns on the correct reference node (faults on), one
fault of the harness at random:

- ``interrupt``: SIGINT, SIGTERM or SIGKILL at a random moment (setup, load, heal or
  analysis);
- ``cut-short``: the control link (``harness/control/cut.py``) of one host cut for a
  few seconds during the load (TCP resets or silent drops);
- ``cut-long``: the same, lasting past the run's end, with a small
  ``$SPLITBRAIN_HEAL_DEADLINE_S`` so the run ends; afterwards the soak either lifts
  the cut itself or leaves it journaled for the next heal or clean start;
- ``store-full``: the run's store on a small tmpfs, filled by a ballast file at a
  random moment of the load;
- ``store-ro``: the run's store on an ext4 loop mount (``errors=remount-ro``), turned
  read-only through the kernel's ``trigger_fs_error`` at a random moment of the load;
- ``none``.

After each campaign it scans the hosts for leftovers; leftovers are expected only
after a SIGKILL or a long cut, and are then removed in turn either by ``splitbrain
heal`` or by the next campaign's clean start (whose ``clean-start.json`` must say
clean). It checks the run's record is readable (``results.json`` parses; for a run
that did not finish, the history JSONL reads and ``splitbrain check RUN_DIR`` gives a
verdict), and classifies the verdict: VALID and UNKNOWN are right; INVALID on the
correct node is a false alarm; VALID on a run whose heal was unconfirmed, whose
store failed or whose link was still cut at its end is wrong. Every mount made is
unmounted on every exit path (a ``finally`` per campaign, and ``atexit`` for a soak
killed between).

Usage (root and a lab; not part of the test suite)::

    splitbrain lab up --name soak --subnet 127.79.0 --nodes 5
    PYTHONPATH=. python benchmarks/harness_faults.py --lab soak -n 50 --output soak.json
    splitbrain lab down --name soak

One JSON line per campaign, a JSON summary at the end; ``--output`` is rewritten
after every campaign, so a cut-short soak keeps its data. Exit 1 when a figure that
must be 0 is not (false alarms, wrong VALIDs, unreadable records, surviving leftovers).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soak_campaigns import NEMESES, SIGNALS, WORKLOADS, cli, harness_env, run_argv, scan, start_run

KINDS = ("interrupt", "cut-short", "cut-long", "store-full", "store-ro", "none")
VERDICTS = {0: "VALID", 1: "INVALID", 2: "UNKNOWN", 3: "DIRTY"}

_MOUNTS: list[Path] = []
"""Mount points made and not yet unmounted (unmounted at exit whatever happens)."""


def _umount(path: Path) -> bool:
    for args in (["umount", str(path)], ["umount", "-l", str(path)]):
        if subprocess.run(args, capture_output=True).returncode == 0:
            if path in _MOUNTS:
                _MOUNTS.remove(path)
            return True
    return False


@atexit.register
def _umount_all() -> None:
    for p in list(_MOUNTS):
        _umount(p)


def _drop_scratch(scratch: Path) -> None:
    """At exit, however the soak ends: unmount first, so nothing is removed through a mount."""
    _umount_all()
    if not any(str(m).startswith(str(scratch)) for m in _MOUNTS):
        shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def _tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=755", "sb-soak", str(path)],
        check=True,
        capture_output=True,
    )
    _MOUNTS.append(path)
    try:
        yield path
    finally:
        _umount(path)


@contextlib.contextmanager
def _ext4_loop(img: Path, mnt: Path, size_mb: int) -> Iterator[Path]:
    """An ext4 image on a loop device with ``errors=remount-ro``; yields its error trigger."""
    mnt.mkdir(parents=True, exist_ok=True)
    with open(img, "wb") as fh:
        fh.truncate(size_mb << 20)
    try:
        subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], check=True, capture_output=True)
        subprocess.run(
            ["mount", "-o", "loop,errors=remount-ro", str(img), str(mnt)],
            check=True,
            capture_output=True,
        )
        _MOUNTS.append(mnt)
        try:
            dev = subprocess.run(
                ["findmnt", "-no", "SOURCE", str(mnt)], capture_output=True, text=True, check=True
            ).stdout.strip()
            trigger = Path("/sys/fs/ext4") / Path(dev).name / "trigger_fs_error"
            if not trigger.exists():
                raise RuntimeError(f"this kernel has no {trigger}")
            yield trigger
        finally:
            _umount(mnt)
    finally:
        img.unlink(missing_ok=True)


def _fill(path: Path) -> int:
    """Write a ballast file until the file system refuses; returns the bytes written."""
    n = 0
    chunk = b"\0" * (64 << 10)
    with contextlib.suppress(OSError), open(path / "ballast", "wb", buffering=0) as fh:
        while True:
            n += fh.write(chunk)
    return n


def _last_phase(log: Path) -> str | None:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    phases = [ln.rsplit("phase: ", 1)[1].strip() for ln in text.splitlines() if "phase: " in ln]
    return phases[-1] if phases else None


@dataclass
class Plan:
    """The harness fault one campaign gets, drawn before it starts."""

    kind: str
    signal: str | None = None
    wait_s: float = 0.0  # interrupt: from the start; the others: from the load's start
    host: str | None = None
    mode: str | None = None
    cut_s: float | None = None
    lift: str | None = None  # cut-long: "soak" lifts it, or "heal" / "next run" does

    @classmethod
    def draw(
        cls, rng: random.Random, kinds: tuple[str, ...], hosts: list[str], tl: float, turn: int = -1
    ) -> Plan:
        kind = kinds[turn % len(kinds)] if turn >= 0 else rng.choice(kinds)
        if kind == "interrupt":
            return cls(kind, signal=rng.choice(SIGNALS), wait_s=round(rng.uniform(1, tl + 14), 2))
        if kind.startswith("cut"):
            return cls(
                kind,
                wait_s=round(rng.uniform(1, max(1.5, tl - 4)), 2),
                host=rng.choice(hosts),
                mode=rng.choice(("reset", "drop")),
                cut_s=round(rng.uniform(2, 8), 1) if kind == "cut-short" else None,
                lift=rng.choice(("soak", "left")) if kind == "cut-long" else None,
            )
        if kind.startswith("store"):
            return cls(kind, wait_s=round(rng.uniform(1, max(1.5, tl - 2)), 2))
        return cls(kind)


@dataclass
class Outcome:
    """What the driver saw while the campaign ran."""

    rc: int | None = None
    load_started_s: float | None = None
    fired_s: float | None = None
    fired_phase: str | None = None
    cut_lifted_s: float | None = None
    cut_in_force_at_exit: bool = False
    ballast_bytes: int | None = None
    exited_before_fault: bool = False
    watchdog_kill: bool = False
    notes: list[str] = field(default_factory=list)


def _drive(
    proc: subprocess.Popen[bytes],
    plan: Plan,
    log: Path,
    store: Path,
    lab: str,
    timeout_s: float,
    trigger: Path | None = None,
) -> Outcome:
    """Wait for the run, injecting the plan's fault at its moment."""
    from harness.control.cut import ControlCut
    from harness.inventory.resolve import lab_hosts

    out = Outcome()
    t0 = time.monotonic()
    cut: ControlCut | None = None
    fire_at: float | None = t0 + plan.wait_s if plan.kind == "interrupt" else None
    while proc.poll() is None:
        now = time.monotonic()
        if now - t0 > timeout_s:
            out.watchdog_kill = True
            out.notes.append(f"still running after {timeout_s:.0f} s: SIGKILL")
            os.killpg(proc.pid, signal.SIGKILL)
            break
        setup = (None, "connect", "clean-start", "nemesis-setup", "db-setup")
        if (
            plan.kind != "interrupt"
            and out.load_started_s is None
            and _last_phase(log) not in setup
        ):
            out.load_started_s = round(now - t0, 2)
            fire_at = now + plan.wait_s
        if fire_at is not None and out.fired_s is None and now >= fire_at:
            out.fired_s = round(now - t0, 2)
            out.fired_phase = _last_phase(log)
            if plan.kind == "interrupt":
                assert plan.signal
                os.kill(proc.pid, getattr(signal, f"SIG{plan.signal}"))
            elif plan.kind.startswith("cut"):
                host = {h.name: h for h in lab_hosts(lab)}[plan.host or ""]
                cut = ControlCut(host, seconds=plan.cut_s, mode=plan.mode or "reset").start()
            elif plan.kind == "store-full":
                out.ballast_bytes = _fill(store)
            elif plan.kind == "store-ro":
                assert trigger is not None
                trigger.write_text("splitbrain soak\n")
        if cut is not None and cut.restored.is_set() and out.cut_lifted_s is None:
            out.cut_lifted_s = round(time.monotonic() - t0, 2)
        time.sleep(0.1)
    out.rc = proc.wait()
    if fire_at is None or out.fired_s is None:
        out.exited_before_fault = True
    if cut is not None:
        out.cut_in_force_at_exit = not cut.restored.is_set()
        if out.cut_in_force_at_exit and plan.lift != "left":  # "left": for heal or clean start
            cut.restore()
            out.cut_lifted_s = round(time.monotonic() - t0, 2)
    return out


def _record(run_dir: Path | None, out_dir: Path, name: str, env: Any, cwd: Any) -> dict[str, Any]:
    """Whether the run's record reads: results.json, else the history and a re-check."""
    from harness.core.jsonl import read_jsonl

    rec: dict[str, Any] = {"run_dir": str(run_dir) if run_dir else None}
    if run_dir is None or not run_dir.is_dir():
        rec["readable"] = "no run directory"
        return rec
    try:
        res = json.loads((run_dir / "results.json").read_text())
        rec["results"] = {True: "VALID", False: "INVALID"}.get(res.get("valid"), "UNKNOWN")
        rec["reason"] = res.get("run", {}).get("reason") or res.get("reason")
        rec["unconfirmed_heals"] = len(res.get("run", {}).get("unconfirmed_heals") or [])
        rec["checked_valid"] = res.get("checked_valid")
        finished = not res.get("run", {}).get("interrupted") and "did not finish" not in str(
            rec["reason"]
        )
    except (OSError, ValueError) as e:
        rec["results"] = f"unreadable: {e}"
        finished = False
    hist = run_dir / "history.jsonl"
    if finished:
        rec["readable"] = True
        return rec
    try:
        rec["history_ops"] = len(read_jsonl(hist)) if hist.exists() else None
    except Exception as e:  # noqa: BLE001 - what breaks is the finding
        rec["history_ops"] = f"unreadable: {type(e).__name__}: {e}"
    recheck = out_dir / f"{name}.recheck.json"
    r = subprocess.run(
        cli("check", str(run_dir), "--output", str(recheck)),
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=600,
    )
    rec["check_rc"] = r.returncode
    try:
        doc = json.loads(recheck.read_text())
        rec["check_verdict"] = {True: "VALID", False: "INVALID"}.get(doc.get("valid"), "UNKNOWN")
        rec["check_checked_valid"] = doc.get("checked_valid")
    except (OSError, ValueError):
        rec["check_verdict"] = None
        rec["check_error"] = (r.stderr or r.stdout).strip().splitlines()[-1:]
    no_history = rec["history_ops"] in (None, 0)
    rec["readable"] = (
        isinstance(rec["results"], str)
        and not rec["results"].startswith("unreadable")
        and not isinstance(rec["history_ops"], str)
        and (rec["check_verdict"] is not None or no_history)
    )
    return rec


def _clean_start(run_dir: Path | None) -> dict[str, Any] | None:
    try:
        cs = json.loads((run_dir / "clean-start.json").read_text())  # type: ignore[operator]
    except (OSError, ValueError, TypeError):
        return None
    return {
        "found": sum(len(v) for v in cs.get("before", {}).values()),
        "clean": cs.get("clean"),
        "after": sum(len(v) for v in cs.get("after", {}).values()),
    }


def classify(plan: Plan, out: Outcome, rec: dict[str, Any]) -> tuple[str, str]:
    """(verdict, right|false-alarm|wrong-valid|refused|other) for one campaign."""
    verdict = VERDICTS.get(out.rc if out.rc is not None else -1)
    if verdict is None:  # killed or interrupted: the re-check's verdict of what it left
        verdict = rec.get("check_verdict") or rec.get("results") or "NONE"
    if verdict == "DIRTY":
        return verdict, "refused"
    if plan.kind == "interrupt" and rec.get("readable") == "no run directory":
        return "NONE", "no-run"  # signalled before the run began: nothing on a host, no record
    if verdict == "INVALID" or False in (rec.get("checked_valid"), rec.get("check_checked_valid")):
        return verdict, "false-alarm"  # the checker alone calling a correct node wrong counts
    store_failed = plan.kind.startswith("store") and out.fired_s is not None
    unconfirmed = bool(rec.get("unconfirmed_heals")) or out.cut_in_force_at_exit
    if verdict == "VALID" and (store_failed or unconfirmed):
        return verdict, "wrong-valid"
    if verdict in ("VALID", "UNKNOWN"):
        return verdict, "right"
    return verdict, "other"


def one(
    i: int,
    plan: Plan,
    *,
    lab: str,
    store: Path,
    scratch: Path,
    time_limit: float,
    heal_deadline_s: float,
    env: dict[str, str] | None,
    cwd: str | None,
) -> dict[str, Any]:
    workload = WORKLOADS[i % len(WORKLOADS)]
    nemesis = NEMESES[(i // 2) % len(NEMESES)]
    name = f"hf-{i:03d}-{plan.kind}-{workload}"
    run_env = dict(env or os.environ)
    if plan.kind == "cut-long":
        run_env["SPLITBRAIN_HEAL_DEADLINE_S"] = str(heal_deadline_s)
    load0 = os.getloadavg()[0]
    with contextlib.ExitStack() as stack:
        run_store, trig = store, None
        if plan.kind == "store-full":
            run_store = stack.enter_context(_tmpfs(scratch / f"full-{i}", "32m"))
        elif plan.kind == "store-ro":
            run_store = scratch / f"ro-{i}"
            trig = stack.enter_context(_ext4_loop(scratch / f"ro-{i}.img", run_store, 64))
        started = time.monotonic()
        proc = start_run(
            store / f"{name}.log",
            run_argv(
                lab=lab,
                workload=workload,
                nemesis=nemesis,
                time_limit=time_limit,
                store=run_store,
                name=name,
            ),
            env=run_env,
            cwd=cwd,
        )
        try:
            out = _drive(
                proc,
                plan,
                run_store / name / "latest" / "splitbrain.log",
                run_store,
                lab,
                timeout_s=time_limit + 600,
                trigger=trig,
            )
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        wall = time.monotonic() - started
        latest = run_store / name / "latest"
        run_dir = latest.resolve() if latest.exists() else None
        rec = _record(run_dir, store, name, env, cwd)
        if run_dir is not None and run_store != store:  # keep the record once unmounted
            keep = store / name / run_dir.name
            shutil.copytree(run_dir, keep, ignore=shutil.ignore_patterns("ballast"))
            rec["kept_at"] = str(keep)
        clean_start = _clean_start(run_dir)
    left = scan(lab)
    verdict, klass = classify(plan, out, rec)
    summary_line = ""
    with contextlib.suppress(OSError):
        lines = (store / f"{name}.log").read_text(errors="replace").splitlines()
        summary_line = next((ln for ln in lines if ln.startswith("verdict:")), "")
    return {
        "i": i,
        "name": name,
        "kind": plan.kind,
        "plan": {k: v for k, v in plan.__dict__.items() if v is not None and k != "kind"},
        "workload": workload,
        "nemesis": nemesis,
        "rc": out.rc,
        "verdict": verdict,
        "class": klass,
        "summary_line": summary_line[:400],
        "wall_s": round(wall, 1),
        "load1_at_start": round(load0, 2),
        "drive": {k: v for k, v in out.__dict__.items() if v not in (None, False, [])},
        "record": rec,
        "clean_start": clean_start,
        "leftovers": len(left),
        "leftover_kinds": dict(Counter(x.split(": ")[1] for x in left if ": " in x)),
        "leftovers_sample": left[:6],
    }


def _heal(lab: str, env: Any, cwd: Any) -> int:
    return subprocess.run(
        cli("heal", "--lab", lab), capture_output=True, env=env, cwd=cwd, timeout=600
    ).returncode


def summarize(rows: list[dict[str, Any]], heals: list[dict[str, Any]]) -> dict[str, Any]:
    """The soak's figures; also for a saved document (``--summarize FILE``)."""
    for r in rows:  # documents written before the "no-run" class existed
        if r["kind"] == "interrupt" and r["record"].get("readable") == "no run directory":
            r["verdict"], r["class"] = "NONE", "no-run"
    kinds = Counter(r["kind"] for r in rows)
    fired = [r for r in rows if "fired_s" in r["drive"] and r["kind"] != "none"]
    sig = Counter(r["plan"]["signal"] for r in fired if r["kind"] == "interrupt")
    verdicts: dict[str, dict[str, int]] = {}
    for r in rows:
        verdicts.setdefault(r["kind"], Counter())[r["verdict"]] += 1
    left_by: dict[str, int] = Counter()
    runs_left_by: dict[str, int] = Counter()
    for r in rows:
        key = r["plan"].get("signal", r["kind"]) if r["kind"] == "interrupt" else r["kind"]
        left_by[key] += r["leftovers"]
        runs_left_by[key] += 1 if r["leftovers"] else 0
    surviving = sum(h["surviving"] for h in heals)
    loads = [r["load1_at_start"] for r in rows]
    return {
        "campaigns": len(rows),
        "by_kind": dict(kinds),
        "fault_fired": dict(Counter(r["kind"] for r in fired)),
        "interrupts_by_signal": dict(sig),
        "cuts": {
            "short": sum(1 for r in fired if r["kind"] == "cut-short"),
            "long": sum(1 for r in fired if r["kind"] == "cut-long"),
            "modes": dict(Counter(r["plan"]["mode"] for r in fired if r["kind"].startswith("cut"))),
        },
        "store_faults": {
            "full": sum(1 for r in fired if r["kind"] == "store-full"),
            "read_only": sum(1 for r in fired if r["kind"] == "store-ro"),
        },
        "verdicts_by_kind": {k: dict(v) for k, v in verdicts.items()},
        "classes": dict(Counter(r["class"] for r in rows)),
        "false_alarms": sum(1 for r in rows if r["class"] == "false-alarm"),
        "wrong_valid": sum(1 for r in rows if r["class"] == "wrong-valid"),
        "refused_dirty": sum(1 for r in rows if r["class"] == "refused"),
        "unreadable_records": sum(
            1 for r in rows if r["record"].get("readable") is not True and r["class"] != "no-run"
        ),
        "interrupted_before_the_run_began": sum(1 for r in rows if r["class"] == "no-run"),
        "unconfirmed_heal_runs": sum(1 for r in rows if r["record"].get("unconfirmed_heals")),
        "leftovers_after_campaign": dict(left_by),
        "campaigns_with_leftovers": dict(runs_left_by),
        "cleared_by": dict(Counter(h["by"] for h in heals)),
        "leftovers_surviving_the_clearing": surviving,
        "load1": {
            "min": min(loads, default=0),
            "max": max(loads, default=0),
            "mean": round(sum(loads) / max(1, len(loads)), 2),
        },
        "wall_s": round(sum(r["wall_s"] for r in rows)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lab", default="soak")
    ap.add_argument("-n", "--campaigns", type=int, default=50)
    ap.add_argument("--time-limit", type=float, default=15.0, help="load seconds per campaign")
    ap.add_argument("--heal-deadline-s", type=float, default=5.0, help="for the long cuts")
    ap.add_argument("--kinds", default=",".join(KINDS), help="harness faults to draw from")
    ap.add_argument("--seed", type=int, default=43)
    ap.add_argument("--in-turn", action="store_true", help="the kinds in turn, not drawn")
    ap.add_argument("--store", default=None, help="results store (default: a temporary dir)")
    ap.add_argument("--output", default=None, help="write the JSON document here")
    ap.add_argument(
        "--harness-path",
        default=None,
        help="checkout the runs use, as PYTHONPATH and working directory (e.g. a clean "
        "export of HEAD, so that edits in the tree do not land mid-soak)",
    )
    ap.add_argument("--deadline", default=None, help="start no campaign after this UTC HH:MM")
    ap.add_argument("--summarize", default=None, help="only print the figures of a saved document")
    args = ap.parse_args(argv)
    if args.summarize:
        saved = json.loads(Path(args.summarize).read_text())
        print(json.dumps(summarize(saved["runs"], saved["clearing"]), indent=1))
        return 0
    if os.geteuid() != 0:
        ap.error("needs root (mounts, the lab's namespaces)")
    store = Path(args.store or tempfile.mkdtemp(prefix="sb-hf-soak-")).resolve()
    store.mkdir(parents=True, exist_ok=True)
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    if bad := [k for k in kinds if k not in KINDS]:
        ap.error(f"unknown kinds {bad}; known: {', '.join(KINDS)}")
    from harness.inventory.resolve import lab_hosts

    hosts = [h.name for h in lab_hosts(args.lab)]
    scratch = Path(tempfile.mkdtemp(prefix="sb-hf-mnt-"))
    atexit.register(_drop_scratch, scratch)
    rng = random.Random(args.seed)
    env = harness_env(args.harness_path)
    rows: list[dict[str, Any]] = []
    heals: list[dict[str, Any]] = []
    pending_from: int | None = None  # a campaign whose leftovers the next clean start clears
    started = time.time()
    policy = 0
    for i in range(args.campaigns):
        if args.deadline and time.strftime("%H:%M", time.gmtime()) >= args.deadline:
            break
        plan = Plan.draw(rng, kinds, hosts, args.time_limit, i if args.in_turn else -1)
        row = one(
            i,
            plan,
            lab=args.lab,
            store=store,
            scratch=scratch,
            time_limit=args.time_limit,
            heal_deadline_s=args.heal_deadline_s,
            env=env,
            cwd=args.harness_path,
        )
        rows.append(row)
        print(json.dumps(row), flush=True)
        if pending_from is not None and row["clean_start"] is not None:
            cs = row["clean_start"]  # its clean start had to clear what the last one left
            heals.append(
                {
                    "of": pending_from,
                    "by": "next run",
                    "found": cs["found"],
                    "surviving": cs["after"] + (0 if cs["clean"] else 1),
                }
            )
            pending_from = None
        if row["leftovers"] and pending_from is None:
            policy += 1
            if policy % 2:  # every other dirty campaign: `splitbrain heal`, then a scan
                rc = _heal(args.lab, env, args.harness_path)
                after = scan(args.lab)
                heals.append(
                    {
                        "of": i,
                        "by": "heal",
                        "found": row["leftovers"],
                        "rc": rc,
                        "surviving": len(after),
                        "after_sample": after[:6],
                    }
                )
            else:  # the next campaign's clean start must clear them
                pending_from = i
        doc = {
            "command": " ".join([sys.executable, *sys.argv]),
            "store": str(store),
            "seconds": round(time.time() - started),
            "summary": summarize(rows, heals),
            "clearing": heals,
            "runs": rows,
        }
        if args.output:
            Path(args.output).write_text(json.dumps(doc, indent=1) + "\n")
    # The last campaign's leftovers, and a final check that nothing survived the soak.
    rc = _heal(args.lab, env, args.harness_path)
    final = scan(args.lab)
    if pending_from is not None:
        heals.append(
            {
                "of": pending_from,
                "by": "heal",
                "found": rows[-1]["leftovers"],
                "rc": rc,
                "surviving": len(final),
            }
        )
    summary = summarize(rows, heals)
    summary["final_scan_leftovers"] = len(final)
    summary["seconds"] = round(time.time() - started)
    doc = {
        "command": " ".join([sys.executable, *sys.argv]),
        "store": str(store),
        "seconds": summary["seconds"],
        "summary": summary,
        "clearing": heals,
        "runs": rows,
    }
    if args.output:
        Path(args.output).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({"summary": summary}, indent=1))
    bad = (
        summary["false_alarms"]
        or summary["wrong_valid"]
        or summary["unreadable_records"]
        or summary["leftovers_surviving_the_clearing"]
        or summary["final_scan_leftovers"]
        or summary["refused_dirty"]
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
