"""Porcupine itself, built and timed here: the live baseline of ``bench checker``.

Porcupine's own corpus is timed by its ``TestTimeCorpus``; Knossos' corpus by
:data:`GO_TEST`, our Go test compiled into a copy of Porcupine's package, on the export
of :mod:`harness.bench.checker_knossos`.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.bench.checker_knossos import export_knossos

__all__ = ["GO_TEST", "porcupine_live"]


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
        export_knossos(root, work / "knossos_events")
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
