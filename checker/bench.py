"""``splitbrain bench checker``: how fast the checkers are, against fixed baselines.

Two questions, two parts. (a) Is our linearizability search in Porcupine's
league? Every corpus history is checked with the local engine and its time set
beside Porcupine's own timing of the same file on a 2-core machine (shipped
with the corpora). (b) Does the Spark engine scale? Synthetic append+sampler
histories of growing size (generated in a child process) are checked on Spark,
with wall time, throughput, the driver's peak memory (the Python process and, in
local mode, its JVM child) and the machine's load meanwhile, and the local engine
on the smallest size as a same-run baseline. Everything is printed as one JSON
document.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

__all__ = ["bench_checker", "corpora_bench", "scale_bench", "MemorySampler"]

DEFAULT_CORPORA = Path(__file__).resolve().parents[2] / "shared" / "corpora"
DEFAULT_PEERS = DEFAULT_CORPORA.parent / "peers" / "porcupine"
ABSENT = {"jepsen/etcd_095.log", "mutex/bad/hazelcast.edn"}
_MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "etcd-cas-register": ("cas-register", {}),
    "cas-register": ("knossos-cas-register", {}),
    "kv-put-get-append": ("kv", {}),
    "multi-register": ("multi-register", {"initial": {"x": 0, "y": 0}}),
    "mutex": ("mutex", {}),
}


# --------------------------------------------------------------------------- (a) corpora

# Our own Go test, compiled into a copy of Porcupine's package beside its TestTimeCorpus:
# it reads the Knossos histories our bench exported (exactly the ops our search sees:
# fails dropped, open ops returning at the end, unobserved reads left out) and times
# Porcupine's CheckEvents on them with Knossos' models, median of 5, as TestTimeCorpus
# does for Porcupine's own corpora; and it records Porcupine's verdict on every file.
GO_TEST = """package porcupine

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

type sbMop struct {
	write, any bool
	k          int
	v          int64
}

type sbOp struct {
	f         byte // r read, w write, c cas, a acquire, l release, t txn
	a, b      int64
	any, unk  bool // any: a read legal in every state; unk: output unknown
	mops      []sbMop
}

type sbRegs [8]int64

func sbStep(state, input, output interface{}) (bool, interface{}) {
	op := input.(*sbOp)
	switch op.f {
	case 'r':
		return op.any || state.(int64) == op.a, state
	case 'w':
		return true, op.a
	case 'c':
		if state.(int64) == op.a {
			return true, op.b
		}
		return op.unk, state
	case 'a':
		if !state.(bool) {
			return true, true
		}
		return op.unk, state
	case 'l':
		if state.(bool) {
			return true, false
		}
		return op.unk, state
	}
	s := state.(sbRegs)
	for _, m := range op.mops {
		if m.write {
			s[m.k] = m.v
		} else if !m.any && s[m.k] != m.v {
			return op.unk, state
		}
	}
	return true, s
}

func sbAtoi(s string) int64 { v, _ := strconv.ParseInt(s, 10, 64); return v }

