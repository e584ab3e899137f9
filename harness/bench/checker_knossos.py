"""The Knossos corpus as Porcupine reads it: our bench's export of each history.

Porcupine times its own corpora with its own parsers; for Knossos' histories we hand it
exactly the ops our search sees (fails dropped, open ops returning at the end,
unobserved reads left out), one file per history: a model line, then call and return
events in real-time order (read by :data:`harness.bench.checker_porcupine.GO_TEST`).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from harness.bench.checker_data import ABSENT, MODELS

__all__ = ["events_text", "export_knossos"]


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"not an int: {v!r}")
    return v


def events_text(entries: list[Any], name: str, params: dict[str, Any]) -> str:
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


def export_knossos(root: Path, out: Path) -> list[str]:
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
        if not path.exists() or r["model"] not in MODELS:
            continue
        name, params = MODELS[r["model"]]
        model = get_model(name, **params)
        parts = list(partition_ops(read_history(path), model).values()) or [[]]
        if len(parts) != 1:
            continue
        try:
            text = events_text(make_entries(parts[0], model), name, params)
        except (ValueError, TypeError, KeyError):
            continue  # a value the Go side cannot hold: no live baseline
        (out / f"{i}.ev").write_text(text, encoding="ascii")
        index.append(f"{i}.ev\t{r['file']}")
    (out / "index.txt").write_text("\n".join(index) + "\n", encoding="ascii")
    return [line.split("\t")[1] for line in index]
