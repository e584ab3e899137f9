"""Frame fuzzing against a live node: ``splitbrain bench fuzz-frames``.

A node's two ports face whatever the network delivers, so the claim "a hostile
or broken peer cannot crash a node or damage its store" has to be shown on a
real process, not argued from the code. This module

1. starts a local cluster (one node by default, a real ``python -m node_impl``
   process on loopback) and appends a set of entries whose acks it records;
2. throws N fuzzed frames at the client and peer ports: random lengths and
   bytes, truncated frames, oversized length prefixes, invalid msgpack, and
   well-framed msgpack with wrong types and missing fields for every request
   type (client requests and peer RPCs alike);
3. checks that every node process is still alive and answers ``status`` and a
   fresh append, that every entry acked before the fuzz still reads back with
   its payload, and that after a clean stop the store reopens without cutting
   a byte and a restarted node serves the same entries again.

Well-framed maps are pipelined on one connection (the node keeps a connection
open across ill-typed requests); frames the node must refuse (bad length, bad
msgpack, a non-map) end a connection, because the node rightly hangs up on
them and anything sent after would never be read.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import socket
import struct
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from node_impl.local_cluster import LocalCluster
from node_impl.store import LogStore
from node_impl.wire import MAX_FRAME

__all__ = [
    "FrameFuzzer",
    "FuzzResult",
    "run_fuzz",
    "fuzz_frames_bench",
    "CLIENT_TYPES",
    "PEER_TYPES",
]

_LEN = struct.Struct(">I")

CLIENT_TYPES = ("status", "append", "get", "kv-write", "kv-read", "kv-cas")
PEER_TYPES = ("vote", "heartbeat", "push", "vote-resp", "heartbeat-resp", "push-resp")

# The fields each request type reads (spec §4-8); the fuzzer drops them, swaps their types
# and adds junk, so every handler's validation of every field is exercised.
FIELDS: dict[str, tuple[str, ...]] = {
    "status": (),
    "append": ("body", "bodies"),
    "get": ("index", "from", "to", "local"),
    "kv-write": ("key", "value"),
    "kv-read": ("key", "keys"),
    "kv-cas": ("key", "old", "new"),
    "vote": ("from", "term", "candidate", "ledgerEndIndex", "ledgerEndTerm"),
    "heartbeat": ("from", "term", "leader", "client_addr"),
    "push": ("from", "kind", "term", "leader", "commitIndex", "gen", "entries"),
    "vote-resp": ("term", "result", "code"),
    "heartbeat-resp": ("term", "code"),
    "push-resp": ("code", "index", "gen", "term", "beginIndex", "endIndex"),
}
_ENTRY_FIELDS = ("index", "term", "magic", "pos", "size", "bodyCrc", "chainCrc", "body")


class FrameFuzzer:
    """Seeded generator of hostile frames, each as the exact bytes to send.

    ``ids`` are node ids to sprinkle into peer messages besides made-up ones, so
    that some forged RPCs get past the membership checks and reach deeper code.
    """

    def __init__(self, seed: int = 0, ids: tuple[str, ...] = ("n1", "n2", "n3")) -> None:
        self.rng = random.Random(seed)
        self.ids = ids

    # ---------------------------------------------------------------- values

    def scalar(self) -> Any:
        r = self.rng
        return r.choice(
            (
                None,
                True,
                False,
                0,
                -1,
                1,
                2**63 - 1,
                -(2**63),
                2**64 - 1,
                r.randrange(-(10**6), 10**6),
                1.5,
                float("nan"),
                float("inf"),
                "",
                "x",
                "n1",
                r.choice(self.ids),
                "\u2603" * 3,
                b"",
                b"\x00\xff",
                r.randbytes(r.randrange(0, 40)),
                "A" * r.randrange(0, 300),
            )
        )

    def value(self, depth: int = 0) -> Any:
        r = self.rng
        k = r.random()
        if depth > 2 or k < 0.6:
            return self.scalar()
        if k < 0.75:
            return [self.value(depth + 1) for _ in range(r.randrange(0, 5))]
        if k < 0.85:
            return msgpack.ExtType(r.randrange(0, 128), r.randbytes(r.randrange(0, 8)))
        return {
            self.scalar()
            if r.random() < 0.3
            else r.choice(("a", "index", "type", "k")): self.value(depth + 1)
            for _ in range(r.randrange(0, 4))
        }

    def entry(self) -> Any:
        r = self.rng
        if r.random() < 0.2:
            return self.value()
        good = {
            "index": r.randrange(-2, 50),
            "term": r.randrange(-1, 5),
            "magic": r.randrange(0, 2**32),
            "pos": r.randrange(0, 1 << 20),
            "size": r.randrange(0, 1 << 16),
            "bodyCrc": r.randrange(0, 2**32),
            "chainCrc": r.randrange(0, 2**32),
            "body": r.randbytes(r.randrange(0, 32)),
        }
        for f in _ENTRY_FIELDS:
            x = r.random()
            if x < 0.1:
                del good[f]
            elif x < 0.2:
                good[f] = self.value()
        return good

    def field_value(self, name: str) -> Any:
        """A plausible value for a field most of the time, a wrong one otherwise."""
        r = self.rng
        if r.random() < 0.45:
            return self.value()
        if name in ("from", "leader", "candidate"):
            return r.choice(self.ids + ("zz", ""))
        if name == "kind":
            return r.choice(("APPEND", "COMPARE", "TRUNCATE", "COMMIT", "WHAT", ""))
        if name == "entries":
            return [self.entry() for _ in range(r.randrange(0, 4))]
        if name == "bodies":
            return [self.value() for _ in range(r.randrange(0, 3))]
        if name == "local":
            return r.random() < 0.5
        if name in ("from", "to", "index") and r.random() < 0.9:
            # mostly short ranges: a get of the whole log is legitimate, but at a few MB a
            # reply it would turn a million-frame run into a benchmark of msgpack encoding
            return r.randrange(-2, 200)
        if name in (
            "term",
            "ledgerEndIndex",
            "ledgerEndTerm",
            "commitIndex",
            "gen",
            "index",
            "from",
            "to",
            "beginIndex",
            "endIndex",
        ):
            return r.choice((0, 1, 2, -1, 10**9, 2**63 - 1, r.randrange(0, 100)))
        if name == "key":
            return r.choice(("k", "", "x" * 100))
        return self.value()

    def message(self, types: tuple[str, ...]) -> dict:
        """A map with a type the port knows (or not), fields present, missing or ill-typed."""
        r = self.rng
        t = (
            r.choice(types)
            if r.random() < 0.93
            else r.choice(("nope", "", "status-resp", "x" * 70))
        )
        msg: dict[Any, Any] = {"type": t}
        if r.random() < 0.9:
            msg["rid"] = r.choice((r.randrange(0, 1 << 31), None, "rid", -1, 2**64 - 1))
        for f in FIELDS.get(t, ()):
            if r.random() < 0.75:
                msg[f] = self.field_value(f)
        if t == "get" and "index" not in msg and "to" not in msg and r.random() < 0.9:
            msg["to"] = r.randrange(0, 200)  # a missing "to" means "to the end of the log"
        for _ in range(r.choice((0, 0, 0, 1, 2))):
            msg[self.scalar() if r.random() < 0.5 else "junk"] = self.value()
        return msg

    # ---------------------------------------------------------------- frames

    @staticmethod
    def frame(payload: bytes) -> bytes:
        return _LEN.pack(len(payload)) + payload

    def pack(self, msg: Any) -> bytes:
        try:
            return msgpack.packb(msg, use_bin_type=True)
        except (TypeError, ValueError, OverflowError):
            return msgpack.packb({"type": "status"}, use_bin_type=True)

    def keep_frame(self, types: tuple[str, ...]) -> bytes:
        """A well-framed map with a string type: the node must answer or ignore, not hang up."""
        return self.frame(self.pack(self.message(types)))

    def breaker(self, types: tuple[str, ...]) -> tuple[str, bytes]:
        """A frame the node must refuse (so it ends the connection), with its category."""
        r = self.rng
        k = r.randrange(11)
        if k == 0:
            return "random-payload", self.frame(r.randbytes(r.randrange(1, 400)))
        if k == 1:
            return "random-bytes", r.randbytes(r.randrange(1, 64))
        if k == 2:
            n = r.choice((MAX_FRAME + 1, 0xFFFFFFFF, r.randrange(MAX_FRAME + 1, 1 << 32)))
            return "oversized-length", _LEN.pack(n) + r.randbytes(r.randrange(0, 32))
        if k == 3:
            return "empty-frame", _LEN.pack(0)
        if k == 4:
            whole = self.keep_frame(types)
            return "truncated", whole[: r.randrange(0, len(whole))]
        if k == 5:
            n = r.randrange(1, 1 << 20)
            return "short-body", _LEN.pack(n) + r.randbytes(r.randrange(0, min(n, 200)))
        if k == 6:
            payload = bytearray(self.pack(self.message(types)))
            for _ in range(r.randrange(1, 4)):
                payload[r.randrange(len(payload))] = r.randrange(256)
            return "flipped-msgpack", self.frame(bytes(payload))
        if k == 7:
            v = self.value()
            return "not-a-map", self.frame(self.pack([v] if isinstance(v, dict) else v))
        if k == 8:
            msg = self.message(types)
            msg["type"] = r.choice((None, 5, b"status", ["status"], 1.0))
            return "bad-type-field", self.frame(self.pack(msg))
        if k == 9:
            return "trailing-bytes", self.frame(
                self.pack(self.message(types)) + r.randbytes(r.randrange(1, 9))
            )
        bombs = (
            b"\x91" * r.randrange(100, 5000) + b"\x01",
            b"\xdd\x7f\xff\xff\xff",
            b"\xdf\x7f\xff\xff\xff",
            b"\xc6\x7f\xff\xff\xff",
            b"\xc1",
        )
        return "msgpack-bomb", self.frame(r.choice(bombs))

    def connection(self, types: tuple[str, ...], max_keep: int = 40) -> tuple[list[str], bytes]:
        """One connection's worth: some well-framed maps, then usually one breaker."""
        r = self.rng
        kinds: list[str] = []
        parts: list[bytes] = []
        for _ in range(r.randrange(0, max_keep + 1)):
            parts.append(self.keep_frame(types))
            kinds.append("ill-typed-map")
        if not parts or r.random() < 0.8:
            kind, blob = self.breaker(types)
            parts.append(blob)
            kinds.append(kind)
        return kinds, b"".join(parts)