// One history: a "model" line (cas INIT | mutex | multi V0 V1 ...), then events,
// "C id f a b any unk [k:w:v:any ...]" or "R id".
func sbRead(path string) (Model, []Event) {
	fh, err := os.Open(path)
	if err != nil {
		panic(err)
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	var model Model
	var evs []Event
	for sc.Scan() {
		w := strings.Fields(sc.Text())
		switch w[0] {
		case "model":
			switch w[1] {
			case "cas":
				init := sbAtoi(w[2])
				model = Model{Init: func() interface{} { return init }, Step: sbStep}
			case "mutex":
				model = Model{Init: func() interface{} { return false }, Step: sbStep}
			default:
				var init sbRegs
				for i, x := range w[2:] {
					init[i] = sbAtoi(x)
				}
				model = Model{Init: func() interface{} { return init }, Step: sbStep}
			}
		case "C":
			op := &sbOp{f: w[2][0], a: sbAtoi(w[3]), b: sbAtoi(w[4]), any: w[5] == "1", unk: w[6] == "1"}
			for _, m := range w[7:] {
				p := strings.Split(m, ":")
				k, _ := strconv.Atoi(p[0])
				op.mops = append(op.mops, sbMop{write: p[1] == "w", k: k, v: sbAtoi(p[2]), any: p[3] == "1"})
			}
			id, _ := strconv.Atoi(w[1])
			evs = append(evs, Event{Kind: CallEvent, Value: op, Id: id})
		case "R":
			id, _ := strconv.Atoi(w[1])
			evs = append(evs, Event{Kind: ReturnEvent, Id: id})
		}
	}
	return model, evs
}

func sbMedian(f func()) float64 {
	var ds []float64
	for i := 0; i < 5; i++ {
		s := time.Now()
		f()
		ds = append(ds, time.Since(s).Seconds())
	}
	sort.Float64s(ds)
	return ds[2]
}

func TestSplitbrainBench(t *testing.T) {
	out, err := os.Create(os.Getenv("SB_OUT"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	for n := 0; n <= 102; n++ {
		if n == 95 {
			continue
		}
		f := fmt.Sprintf("jepsen/etcd_%03d.log", n)
		fmt.Fprintf(out, "verdict,porcupine,%s,%v\\n", f, CheckEvents(etcdModel, parseJepsenLog("test_data/"+f)))
	}
	for _, c := range []string{"c01-ok", "c01-bad", "c10-ok", "c10-bad", "c50-ok", "c50-bad"} {
		f := "kv/" + c + ".txt"
		fmt.Fprintf(out, "verdict,porcupine,%s,%v\\n", f, CheckEvents(kvModel, parseKvLog("test_data/"+f)))
	}
	dir := os.Getenv("SB_KNOSSOS")
	index, err := os.ReadFile(filepath.Join(dir, "index.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(index)), "\\n") {
		p := strings.SplitN(line, "\\t", 2)
		model, evs := sbRead(filepath.Join(dir, p[0]))
		var ok bool
		d := sbMedian(func() { ok = CheckEvents(model, evs) })
		fmt.Fprintf(out, "time,knossos,%s,%.6f\\n", p[1], d)
		fmt.Fprintf(out, "verdict,knossos,%s,%v\\n", p[1], ok)
	}
}
"""


def _baselines(root: Path) -> dict[tuple[str, str], float]:
    """Porcupine's median check time in seconds, by (corpus, file)."""
    out: dict[tuple[str, str], float] = {}
    p = root / "porcupine" / "porcupine_baseline_timings.csv"
    if p.exists():
        with open(p, newline="") as fh:
            for r in csv.DictReader(fh):
                # The kv files were also timed with an unpartitioned whole-map model,
                # ~2,500x slower; we partition by key, so compare with the partitioned run.
                if "NoPartition" in r["checker"]:
                    continue
                out[("porcupine", r["file"])] = float(r["check_us_median"]) / 1e6
    k = root / "knossos" / "porcupine_crosscheck.csv"
    if k.exists():
        with open(k, newline="") as fh:
            for r in csv.DictReader(fh):
                # Knossos' cas-register starts at 0; keep that row where there are two.
                if r["initial_state"] in ("0", "") or ("knossos", r["file"]) not in out:
                    out[("knossos", r["file"])] = float(r["check_us_median"]) / 1e6
    return out


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"not an int: {v!r}")
    return v


def _events_text(entries: list[Any], name: str, params: dict[str, Any]) -> str:
    """One history for GO_TEST: its model line, then call and return events in real-time order."""
    from checker.models import UNKNOWN

    kidx: dict[Any, int] = {}
    if name == "knossos-cas-register":
        lines = ["model cas 0"]
    elif name == "mutex":
        lines = ["model mutex"]
    elif name == "multi-register":
        init = params["initial"]
        kidx = {k: i for i, k in enumerate(sorted(init))}
        if len(kidx) > 8:
            raise ValueError("more registers than the Go side holds")
        lines = ["model multi " + " ".join(str(_int(init[k])) for k in sorted(init))]
    else:
        raise ValueError(f"no Go model for {name}")
    events = sorted(
        [(e.call, e.id, True) for e in entries] + [(e.ret, e.id, False) for e in entries]
    )
    for _, oid, is_call in events:
        if not is_call:
            lines.append(f"R {oid}")
            continue
        e = entries[oid]
        f, v = e.inp
        unk = int(e.out is UNKNOWN)
        if f == "read":
            nil = e.out is UNKNOWN or e.out is None
            lines.append(f"C {oid} r {0 if nil else _int(e.out)} 0 {int(nil)} {unk}")
        elif f == "write":
            lines.append(f"C {oid} w {_int(v)} 0 0 {unk}")
        elif f == "cas":
            lines.append(f"C {oid} c {_int(v[0])} {_int(v[1])} 0 {unk}")
        elif f in ("acquire", "release"):
            lines.append(f"C {oid} {'a' if f == 'acquire' else 'l'} 0 0 0 {unk}")
        elif f == "txn":
            mops = e.out if isinstance(e.out, list) else v
            parts = []
            for mf, k, x in mops:
                if mf == "write":
                    parts.append(f"{kidx[k]}:w:{_int(x)}:0")
                else:
                    any_value = bool(unk) or x is None
                    parts.append(f"{kidx[k]}:r:{0 if any_value else _int(x)}:{int(any_value)}")
            lines.append(f"C {oid} t 0 0 0 {unk} " + " ".join(parts))
        else:
            raise ValueError(f"no Go op for {f}")
    return "\n".join(lines) + "\n"


def _export_knossos(root: Path, out: Path) -> list[str]:
    """Write each Knossos history as our search sees it (``make_entries``), for GO_TEST."""
    from checker.linearizable import make_entries, partition_ops
    from checker.models import get_model
    from harness.core.history import read_history

    out.mkdir(parents=True, exist_ok=True)
    index: list[str] = []
    with open(root / "knossos" / "manifest.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["file"] not in ABSENT]
    for i, r in enumerate(rows):
        path = root / "knossos" / r["file"]
        if not path.exists() or r["model"] not in _MODELS:
            continue
        name, params = _MODELS[r["model"]]
        model = get_model(name, **params)
        parts = list(partition_ops(read_history(path), model).values()) or [[]]
        if len(parts) != 1:
            continue
        try:
            text = _events_text(make_entries(parts[0], model), name, params)
        except (ValueError, TypeError, KeyError):
            continue  # a value the Go side cannot hold: no live baseline
        (out / f"{i}.ev").write_text(text, encoding="ascii")
        index.append(f"{i}.ev\t{r['file']}")
    (out / "index.txt").write_text("\n".join(index) + "\n", encoding="ascii")
    return [line.split("\t")[1] for line in index]


def porcupine_live(root: Path, peers: Path) -> dict[str, Any]:
    """Build Porcupine from ``peers`` with the local Go and time it on both corpora, now.

    Porcupine's corpus: its own ``TestTimeCorpus`` (its parsers and models, median
    of 5, parsing excluded). Knossos' corpus: :data:`GO_TEST` on our export of it.
    Returns ``{"times": {(corpus, file): s}, "verdicts": {(corpus, file): bool},
    "go": version, "build_s", "run_s", "load_before", "load_after"}``; raises
    RuntimeError when Go or the peer source is missing or the build fails.
    """
    import shutil
    import subprocess

    go = shutil.which("go")
    if go is None:
        raise RuntimeError("no go on PATH")
    if not (peers / "timing_test.go").exists():
        raise RuntimeError(f"no Porcupine source with timing_test.go at {peers}")
    work = Path(tempfile.mkdtemp(prefix="splitbrain-porcupine-"))
    try:
        shutil.copytree(peers, work, dirs_exist_ok=True)
        for sub in ("jepsen", "kv"):
            shutil.copytree(root / "porcupine" / sub, work / "test_data" / sub, dirs_exist_ok=True)
        (work / "splitbrain_bench_test.go").write_text(GO_TEST, encoding="utf-8")
        _export_knossos(root, work / "knossos_events")
        env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
        t = time.perf_counter()
        build = subprocess.run(
            [go, "test", "-c", "-o", "porc.test", "."],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        build_s = time.perf_counter() - t
        if build.returncode != 0:
            raise RuntimeError(f"go test -c failed: {build.stderr.strip()[-2000:]}")
        version = subprocess.run([go, "version"], capture_output=True, text=True).stdout.strip()
        load_before = os.getloadavg()[0]
        t = time.perf_counter()
        run = subprocess.run(
            ["./porc.test", "-test.run", "^(TestTimeCorpus|TestSplitbrainBench)$"],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=1800,
            env={
                **env,
                "PORC_OUT": str(work / "porc.csv"),
                "SB_OUT": str(work / "sb.csv"),
                "SB_KNOSSOS": str(work / "knossos_events"),
            },
        )
        run_s = time.perf_counter() - t
        if run.returncode != 0:
            raise RuntimeError(
                f"Porcupine's timing run failed: {(run.stdout + run.stderr)[-2000:]}"
            )
        times: dict[tuple[str, str], float] = {}
        verdicts: dict[tuple[str, str], bool] = {}
        for line in (work / "porc.csv").read_text().split():
            f, sec = line.rsplit(",", 1)
            times[("porcupine", f)] = float(sec)
        for line in (work / "sb.csv").read_text().splitlines():
            what, corpus, rest = line.split(",", 2)
            f, val = rest.rsplit(",", 1)
            if what == "time":
                times[(corpus, f)] = float(val)
            else:
                verdicts[(corpus, f)] = val == "true"
        return {
            "times": times,
            "verdicts": verdicts,
            "go": version,
            "build_s": round(build_s, 1),
            "run_s": round(run_s, 1),
            "load_before": round(load_before, 2),
            "load_after": round(os.getloadavg()[0], 2),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _median_time(fn: Any, runs: int = 5) -> tuple[float, Any]:
    """Median wall time of ``runs`` calls (as Porcupine's timing test does) and the last result."""
    ds = []
    res = None
    for _ in range(runs):
        t = time.perf_counter()
        res = fn()
        ds.append(time.perf_counter() - t)
    return statistics.median(ds), res


def corpora_bench(
    root: Path,
    *,
    timeout: float = 60.0,
    worst: int = 5,
    porcupine: str = "auto",
    peers: Path | None = None,
) -> dict[str, Any]:
    """Every corpus file checked by our search, timed beside Porcupine's time for the same file.

    ``porcupine``: ``"live"`` builds and runs Porcupine here, now (needs Go and
    the peer source), ``"stored"`` uses the timings shipped with the corpora,
    ``"auto"`` is live when ``go`` is on PATH. Our time is measured as
    Porcupine's timing test measures its own: median of 5, parsing excluded, the
    whole check of the file (partitioning, pairing, search) with no
    counterexample (Porcupine's ``CheckEvents`` builds none either).
    """
    import shutil

    from checker.linearizable import FAST, check_linearizable
    from checker.models import get_model
    from harness.core.history import read_history

    if not root.is_dir():
        raise click.BadParameter(f"{root}: no such corpora directory", param_hint="--corpora")
    live: dict[str, Any] | None = None
    live_error = None
    if porcupine == "live" or (porcupine == "auto" and shutil.which("go")):
        try:
            live = porcupine_live(root, peers or DEFAULT_PEERS)
        except (RuntimeError, OSError, ValueError) as e:
            if porcupine == "live":
                raise click.ClickException(f"cannot run Porcupine here: {e}") from None
            live_error = str(e)
    base = live["times"] if live else _baselines(root)
    load_ours = os.getloadavg()[0]
    per_corpus: dict[str, Any] = {}
    files: list[dict[str, Any]] = []
    for corpus in sorted(p.name for p in root.iterdir() if (p / "manifest.csv").exists()):
        with open(root / corpus / "manifest.csv", newline="") as fh:
            rows = [r for r in csv.DictReader(fh) if r["file"] not in ABSENT]
        ours_total = theirs_total = ours_paired = 0.0
        matched = agree = compared = 0
        for r in rows:
            path = root / corpus / r["file"]
            if not path.exists() or r["model"] not in _MODELS:
                continue
            name, params = _MODELS[r["model"]]
            model = get_model(name, **params)
            ops = read_history(path)
            took, res = _median_time(
                lambda ops=ops, model=model: check_linearizable(
                    ops, model, timeout=timeout, counterexample=False
                )
            )
            expected = r["expected_verdict"] == "linearizable"
            ok = res["valid"] is expected
            matched += ok
            theirs = base.get((corpus, r["file"]))
            theirs_verdict = live["verdicts"].get((corpus, r["file"])) if live else None
            if theirs_verdict is not None:
                compared += 1
                agree += theirs_verdict is res["valid"]
            files.append(
                {
                    "corpus": corpus,
                    "file": r["file"],
                    "ops": len(ops),
                    "ours_s": round(took, 6),
                    "porcupine_s": theirs,
                    "ratio": round(took / theirs, 2) if theirs else None,
                    "verdict": res["valid"],
                    "porcupine_verdict": theirs_verdict,
                    "expected": expected,
                    "match": ok,
                }
            )
            ours_total += took
            if theirs is not None:
                theirs_total += theirs
                ours_paired += took
        n = sum(1 for f in files if f["corpus"] == corpus)
        ratios = [f["ratio"] for f in files if f["corpus"] == corpus and f["ratio"]]
        per_corpus[corpus] = {
            "files": n,
            "verdicts_matched": matched,
            "porcupine_verdicts_agree": f"{agree}/{compared}" if live else None,
            "ours_total_s": round(ours_total, 3),
            "porcupine_total_s": round(theirs_total, 3),
            "files_with_baseline": len(ratios),
            "ratio_total": round(ours_paired / theirs_total, 2) if theirs_total else None,
            "ratio_median": round(statistics.median(ratios), 2) if ratios else None,
        }
    by_time = sorted(files, key=lambda f: -f["ours_s"])[:worst]
    by_ratio = sorted((f for f in files if f["ratio"]), key=lambda f: -f["ratio"])[:worst]
    baseline: dict[str, Any] = {
        "kind": "live" if live else "stored",
        "compiled_loop": FAST,
        "load_1m_ours": round(load_ours, 2),
    }
    if live:
        baseline.update(
            {k: live[k] for k in ("go", "build_s", "run_s", "load_before", "load_after")}
        )
    elif live_error:
        baseline["live_error"] = live_error
    return {
        "baseline": baseline,
        "corpora": per_corpus,
        "all_verdicts_match": all(f["match"] for f in files),
        "porcupine_verdicts_differ": [
            f
            for f in files
            if f["porcupine_verdict"] is not None and f["porcupine_verdict"] is not f["verdict"]
        ],
        "files_checked": len(files),
        "slowest_files": by_time,
        "worst_ratio_files": by_ratio,
        "mismatches": [f for f in files if not f["match"]],
    }


# --------------------------------------------------------------------------- (b) scale


class MemorySampler:
    """Peak RSS of this process and of its JVM child (and its Python workers), sampled,
    with the machine's 1-minute load average over the same time (others' jobs share it)."""

    def __init__(self, every: float = 0.2, exclude: Iterable[int] = ()) -> None:
        import psutil

        self.me = psutil.Process()
        # A standalone cluster the benchmark started is this process's child too, but is
        # not the driver: its JVMs (and their executors' Python workers) are left out.
        self.exclude = set(exclude)
        self.every = every
        self.peak = {"python_driver": 0, "jvm_driver": 0, "python_workers": 0}
        self.driver_total = 0
        self.loads: list[float] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        import psutil

        me = self.me.memory_info().rss
        self.peak["python_driver"] = max(self.peak["python_driver"], me)
        self.loads.append(os.getloadavg()[0])
        jvm = workers = 0
        skip: set[int] = set()
        for pid in self.exclude:
            try:
                skip.add(pid)
                skip.update(c.pid for c in psutil.Process(pid).children(recursive=True))
            except psutil.Error:
                pass
        try:
            for c in self.me.children(recursive=True):
                if c.pid in skip:
                    continue
                try:
                    name = c.name()
                    rss = c.memory_info().rss
                except psutil.Error:
                    continue
                if "java" in name:
                    jvm += rss
                elif "python" in name:
                    workers += rss
        except psutil.Error:
            pass
        self.peak["jvm_driver"] = max(self.peak["jvm_driver"], jvm)
        self.peak["python_workers"] = max(self.peak["python_workers"], workers)
        self.driver_total = max(self.driver_total, me + jvm)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.every)

    def __enter__(self) -> MemorySampler:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()
        self._sample()

    def mib(self) -> dict[str, float]:
        """Peaks in MiB; ``driver_total`` is the peak of Python driver + JVM at one instant."""
        out = {k: round(v / 2**20, 1) for k, v in self.peak.items()}
        out["driver_total"] = round(self.driver_total / 2**20, 1)
        return out

    def load(self) -> dict[str, float]:
        if not self.loads:
            return {}
        return {"mean": round(statistics.fmean(self.loads), 2), "max": round(max(self.loads), 2)}


def _generate(path: Path, n: int, **kw: Any) -> int:
    """Write a synthetic history in a child process, so that the generator's heap does not
    count in this process's RSS while the check is measured."""
    import subprocess
    import sys

    kw = {"workload": "append", "seed": 1, **kw}
    code = (
        "import json, sys; from checker.synth import write_history; "
        "print(write_history(sys.argv[1], int(sys.argv[2]), **json.loads(sys.argv[3])))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path), str(n), json.dumps(kw)],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(out.stdout.split()[-1])


def scale_bench(
    sizes: list[int],
    *,
    master: str | None = None,
    local_baseline: bool = True,
    keep: Path | None = None,
) -> dict[str, Any]:
    from checker.spark import check_spark
    from checker.spark.session import get_session

    tmp = Path(tempfile.mkdtemp(prefix="splitbrain-bench-")) if keep is None else keep
    tmp.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {
        "sizes": [],
        "master": master or "local[*]",
        "driver_memory": os.environ.get("SPLITBRAIN_SPARK_DRIVER_MEMORY", "1g"),
    }
    t = time.perf_counter()
    get_session(master)
    out["spark_startup_s"] = round(time.perf_counter() - t, 2)
    try:
        for n in sizes:
            path = tmp / f"synth-{n}.parquet"
            t = time.perf_counter()
            records = _generate(path, n)
            gen_s = time.perf_counter() - t
            with MemorySampler() as mem:
                t = time.perf_counter()
                res = check_spark(str(path), master=master)
                took = time.perf_counter() - t
            out["sizes"].append(
                {
                    "records": records,
                    "generate_s": round(gen_s, 2),
                    "parquet_mib": round(path.stat().st_size / 2**20, 1),
                    "check_s": round(took, 2),
                    "ops_per_s": round(records / took),
                    "valid": res["valid"],
                    "peak_rss_mib": mem.mib(),
                    "load_avg_1m": mem.load(),
                    "stats": res["checkers"].get("log-safety", {}).get("stats"),
                }
            )
        s = out["sizes"]
        for a, b in zip(s, s[1:], strict=False):
            b["growth_vs_previous"] = {
                "records_x": round(b["records"] / a["records"], 2),
                "time_x": round(b["check_s"] / a["check_s"], 2),
            }
        if local_baseline and sizes:
            from checker.local import check_local
            from harness.core.history import read_history

            path = tmp / f"synth-{sizes[0]}.parquet"
            with MemorySampler() as mem:
                t = time.perf_counter()
                ops = read_history(path)
                read_s = time.perf_counter() - t
                res = check_local(ops)
                took = time.perf_counter() - t
            del ops
            out["local_baseline"] = {
                "records": s[0]["records"],
                "read_s": round(read_s, 2),
                "total_s": round(took, 2),
                "valid": res["valid"],
                "peak_rss_mib": mem.mib()["python_driver"],
                "load_avg_1m": mem.load(),
            }
    finally:
        if keep is None:
            for p in tmp.glob("*.parquet"):
                p.unlink()
            tmp.rmdir()
    return out


def _timed_check(
    path: Path, records: int, master: str | None, exclude: Iterable[int] = ()
) -> dict[str, Any]:
    """One Spark check of ``path`` with its wall time, records/s, driver memory and load."""
    from checker.spark import check_spark

    with MemorySampler(exclude=exclude) as mem:
        t = time.perf_counter()
        res = check_spark(str(path), master=master)
        took = time.perf_counter() - t
    lin = res["checkers"].get("linearizable", {})
    return {
        "check_s": round(took, 2),
        "ops_per_s": round(records / took),
        "valid": res["valid"],
        "keys": lin.get("keys"),
        "failures": lin.get("failures"),
        "error": lin.get("error") or res.get("error"),
        "peak_rss_mib": mem.mib(),
        "load_avg_1m": mem.load(),
    }


def _local_baseline(path: Path) -> dict[str, Any]:
    from checker.local import check_local
    from harness.core.history import read_history

    with MemorySampler() as mem:
        t = time.perf_counter()
        ops = read_history(path)
        read_s = time.perf_counter() - t
        res = check_local(ops)
        took = time.perf_counter() - t
    n = len(ops)
    del ops
    return {
        "records": n,
        "read_s": round(read_s, 2),
        "total_s": round(took, 2),
        "valid": res["valid"],
        "peak_rss_mib": mem.mib()["python_driver"],
        "load_avg_1m": mem.load(),
    }


def register_bench(
    sizes: list[int],
    *,
    keys: int,
    key_window: int | None,
    master: str | None = None,
    local_baseline: bool = True,
    cluster_workers: list[int] | None = None,
    cluster_size: int | None = None,
    cluster_only: bool = False,
    anomaly: bool = False,
    keep: Path | None = None,
) -> dict[str, Any]:
    """Linearizability at scale: register/CAS histories over ``keys`` keys checked on Spark.

    Per size: generation (in a child process), then the check on ``master``, with the
    driver's memory (Python + its JVM) and the load. ``cluster_workers`` (e.g. ``[1, 2]``)
    also checks the size ``cluster_size`` (default the largest) on throwaway standalone clusters of that many one-core
    workers and reports the speed-up of each against the first. ``anomaly`` plants one
    nonlinearizable read, to show that the verdict at scale is a real search.
    """
    from checker.spark.session import get_session, stop_session
    from checker.spark.standalone import standalone_cluster

    tmp = Path(tempfile.mkdtemp(prefix="splitbrain-bench-")) if keep is None else keep
    tmp.mkdir(parents=True, exist_ok=True)
    gen = {
        "workload": "register",
        "keys": keys,
        "key_window": key_window,
        "anomaly": "nonlinearizable" if anomaly else None,
    }
    out: dict[str, Any] = {
        "keys": keys,
        "key_window": key_window,
        "anomaly": gen["anomaly"],
        "master": master or "local[*]",
        "sizes": [],
        "driver_memory": os.environ.get("SPLITBRAIN_SPARK_DRIVER_MEMORY", "1g"),
    }
    try:
        paths = []
        for n in sizes:
            path = tmp / f"register-{n}.parquet"
            t = time.perf_counter()
            records = path.exists() and _rows(path) or _generate(path, n, **gen)
            paths.append((path, records))
            out["sizes"].append(
                {
                    "records": records,
                    "generate_s": round(time.perf_counter() - t, 2),
                    "parquet_mib": round(path.stat().st_size / 2**20, 1),
                }
            )
        if not cluster_only:
            t = time.perf_counter()
            get_session(master)
            out["spark_startup_s"] = round(time.perf_counter() - t, 2)
            for (path, records), row in zip(paths, out["sizes"], strict=True):
                row.update(_timed_check(path, records, master))
        if local_baseline and paths and not cluster_only:
            out["local_baseline"] = _local_baseline(paths[0][0])
        if cluster_workers and paths:
            path, records = paths[-1]
            if cluster_size is not None:
                path = tmp / f"register-{cluster_size}.parquet"
                records = _rows(path) if path.exists() else _generate(path, cluster_size, **gen)
            runs = []
            for w in cluster_workers:
                stop_session()
                with standalone_cluster(w, tmp / f"cluster-{w}", memory="2g") as (url, pids):
                    t = time.perf_counter()
                    get_session(url)
                    startup = round(time.perf_counter() - t, 2)
                    run = {
                        "workers": w,
                        "cores_per_worker": 1,
                        "records": records,
                        "spark_startup_s": startup,
                        **_timed_check(path, records, url, pids),
                    }
                    stop_session()
                runs.append(run)
            for r in runs:
                r["speedup_vs_first"] = round(runs[0]["check_s"] / r["check_s"], 2)
                r["speedup_per_worker"] = round(
                    r["speedup_vs_first"] * runs[0]["workers"] / r["workers"], 2
                )
            out["standalone"] = runs
    finally:
        stop_session()
        if keep is None:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(str(path)).metadata.num_rows)


def jsonl_bench(
    n: int,
    *,
    workloads: list[str],
    keys: int | None,
    key_window: int | None,
    master: str | None = None,
) -> dict[str, Any]:
    """A JSONL history as a user's tool would hand it over (no Parquet given), checked end to
    end on Spark: conversion included, with the conversion also timed on its own."""
    from checker.spark.session import get_session
    from harness.core.history import jsonl_to_parquet

    tmp = Path(tempfile.mkdtemp(prefix="splitbrain-bench-"))
    out: dict[str, Any] = {"master": master or "local[*]", "runs": []}
    t = time.perf_counter()
    get_session(master)
    out["spark_startup_s"] = round(time.perf_counter() - t, 2)
    try:
        for wl in workloads:
            path = tmp / f"{wl}-{n}.jsonl"
            kw: dict[str, Any] = {"workload": wl}
            if wl == "register":
                kw.update(keys=keys, key_window=key_window)
            t = time.perf_counter()
            records = _generate(path, n, **kw)
            gen_s = time.perf_counter() - t
            run = {
                "workload": wl,
                "records": records,
                "generate_s": round(gen_s, 2),
                "jsonl_mib": round(path.stat().st_size / 2**20, 1),
            }
            run.update(_timed_check(path, records, master))
            run["end_to_end_s"] = run.pop("check_s")
            t = time.perf_counter()
            jsonl_to_parquet(path, tmp / "convert.parquet")
            run["convert_alone_s"] = round(time.perf_counter() - t, 2)
            out["runs"].append(run)
    finally:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _sizes(text: str) -> list[int]:
    try:
        return [int(float(x)) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: expected sizes like 1e6,1e7", param_hint="--scale"
        ) from None


@click.command("checker")
@click.option(
    "--corpora",
    "corpora",
    type=click.Path(path_type=Path),
    default=None,
    help=f"Corpora directory (default {DEFAULT_CORPORA}).",
)
@click.option(
    "--scale", "scale", default=None, help="Spark scale run: sizes in records, e.g. 1e6,1e7."
)
@click.option(
    "--scale-register",
    "scale_register",
    default=None,
    help="Linearizability at scale: register/CAS history sizes in records, e.g. 1e6,1e7.",
)
@click.option(
    "--keys", type=float, default=1e5, show_default=True, help="Keys of the register histories."
)
@click.option(
    "--key-window",
    type=int,
    default=8,
    show_default=True,
    help="Neighbouring keys concurrent register ops share (see gen-history).",
)
@click.option(
    "--plant-anomaly",
    is_flag=True,
    help="Plant one nonlinearizable read in the register histories.",
)
@click.option(
    "--cluster-workers",
    default=None,
    help="Also check the largest register size on standalone clusters of these many "
    "one-core workers, e.g. 1,2, and report the speed-up per worker.",
)
@click.option(
    "--cluster-size",
    type=float,
    default=None,
    help="Register history size of the cluster runs (default: the largest --scale-register).",
)
@click.option(
    "--cluster-only",
    is_flag=True,
    help="With --cluster-workers: skip the --spark-master runs and the local baseline.",
)
@click.option(
    "--jsonl",
    "jsonl",
    type=float,
    default=None,
    help="End to end from JSONL (conversion included): records, e.g. 1e6.",
)
@click.option(
    "--jsonl-workload",
    default="register,append",
    show_default=True,
    help="Workloads of the JSONL run.",
)
@click.option("--skip-corpora", is_flag=True, help="Only the scale run.")
@click.option("--spark-master", default=None, help="Spark master URL (default local[*]).")
@click.option(
    "--no-local-baseline", is_flag=True, help="Skip timing the local engine at the smallest size."
)
@click.option(
    "--timeout",
    type=float,
    default=60.0,
    show_default=True,
    help="Per-file timeout of the corpora checks.",
)
@click.option(
    "--output", type=click.Path(path_type=Path), default=None, help="Also write the JSON here."
)
@click.option(
    "--porcupine",
    "porcupine",
    type=click.Choice(["auto", "live", "stored"]),
    default="auto",
    show_default=True,
    help="Porcupine baseline: built and timed in this run (live; auto when go is on PATH) "
    "or the timings stored with the corpora.",
)
@click.option(
    "--peers",
    type=click.Path(path_type=Path),
    default=None,
    help=f"Porcupine's source for the live baseline (default {DEFAULT_PEERS}).",
)
def bench_checker(
    corpora: Path | None,
    scale: str | None,
    scale_register: str | None,
    keys: float,
    key_window: int,
    plant_anomaly: bool,
    cluster_workers: str | None,
    cluster_size: float | None,
    cluster_only: bool,
    jsonl: float | None,
    jsonl_workload: str,
    skip_corpora: bool,
    spark_master: str | None,
    no_local_baseline: bool,
    timeout: float,
    output: Path | None,
    porcupine: str,
    peers: Path | None,
) -> None:
    """Checker speed: corpora vs Porcupine (same run when Go is here); Spark engine at scale."""
    result: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        }
    }
    if not skip_corpora:
        result["corpora"] = corpora_bench(
            corpora or DEFAULT_CORPORA, timeout=timeout, porcupine=porcupine, peers=peers
        )
    if scale:
        result["scale"] = scale_bench(
            _sizes(scale), master=spark_master, local_baseline=not no_local_baseline
        )
    if scale_register:
        result["register"] = register_bench(
            _sizes(scale_register),
            keys=int(keys),
            key_window=key_window or None,
            master=spark_master,
            local_baseline=not no_local_baseline,
            anomaly=plant_anomaly,
            cluster_workers=_sizes(cluster_workers) if cluster_workers else None,
            cluster_size=None if cluster_size is None else int(cluster_size),
            cluster_only=cluster_only,
        )
    if jsonl:
        wls = [w.strip() for w in jsonl_workload.split(",") if w.strip()]
        result["jsonl"] = jsonl_bench(
            int(jsonl),
            workloads=wls,
            keys=int(keys),
            key_window=key_window or None,
            master=spark_master,
        )
    text = json.dumps(result, indent=2, default=str)
    if output is not None:
        output.write_text(text + "\n", encoding="utf-8")
    click.echo(text)
