"""Re-measure a NATS run's divergence: which replica holds what, who acked it, what the leader serves.

Run after ``splitbrain run ... --db nats -w nats-stream --leave-db-running`` (the cluster
is still up, healed), with the plugin and nats-py importable::

    python examples/nats/divergence.py STORE/RUN_DIR --lab NAME [--publish 20] [--probes 3 --every 60]

It reads the run's history (acked and unacknowledged publishes, each node's final read of
its own files, the ``converge`` wait) and lists every sequence the final reads disagree on,
with each version's nodes and fate (acked, timed out, refused). Then, on the live cluster,
it probes each such sequence again and again: the stream leader's ``STREAM.MSG.GET`` (the
request goes to the leader whichever server takes it), and each node's files (read from the
lab host's private ``/srv``), optionally after publishing new acked messages. Every probe
line carries the seconds since the heal. JSON lines on stdout; nothing is written.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import sys
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from splitbrain_nats.mapping import STREAM, SUBJECT, stream_leader
from splitbrain_nats.server import jsz
from splitbrain_nats.store import live_messages

from harness.core.history import read_history

LAB_ROOT = Path("/var/lib/splitbrain/lab")


def history_facts(run_dir: Path) -> dict[str, Any]:
    """Acks, attempts, final reads and the wait, from the run's own history."""
    ops = read_history(run_dir / "history.jsonl")
    invoked: dict[Any, Any] = {}
    fate: dict[str, dict[str, Any]] = {}
    finals: dict[str, dict[int, str]] = defaultdict(dict)
    heal_ns = converge = None
    for op in ops:
        if op.process == "nemesis":
            if op.type != "invoke" and (op.f.startswith("stop-") or op.f == "heal"):
                heal_ns = op.time
            if op.f == "converge" and op.type != "invoke":
                converge = {**op.value, "at_s": op.time / 1e9}
            continue
        if op.type == "invoke":
            invoked[op.process] = op
            continue
        inv = invoked.pop(op.process, None)
        if inv is None:
            continue
        if op.f == "append":
            payload = inv.value["payload"]
            fate[payload] = {
                "type": op.type,
                "seq": (op.value or {}).get("index") if op.type == "ok" else None,
                "node": op.node,
                "invoked_s": round(inv.time / 1e9, 3),
                "completed_s": round(op.time / 1e9, 3),
                **({"error": op.error} if op.error else {}),
            }
        elif op.f == "read" and op.type == "ok" and (inv.value or {}).get("final"):
            for seq, _term, payload in (op.value or {}).get("entries") or []:
                finals[op.node or "?"][seq] = payload
    return {"fate": fate, "finals": finals, "heal_ns": heal_ns, "converge": converge}