# -------------------------------------------------------------------- running


@dataclass
class FuzzResult:
    frames: int = 0
    connections: int = 0
    seconds: float = 0.0
    by_kind: Counter = field(default_factory=Counter)
    by_port: Counter = field(default_factory=Counter)
    replies_bytes: int = 0
    crashes: list[str] = field(default_factory=list)
    acked_before: int = 0
    store_problems: list[str] = field(default_factory=list)
    handler_errors: Counter = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        """No dead node, no damaged store, and no handler that raised on a malformed frame."""
        return not self.crashes and not self.store_problems and not self.handler_errors

    def to_dict(self) -> dict[str, Any]:
        return {
            "frames": self.frames,
            "connections": self.connections,
            "seconds": round(self.seconds, 1),
            "frames_per_s": round(self.frames / self.seconds) if self.seconds else None,
            "crashes": len(self.crashes),
            "crash_details": self.crashes,
            "acked_before": self.acked_before,
            "store_ok": not self.store_problems,
            "store_problems": self.store_problems,
            "handler_errors": sum(self.handler_errors.values()),
            "handler_error_kinds": dict(self.handler_errors.most_common(20)),
            "by_port": dict(self.by_port),
            "by_kind": dict(sorted(self.by_kind.items())),
            "ok": self.ok,
        }


def _throw(addr: tuple[str, int], blob: bytes, timeout: float) -> int:
    """Send one connection's bytes, half-close, and drain replies until the node hangs up."""
    got = 0
    with socket.create_connection(addr, timeout=timeout) as s, contextlib.suppress(OSError):
        s.sendall(blob)
        s.shutdown(socket.SHUT_WR)
        while True:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            got += len(chunk)
    return got


def _acked_appends(c: LocalCluster, leader: str, n: int) -> dict[int, str]:
    acked: dict[int, str] = {}
    with c.client(leader, timeout=5.0) as cl:
        for i in range(n):
            payload = f"pre-fuzz-{i}"
            r = cl.append(payload)
            if r.get("code") == "SUCCESS":
                acked[r["index"]] = payload
    return acked


def _check_acked(c: LocalCluster, node: str, acked: dict[int, str]) -> list[str]:
    """Every acked entry at its index with its payload, read from the node's local log."""
    problems = []
    with c.client(node, timeout=5.0) as cl:
        r = cl.get(frm=0, to=1 << 40, local=True)
    if r.get("code") != "SUCCESS":
        return [f"{node}: local get failed: {r}"]
    have = {e[0]: e[3] for e in r["entries"]}
    for idx, payload in acked.items():
        if have.get(idx) != payload:
            problems.append(
                f"{node}: acked entry {idx} ({payload!r}) reads back as {have.get(idx)!r}"
            )
    return problems