def diverged(finals: dict[str, dict[int, str]]) -> dict[int, dict[str, list[str]]]:
    """``{seq: {payload: [nodes]}}`` for every sequence two nodes' files disagree on."""
    by_seq: dict[int, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for node, msgs in sorted(finals.items()):
        for seq, payload in msgs.items():
            by_seq[seq][payload].append(node)
    return {s: dict(v) for s, v in sorted(by_seq.items()) if len(v) > 1}


def node_files(lab: str, node: str) -> dict[int, str]:
    """A node's replica as its files hold it now (the lab host's private /srv)."""
    folder = (
        LAB_ROOT
        / lab
        / node
        / "srv"
        / "splitbrain-nats"
        / lab
        / node
        / "store"
        / "jetstream"
        / "$G"
        / "streams"
        / STREAM
        / "msgs"
    )
    pairs = []
    for blk in sorted(folder.glob("*.blk"), key=lambda p: int(p.stem)):
        idx = blk.with_suffix(".idx")
        pairs.append((blk.read_bytes(), idx.read_bytes() if idx.exists() else None))
    msgs, _ = live_messages(pairs)
    return {seq: body.decode(errors="replace") for seq, body in msgs}


async def leader_gets(
    url: str, seqs: list[int], publish: int, tag: str, stepdown: bool = False
) -> dict[str, Any]:
    import nats  # type: ignore[import-not-found]

    nc = await nats.connect(url, connect_timeout=3, allow_reconnect=False)
    try:
        if stepdown:  # another replica leads, so its own MSG.GET answers
            with contextlib.suppress(Exception):
                await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{STREAM}", b"", timeout=5)
            await asyncio.sleep(3)
        got: dict[int, Any] = {}
        for seq in seqs:
            req = json.dumps({"seq": seq}).encode()
            try:
                msg = await nc.request(f"$JS.API.STREAM.MSG.GET.{STREAM}", req, timeout=3)
                body = json.loads(msg.data)
                m = body.get("message") or {}
                got[seq] = (
                    base64.b64decode(m["data"]).decode() if "data" in m else body.get("error")
                )
            except Exception as e:  # noqa: BLE001 - recorded as the probe's answer
                got[seq] = f"{type(e).__name__}: {e}"
        acked = []
        if publish:
            js = nc.jetstream(timeout=3)
            for i in range(publish):
                payload = f"probe-{tag}-{i}"
                try:
                    ack = await js.publish(SUBJECT, payload.encode(), stream=STREAM)
                    acked.append([payload, ack.seq])
                except Exception as e:  # noqa: BLE001
                    acked.append([payload, f"{type(e).__name__}: {e}"])
        return {"msg_get": got, "published": acked}
    finally:
        await nc.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--lab", required=True)
    ap.add_argument("--publish", type=int, default=0, help="acked publishes after the first probe")
    ap.add_argument("--probes", type=int, default=1)
    ap.add_argument("--every", type=float, default=60.0)
    ap.add_argument(
        "--stepdown",
        action="store_true",
        help="ask the stream leader to step down before probes 2..",
    )
    a = ap.parse_args()
    test = json.loads((a.run_dir / "test.json").read_text())
    hosts = {h["name"]: h["address"] for h in test["hosts"]}
    start_wall = (
        datetime.strptime(a.run_dir.resolve().name, "%Y%m%dT%H%M%S.%fZ")
        .replace(tzinfo=timezone.utc)
        .timestamp()
    )
    facts = history_facts(a.run_dir)
    heal_wall = start_wall + (facts["heal_ns"] or 0) / 1e9
    div = diverged(facts["finals"])
    report = {
        "converge": facts["converge"],
        "heal_s": (facts["heal_ns"] or 0) / 1e9,
        "final_read_last_seq": {n: max(m, default=0) for n, m in sorted(facts["finals"].items())},
        "diverged": {
            str(seq): {
                p: {"nodes": nodes, "fate": facts["fate"].get(p, "never published by this run")}
                for p, nodes in versions.items()
            }
            for seq, versions in div.items()
        },
    }
    print(json.dumps({"history": report}, default=str))
    seqs = list(div)
    for k in range(a.probes):
        url = f"nats://{hosts[sorted(hosts)[0]]}:4222"
        live = asyncio.run(
            leader_gets(url, seqs, a.publish if k == 0 else 0, str(k), a.stepdown and k > 0)
        )
        views = {n: jsz(addr, 8222) for n, addr in hosts.items()}
        leaders = {n: stream_leader(v) if v else None for n, v in views.items()}
        files = {n: node_files(a.lab, n) for n in sorted(hosts)}
        probe = {
            "probe": k,
            "since_heal_s": round(time.time() - heal_wall, 1),
            "stream_leader": leaders,
            "leader_msg_get": live["msg_get"],
            "published": live["published"],
            "files": {str(s): {n: files[n].get(s) for n in sorted(files)} for s in seqs},
            "files_last_seq": {n: max(f, default=0) for n, f in files.items()},
            "files_disagree_at": sorted(
                {
                    s
                    for s in set().union(*files.values())
                    if len({files[n].get(s) for n in files if s in files[n]}) > 1
                }
            ),
        }
        print(json.dumps(probe, default=str), flush=True)
        if k + 1 < a.probes:
            time.sleep(a.every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