def _check_alive(c: LocalCluster) -> list[str]:
    out = []
    for n in c.nodes:
        if not c.is_running(n):
            out.append(f"{n} died with exit code {c.exit_code(n)}")
        elif c.status(n, timeout=3.0) is None:
            out.append(f"{n} is running but does not answer status")
    return out


_ERROR_MARKS = ("Traceback (most recent call last)", "event=peer-error", "event=client-error")


def handler_errors(c: LocalCluster) -> Counter:
    """Exceptions the nodes met while serving, from their logs, keyed by their last line.

    The servers catch a handler's exception so that the process lives on; a fuzz
    run that only watched the process would never see such a bug, so the logs
    are read for the traces and ``*-error`` events those catches leave.
    """
    found: Counter = Counter()
    for n in c.nodes:
        for p in (c.log_path(n), c.data_dir(n) / "node.log"):
            if not p.exists():
                continue
            lines = p.read_text(errors="replace").splitlines()
            for i, ln in enumerate(lines):
                if ln.startswith("Traceback (most recent call last)"):
                    j = i + 1
                    while j < len(lines) and (lines[j].startswith(" ") or not lines[j].strip()):
                        j += 1
                    found[f"{n}: {lines[j] if j < len(lines) else ln}"[:200]] += 1
                elif any(m in ln for m in _ERROR_MARKS[1:]):
                    found[f"{n}: {ln.split(' time=')[0]}"[:200]] += 1
    return found


def _wait_leader(c: LocalCluster, timeout: float = 30.0) -> str:
    """The node that takes writes: a DLedger leader, or an ``--mode ha`` master."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for n in c.nodes:
            st = c.status(n, timeout=0.5)
            role = st.get("role") if st else None
            if role == "master" or (role == "leader" and (c.n == 1 or c.leader() == n)):
                return n
        time.sleep(0.05)
    raise TimeoutError(f"no leader or master within {timeout}s")


def run_fuzz(
    frames: int,
    *,
    base_dir: Path,
    nodes: int = 1,
    seed: int = 1,
    acked: int = 50,
    progress: Callable[[FuzzResult], None] | None = None,
    check_every: int = 0,
    extra_args: tuple[str, ...] = (),
) -> FuzzResult:
    """Fuzz a live cluster with at least ``frames`` frames and check it afterwards.

    ``check_every`` (frames) also checks liveness during the run, so a crash is
    caught near the frame that caused it rather than only at the end.
    """
    res = FuzzResult()
    fz = FrameFuzzer(seed, ids=tuple(f"n{i + 1}" for i in range(max(nodes, 3))))
    c = LocalCluster(
        nodes, base_dir, heartbeat_ms=100, election_timeout_ms=600, extra_args=extra_args
    )
    try:
        c.start_all()
        leader = _wait_leader(c)
        acked_map = _acked_appends(c, leader, acked)
        res.acked_before = len(acked_map)
        targets = [(n, "client", c.client_addr(n), CLIENT_TYPES) for n in c.nodes]
        targets += [(n, "peer", c.peer_addr(n), PEER_TYPES) for n in c.nodes]
        t0 = time.monotonic()
        next_check = check_every or frames + 1
        while res.frames < frames and not res.crashes:
            node, port, addr, types = fz.rng.choice(targets)
            kinds, blob = fz.connection(types)
            try:
                res.replies_bytes += _throw(addr, blob, timeout=5.0)
            except OSError as e:
                if not c.is_running(node):
                    res.crashes.append(
                        f"{node} died (exit {c.exit_code(node)}) during a {port} "
                        f"connection ending in {kinds[-1]}"
                    )
                    break
                res.crashes.append(f"{node} {port} port refused a connection: {e}")
                break
            res.frames += len(kinds)
            res.connections += 1
            res.by_port[port] += len(kinds)
            res.by_kind.update(kinds)
            if res.frames >= next_check:
                next_check += check_every
                res.crashes.extend(_check_alive(c))
                if progress:
                    res.seconds = time.monotonic() - t0
                    progress(res)
        res.seconds = time.monotonic() - t0
        res.crashes.extend(x for x in _check_alive(c) if x not in res.crashes)
        res.handler_errors = handler_errors(c)
        if res.crashes:
            return res
        leader = _wait_leader(c)
        with c.client(leader, timeout=5.0) as cl:
            r = cl.append("after-fuzz")
            if r.get("code") != "SUCCESS":
                res.crashes.append(f"{leader} no longer takes an append: {r}")
        for n in c.nodes:
            res.store_problems += _check_acked(c, n, acked_map)
        for n in c.nodes:
            rc = c.stop(n)
            if rc != 0:
                res.crashes.append(f"{n} exited {rc} on SIGTERM after the fuzz")
        for n in c.nodes:
            d = c.data_dir(n)
            size = (d / "data.log").stat().st_size
            s = LogStore(d)
            try:
                if s.data_length != size:
                    res.store_problems.append(f"{n}: recovery cut {size - s.data_length} bytes")
                s.entries(0, s.end_index)  # every entry readable, CRCs checked
            except Exception as e:  # the point is to report, whatever the store raises
                res.store_problems.append(f"{n}: store does not read back: {e!r}")
            finally:
                s.close()
        c.start_all()
        c.wait_ready(timeout=30)
        _wait_leader(c)
        for n in c.nodes:
            res.store_problems += [f"after restart: {p}" for p in _check_acked(c, n, acked_map)]
        return res
    finally:
        c.close()


@contextlib.contextmanager
def _workdir(base: Path | None, keep: bool) -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="sb-fuzz-", dir=base))
    try:
        yield d
    finally:
        if not keep:
            shutil.rmtree(d, ignore_errors=True)


def fuzz_frames_bench(
    frames: int,
    *,
    nodes: int,
    seed: int,
    mode: str,
    base_dir: Path | None,
    keep: bool,
    progress: Callable[[FuzzResult], None] | None = None,
) -> tuple[dict[str, Any], bool]:
    """``splitbrain bench fuzz-frames`` (its options: ``harness/cli/bench.py``): the
    figures, and whether the node survived with its store intact."""
    with _workdir(base_dir, keep) as d:
        extra = ("--mode", "ha", "--ha-master", "n1") if mode == "ha" else ()
        res = run_fuzz(
            frames,
            base_dir=d,
            nodes=nodes,
            seed=seed,
            progress=progress,
            check_every=max(frames // 20, 1000),
            extra_args=extra,
        )
        out = res.to_dict()
        out["seed"], out["nodes"], out["mode"] = seed, nodes, mode
        if keep:
            out["dir"] = str(d)
    return out, res.ok
