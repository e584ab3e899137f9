"""Disk faults on any lab host with FUSE: ``lose-unfsynced``, ``torn-write`` and ``corrupt``.

``lose-unfsynced`` and ``torn-write`` share one nemesis (group ``disk``): at setup,
before the DB is installed, it mounts a lazy fs (harness/control/disk, docs/disk-faults.md)
over each node's directory (``HasFootprint.node_dir``), so the node, its code and
its logs all run on it; ``start-<kind>`` SIGKILLs the DB on the chosen nodes
(``Killable``) and makes the lazy fs lose power under the node's data directory
(option ``under``, ``data`` by default); ``stop-<kind>`` restarts them on what is
left. Teardown restarts, then unmounts (lazily: the node may still run until the
DB's own teardown).

``corrupt`` needs no lazy fs: ``start-corrupt`` kills the node and damages one of
its files with ``corrupt.py`` shipped to the host (a flipped bit, a cut tail, a
chunk copied over another, or the state file rolled back to the copy taken at the
node's previous restart); ``stop-corrupt`` restarts it and takes that copy. Which
files are the DB's own declaration (``harness.core.db.DataFiles``, its ``data_files``:
the log's and the term's globs under its data directory; ``data.log`` and
``term.json`` for the reference node), so the fault hits what the DB reads; a DB that
declares none is refused (the deck leaves ``corrupt`` out, naming why) unless the
run names the files (``corrupt_file``, ``corrupt_state_file``).
Corrupting acknowledged data is outside any node's fault model if a quorum is hit,
so ``corrupt`` aims at one node unless told otherwise.

Every completion carries the record of what was done per node (the lazy fs's
``dropped``/``torn``, or the corruption's file, offsets and bits).
"""

from __future__ import annotations

import logging
import posixpath
import random
import re
import shlex
import sys
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from harness.control.disk import corrupt as corrupt_ops
from harness.control.disk import fsd
from harness.control.disk.lazyfs import LazyFs, cleanup_commands
from harness.core.db import DataFiles, HasFootprint, Killable, data_files
from harness.core.errors import ConfigError, NemesisError
from harness.core.fault import (
    Draw,
    Effects,
    Fault,
    JournalKind,
    JournalRecord,
    Periods,
    Residue,
    Selected,
)
from harness.core.options import option
from nemesis import journal
from nemesis.base import completion, host_errors, log_errors, no_targets, on_nodes, op_nodes
from nemesis.schedules import Step, scaled, start, stop
from nemesis.targets import NodeFaultOptions, Target, draw_target

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from harness.core.history import Op
    from harness.core.remote import Host, Remote
    from harness.core.spec import RunContext

__all__ = [
    "LOSE_UNFSYNCED",
    "TORN_WRITE",
    "CORRUPT",
    "DISK_KINDS",
    "LazyFsNemesis",
    "CorruptNemesis",
    "disk_steps",
    "DISK_PARTS",
    "corrupt_refusal",
]

log = logging.getLogger(__name__)

CORRUPT_SCRIPT = posixpath.join(fsd.CONTROL_DIR, "corrupt.py")
CORRUPT_OPS = ("bitflip", "truncate", "copy-chunk", "rollback")
_SAFE_GLOB = re.compile(r"[A-Za-z0-9._*?\[\]/-]+")
"""What a corrupt file option may hold: it is expanded by the host's shell, unquoted."""


@dataclass(frozen=True)
class DiskFaultOptions(NodeFaultOptions):
    """``--nemesis-option`` keys of ``lose-unfsynced`` and ``torn-write``."""

    under: str = option("data", "the subdirectory of the node's directory that loses power")
    file: str = option(
        "data.log", "the file whose next write the power cut waits for; torn-write tears it"
    )
    hold: float = option(
        3.0,
        "seconds to wait for that write before the cut (0: cut at once, in flight or not)",
        minimum=0.0,
        maximum=60.0,
    )
    tear: int = option(
        16,
        "torn-write: the tear cuts 1..tear bytes off the end of the torn write, into its "
        "last record (0: the write keeps a prefix of any length)",
        minimum=0,
        maximum=1 << 20,
    )


@dataclass(frozen=True)
class CorruptOptions(NodeFaultOptions):
    """``--nemesis-option`` keys of ``corrupt`` (``corrupt_targets=one`` by default)."""

    targets: tuple[Target, ...] = option(("one",), "whom the fault may hit")
    under: str = option(
        "", "the node's data directory, inside its directory (default: the DB's data_files)"
    )
    bits: int = option(4, "bitflip: bits flipped", minimum=1, maximum=4096)
    tail: int = option(
        4096,
        "bitflip, copy-chunk, truncate: bytes at the end of the file's data hit (a "
        "preallocated file's trailing zeros are not data)",
        minimum=1,
    )
    aim: Literal["text", "any"] = option(
        "text",
        "bitflip: 'text' flips bits of the stored text (keys, values, payloads: runs of "
        "printable bytes) in the tail, where only a checksum tells the damage; 'any' "
        "flips any byte, framing included",
    )
    file: str = option(
        "",
        "bitflip, copy-chunk, truncate: the file hit, relative to the data directory; a glob "
        "(member/wal/*.wal) hits its last match in name order (default: the DB's "
        "data_files log globs)",
    )
    state_file: str = option(
        "",
        "rollback: the file copied at each restart and restored, relative like file "
        "(default: the DB's data_files state globs)",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("under", "file", "state_file"):
            value = getattr(self, name)
            if not value:
                continue  # the DB's declaration
            if not _SAFE_GLOB.fullmatch(value) or ".." in value.split("/"):
                raise ConfigError(
                    f"corrupt {name} {value!r}: a relative path or glob of letters, digits "
                    "and . _ - / * ? [ ] only",
                    field=name,
                )


def _python(remote: Remote) -> str:
    """The first interpreter on the host that has mfusepy (the lab shares this venv)."""
    for py in (sys.executable, "python3"):
        if remote.run(f"{shlex.quote(py)} -c 'import mfusepy'", check=False, timeout=30.0).ok:
            return py
    return "python3"  # LazyFs.preflight then names the host and the missing package


def _db(ctx: RunContext) -> Any:
    from harness.core.db import HasFootprint, Killable

    if not isinstance(ctx.db, Killable) or not isinstance(ctx.db, HasFootprint):
        raise NemesisError(
            f"disk faults need a DB that can be killed and restarted and names its node "
            f"directories (Killable, HasFootprint); {type(ctx.db).__name__} is not"
        )
    return ctx.db


_DECKS: weakref.WeakKeyDictionary[random.Random, list[str]] = weakref.WeakKeyDictionary()
"""Per schedule rng, the corrupt variants not drawn yet in the current round."""


def _deal(rng: random.Random, variants: Sequence[str]) -> str:
    """The next variant from a shuffled deck of all of them, reshuffled when spent.

    A 45 s run starts about four corruptions: drawn independently from four
    variants, a third of such runs never met a given one (and bitflip is the only
    one that finds a node that skips its CRCs); dealt from a deck, every run of four
    meets each once, in a seeded order.
    """
    deck = _DECKS.get(rng)
    if not deck or any(v not in variants for v in deck):
        deck = sorted(variants)
        rng.shuffle(deck)
        _DECKS[rng] = deck
    return deck.pop()


def _draw(d: Draw, kind: str) -> dict[str, Any]:
    value = draw_target(d, kind)
    value["seed"] = d.rng.randrange(1 << 31)
    if kind == "corrupt" and d.variants:
        value["op"] = _deal(d.rng, d.variants)
    return value


class LazyFsNemesis:
    """``start-lose-unfsynced`` / ``start-torn-write`` over lazy fs mounts made at setup."""

    def __init__(self, chosen: Mapping[str, Selected]) -> None:
        self.kinds = sorted(chosen)
        self.options: dict[str, DiskFaultOptions] = {
            k: (s.options if isinstance(s.options, DiskFaultOptions) else DiskFaultOptions())
            for k, s in chosen.items()
        }
        self.mounts: dict[str, LazyFs] = {}
        self.dead: set[str] = set()

    def fs(self) -> set[str]:
        return {f"{p}-{k}" for k in self.kinds for p in ("start", "stop")}

    def setup(self, ctx: RunContext) -> None:
        db = _db(ctx)
        self.teardown(ctx)

        def mount(node: str) -> None:
            remote = ctx.remotes[node]
            mp = db.node_dir(ctx, node)
            lz = LazyFs(remote, mp, python=_python(remote))
            journal.note(ctx, node, "lazyfs", mp, {"mountpoint": mp}, "lazy fs over the node")
            lz.mount()
            self.mounts[node] = lz

        errors = host_errors(on_nodes(list(ctx.nodes), mount))
        if errors:
            self.teardown(ctx)
            raise NemesisError(
                "lazy fs: " + "; ".join(f"{n}: {e}" for n, e in sorted(errors.items()))
            )

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        kind = op.f.split("-", 1)[1]
        if kind not in self.kinds:
            raise NemesisError(f"disk nemesis cannot handle {op.f!r}")
        if op.f.startswith("stop-"):
            restarted, errors = self._restart(ctx)
            return completion(op, {"nodes": restarted}, errors)
        db = _db(ctx)
        opts = self.options[kind]
        value = dict(op.value or {})
        nodes = op_nodes(ctx, value)
        if not nodes:
            return no_targets(op, value)
        records: dict[str, Any] = {}

        def crash(node: str) -> None:
            lz = self.mounts.get(node)
            if lz is None:
                raise NemesisError(f"{node}: no lazy fs mounted (setup failed?)")
            # The cut waits for a write in flight (held: power fails at it, later ones get
            # EIO), else it lands between group commits with nothing to lose or tear.
            held = lz.hold(opts.file, under=opts.under, wait_s=opts.hold) if opts.hold else None
            try:
                db.kill(ctx, node)
                self.dead.add(node)
            finally:  # power back even if the kill failed: else the node's disk stays gone
                # One seed for every node of the op: nodes torn at once keep the same
                # prefix, so either all keep the torn record or all cut it. (One seed per
                # node was tried: the next leader then often cut its own, and the slow
                # test of trust-torn-tail stopped finding it, 0 of 2 runs.)
                records[node] = lz.crash(
                    kind,
                    under=opts.under,
                    path=opts.file if kind == "torn-write" else None,
                    seed=value.get("seed"),
                    tail=opts.tear if kind == "torn-write" else None,
                )
            if held is not None:
                records[node]["hold"] = held

        errors = host_errors(on_nodes(nodes, crash))
        value["nodes"] = nodes
        value["records"] = records
        return completion(op, value, errors)

    def _restart(self, ctx: RunContext) -> tuple[list[str], dict[str, str]]:
        db = _db(ctx)
        dead = sorted(self.dead)

        def start(node: str) -> None:
            db.start(ctx, node)
            self.dead.discard(node)

        errors = host_errors(on_nodes(dead, start))
        return [n for n in dead if n not in errors], errors

    def teardown(self, ctx: RunContext) -> None:
        if self.dead:
            log_errors("restarting a node after a disk fault", self._restart(ctx)[1])

        def unmount(node: str) -> None:
            lz = self.mounts.pop(node)
            lz.unmount()
            journal.clear(ctx, node, "lazyfs", lz.mountpoint)

        log_errors("unmounting a lazy fs", host_errors(on_nodes(sorted(self.mounts), unmount)))


class CorruptNemesis:
    """``start-corrupt`` kills a node and damages one of its files; ``stop-corrupt`` restarts."""

    def __init__(self, chosen: Mapping[str, Selected]) -> None:
        sel = chosen.get("corrupt", Selected())
        self.options = sel.options if isinstance(sel.options, CorruptOptions) else CorruptOptions()
        self.variants = sel.variants or CORRUPT_OPS
        self.dead: set[str] = set()
        self.snapshots: dict[str, str] = {}
        self.state_files: dict[str, str] = {}
        self.shipped: set[str] = set()

    def fs(self) -> set[str]:
        return {"start-corrupt", "stop-corrupt"}

    def setup(self, ctx: RunContext) -> None:
        _db(ctx)
        if not self.options.file:
            why = corrupt_refusal(ctx.db, [])
            if why is not None:
                raise NemesisError(why + "; or name its files with --nemesis-option corrupt_file=")
        self.dead = set()

    def _declared(self, ctx: RunContext) -> DataFiles | None:
        return data_files(ctx.db)

    def _data(self, ctx: RunContext, node: str) -> str:
        declared = self._declared(ctx)
        under = self.options.under or (declared.under if declared else "data")
        return posixpath.join(_db(ctx).node_dir(ctx, node), under)

    def _globs(self, ctx: RunContext, which: Literal["log", "state"]) -> tuple[str, ...]:
        """The globs a corruption aims at: the run's option, else the DB's declaration."""
        given = self.options.file if which == "log" else self.options.state_file
        if given:
            return (given,)
        declared = self._declared(ctx)
        globs = () if declared is None else (declared.log if which == "log" else declared.state)
        if not globs:
            raise NemesisError(
                f"corrupt: {type(ctx.db).__name__} declares no {which} file (data_files."
                f"{which}); name one with --nemesis-option corrupt_"
                f"{'file' if which == 'log' else 'state_file'}="
            )
        return globs

    def _run(self, ctx: RunContext, node: str, args: str) -> dict[str, Any]:
        import json

        remote = ctx.remotes[node]
        if node not in self.shipped:
            remote.run(f"mkdir -p {fsd.CONTROL_DIR}", timeout=30.0)
            remote.upload(corrupt_ops.__file__, CORRUPT_SCRIPT)
            self.shipped.add(node)
        res = remote.run(f"python3 {CORRUPT_SCRIPT} {args}", check=False, timeout=60.0)
        rec: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
        if "error" in rec:
            raise NemesisError(f"{node}: corrupt {args.split()[0]}: {rec['error']}")
        return rec

    def _file(self, ctx: RunContext, node: str, patterns: Sequence[str]) -> str:
        """The host's file for ``patterns`` (globs: the last of their regular files' matches
        in name order)."""
        data = self._data(ctx, node)
        globs = " ".join(patterns)  # checked against _SAFE_GLOB: the shell expands them
        res = ctx.remotes[node].run(
            f'cd {shlex.quote(data)} && for f in {globs}; do [ -f "$f" ] && echo "$f"; '
            "done 2>/dev/null | LC_ALL=C sort | tail -n 1",
            check=False,
            timeout=30.0,
        )
        found = res.stdout.strip()
        if not found:
            raise NemesisError(f"{node}: corrupt: no file matches {' '.join(patterns)!r} in {data}")
        return posixpath.join(data, found)

    def _damage(self, ctx: RunContext, node: str, op: str, seed: int) -> dict[str, Any]:
        q = shlex.quote
        if op == "rollback":
            snap = self.snapshots.get(node)
            if snap is None:  # nothing taken yet: take it now, damage nothing
                return self._snapshot(ctx, node)
            return self._run(ctx, node, f"rollback {q(self.state_files[node])} {q(snap)}")
        log_file = q(self._file(ctx, node, self._globs(ctx, "log")))
        # Offsets count back from the end of the file's data (its last non-zero byte):
        # a log's newest records, not the zeros of a preallocated segment. A flip aimed
        # at the stored text lands where only a checksum tells it: spread over every
        # byte, most flips hit framing (48 of a reference-node entry's ~67 bytes are
        # header), whose sizes and indexes any recovery checks, skip-crc's included.
        tail = self.options.tail
        if op == "bitflip":
            aim = " --text" if self.options.aim == "text" else ""
            return self._run(
                ctx,
                node,
                f"bitflip {log_file} --bits {self.options.bits} --seed {seed} "
                f"--offset={-tail} --from-data-end{aim}",
            )
        if op == "truncate":
            return self._run(
                ctx, node, f"truncate {log_file} --drop {1 + seed % tail} --from-data-end"
            )
        if op == "copy-chunk":
            src = 1 + seed % tail
            dst = 1 + (seed // 7) % tail
            return self._run(
                ctx,
                node,
                f"copy-chunk {log_file} --src={-src} --dst={-dst} --length 64 --from-data-end",
            )
        raise NemesisError(f"corrupt: unknown op {op!r}")

    def _snapshot_missing(self, ctx: RunContext, *, exclude: Sequence[str] = ()) -> None:
        """Copy the state file of every live node that has no copy yet, to roll back later.

        The first copy is kept for the whole run: a rollback then restores the oldest
        state this fault saw, so terms and votes cast since are what it takes back (a
        copy taken at each restart would often equal the file it replaces, and the
        rollback would do nothing). Runs before a corruption, so the first one finds
        the cluster in its first terms.
        """
        todo = [n for n in ctx.nodes if n not in self.snapshots and n not in self.dead]
        todo = [n for n in todo if n not in exclude]

        def take(node: str) -> None:
            self._snapshot(ctx, node)

        for node, err in sorted(host_errors(on_nodes(todo, take)).items()):
            log.warning("corrupt: no copy of %s's state file yet: %s", node, err)

    def _snapshot(self, ctx: RunContext, node: str) -> dict[str, Any]:
        snap = posixpath.join(fsd.CONTROL_DIR, f"state-{node}.snap")
        state = self._file(ctx, node, self._globs(ctx, "state"))
        rec = self._run(ctx, node, f"snapshot {shlex.quote(state)} {shlex.quote(snap)}")
        self.snapshots[node] = snap
        self.state_files[node] = state
        return rec

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        db = _db(ctx)
        if op.f == "stop-corrupt":
            dead = sorted(self.dead)

            def start(node: str) -> None:
                db.start(ctx, node)
                self.dead.discard(node)

            errors = host_errors(on_nodes(dead, start))
            value: dict[str, Any] = {"nodes": [n for n in dead if n not in errors]}
            if errors:
                # A node that will not start on the data it finds (a checksum it verified,
                # a page it could not read) did what a correct node may do: said so rather
                # than serve damage. It stays down and is named here; the other nodes carry
                # on and the checkers judge what they acknowledged.
                value["refused_to_start"] = errors
                log.warning("corrupt: nodes refused to start on damaged data: %s", errors)
            return completion(op, value)
        if op.f != "start-corrupt":
            raise NemesisError(f"corrupt nemesis cannot handle {op.f!r}")
        value = dict(op.value or {})
        nodes = op_nodes(ctx, value)
        if not nodes:
            return no_targets(op, value)
        what = str(value.get("op") or self.variants[0])
        if what not in CORRUPT_OPS:
            raise NemesisError(f"corrupt: unknown op {what!r} (known: {', '.join(CORRUPT_OPS)})")
        seed = int(value.get("seed") or 0)
        records: dict[str, Any] = {}
        if "rollback" in self.variants:
            self._snapshot_missing(ctx, exclude=nodes if what == "rollback" else ())

        def hit(node: str) -> None:
            db.kill(ctx, node)
            self.dead.add(node)
            # one seed per node: nodes of one event are not hit at the same offsets
            records[node] = self._damage(ctx, node, what, seed + nodes.index(node))

        errors = host_errors(on_nodes(nodes, hit))
        return completion(op, {**value, "nodes": nodes, "op": what, "records": records}, errors)

    def teardown(self, ctx: RunContext) -> None:
        dead = sorted(self.dead)
        if dead:
            db = _db(ctx)

            def start(node: str) -> None:
                db.start(ctx, node)
                self.dead.discard(node)

            log_errors("restarting a corrupted node", host_errors(on_nodes(dead, start)))

        def forget(node: str) -> None:
            snap = self.snapshots.pop(node)
            ctx.remotes[node].run(f"rm -f {shlex.quote(snap)}", check=False, timeout=30.0)

        log_errors("removing a state copy", host_errors(on_nodes(sorted(self.snapshots), forget)))


# ---------------------------------------------------------------------- the zoo's script

DISK_KINDS = ("lose-unfsynced", "torn-write", "corrupt")
"""The fault kinds :func:`disk_steps` starts: a campaign playing it must enable all three."""


def disk_steps(nodes: list[str], rng: random.Random, hold: float, gap: float) -> list[Step]:
    """The ``disk`` profile: what a kill -9 on a namespace lab can never do to a node's disk.

    1. Every node loses power: each loses what it wrote and did not fsync (a node
       that acks before its fsync, ``skip-fsync``, loses acked entries on a quorum).
    2. Every node loses power again in the middle of its last write to ``data.log``
       (a recovery that keeps the torn record, ``trust-torn-tail``, now holds an
       entry nobody wrote; all nodes, so the next leader is one of them).
    3. A minority, V among them, is stopped and bits of each one's log tail flipped
       (``skip-crc`` keeps and serves them; a flip in a header field it still checks
       cuts the log there, as the correct node does, so not every flip shows). Just
       before, every node's ``term.json`` is copied. A minority only: the correct
       node cuts its log at the first bad record, and a quorum must keep what it acked.
    4. The leader is killed and restarted, so terms move on and V votes again.
    5. V is stopped and its ``term.json`` rolled back to the copy of step 3
       (``trust-term-file`` runs in the old term, below terms it was seen in).

    Every value is drawn here, so a seed replays the script; each step heals itself.
    """
    everyone = {"target": "all", "nodes": list(nodes)}
    minority = rng.sample(nodes, max(1, (len(nodes) - 1) // 2))
    victim = minority[0]

    def seed() -> int:
        return rng.randrange(1 << 31)

    return [
        start(gap, "lose-unfsynced", {**everyone, "seed": seed(), "why": "disk-power"}),
        stop(scaled(rng, hold, 0.2, 0.3), "lose-unfsynced"),
        start(
            scaled(rng, hold, 0.6, 0.8),
            "torn-write",
            {**everyone, "seed": seed(), "why": "disk-torn"},
        ),
        stop(scaled(rng, hold, 0.2, 0.3), "torn-write"),
        start(
            scaled(rng, hold, 0.6, 0.8),
            "corrupt",
            {"nodes": minority, "op": "bitflip", "seed": seed(), "why": "disk-bitflip"},
        ),
        stop(scaled(rng, hold, 0.2, 0.3), "corrupt"),
        start(scaled(rng, hold, 0.6, 0.8), "kill", {"target": "leader", "why": "disk-terms"}),
        stop(scaled(rng, hold, 0.3, 0.5), "kill"),
        start(
            scaled(rng, hold, 0.8, 1.0),
            "corrupt",
            {"nodes": [victim], "op": "rollback", "seed": seed(), "why": "disk-rollback"},
        ),
        stop(scaled(rng, hold, 0.2, 0.3), "corrupt"),
    ]


DISK_PARTS: tuple[frozenset[str], ...] = (
    frozenset({"lose-unfsynced"}),
    frozenset({"torn-write"}),
    frozenset({"corrupt", "kill"}),
)
"""The parts of :func:`disk_steps` that play without one another (steps 1, 2 and 3-5): a DB
or hosts that refuse one fault lose that part only (:data:`nemesis.profiles.SCRIPT_PARTS`).
The kill of step 4 is there for the rollback of step 5 (terms must move on), so it goes
with ``corrupt``."""


# ---------------------------------------------------------------------- registration


def _undo_lazyfs(remote: Remote | None, entry: JournalRecord) -> None:
    remote = journal.connected(remote, entry)
    remote.run(cleanup_commands(str(entry.undo["mountpoint"])), check=False, timeout=60.0)


def _cure_mounts(remote: Remote) -> None:
    """Unmount every lazy fs the host's processes see (a run's leftover, journal or not)."""
    from harness.control.disk.lazyfs import find_mounts

    for mp in find_mounts(remote):
        remote.run(cleanup_commands(mp), check=False, timeout=60.0)


LAZYFS_MOUNTED = JournalKind(
    name="lazyfs",
    rank=45,
    undo=_undo_lazyfs,
    doc="a lazy fs mounted over a node's directory: unmounted (lazily if busy), its state removed",
)
_MOUNT_RESIDUE = Residue(markers=(fsd.MARKER,), cures=("daemon", "data"), cure=_cure_mounts)


def corrupt_refusal(db: object, hosts: Sequence[Host]) -> str | None:
    """Why ``corrupt`` cannot aim at ``db``'s files, or None: it needs the DB's own
    ``data_files`` (the reference node's names would hit nothing, or the wrong file)."""
    try:
        declared = data_files(db)
    except ConfigError as e:
        return f"corrupt: {e}"
    if declared is None:
        return (
            f"corrupt needs a DB that declares which files hold its log and term "
            f"(data_files, harness.core.db.DataFiles); {type(db).__name__} does not"
        )
    return None


_DISK_DB_NEEDS = (Killable, HasFootprint)
"""A disk fault kills the node and acts on its directory (:func:`_db` says so at setup)."""


_CRASHED = Periods(hit=("nodes",), ended=("nodes",))
"""A disk fault's periods: the ``nodes`` it crashed, until ``stop`` restarts the ``nodes`` it names."""


def _disk_nemesis(chosen: Mapping[str, Selected]) -> LazyFsNemesis:
    return LazyFsNemesis(chosen)


def _lazy_fs_fault(name: str, heal_rank: int, colour: str, doc: str) -> Fault:
    """A fault of the lazy fs's nemesis (group ``disk``): a power cut of some kind under a
    killed node. ``lose-unfsynced`` and ``torn-write`` differ in what the cut does only."""
    return Fault(
        name=name,
        nemesis=_disk_nemesis,
        group="disk",
        heal_rank=heal_rank,
        draw=lambda d: _draw(d, name),
        options=DiskFaultOptions,
        db_needs=_DISK_DB_NEEDS,
        needs=frozenset({"fuse"}),
        journal=(LAZYFS_MOUNTED,),
        residue=_MOUNT_RESIDUE,
        effects=Effects(kills=True, loses_writes=True),
        periods=_CRASHED,
        colour=colour,
        doc=doc,
    )


LOSE_UNFSYNCED = _lazy_fs_fault(
    "lose-unfsynced",
    72,
    "#7f5539",
    "the node killed and every write it did not fsync lost (a lazy fs; any FUSE host)",
)
TORN_WRITE = _lazy_fs_fault(
    "torn-write",
    74,
    "#b08968",
    "the node killed and its last un-fsynced write to data.log torn (a lazy fs; any FUSE host)",
)
CORRUPT = Fault(
    name="corrupt",
    nemesis=lambda chosen: CorruptNemesis(chosen),
    heal_rank=76,
    draw=lambda d: _draw(d, "corrupt"),
    variants=CORRUPT_OPS,
    aliases={f"corrupt-{o}": (o,) for o in CORRUPT_OPS},
    options=CorruptOptions,
    db_needs=_DISK_DB_NEEDS,
    refuse=corrupt_refusal,
    effects=Effects(kills=True),  # damaged, not lost: what was durable is what it reads
    periods=_CRASHED,
    colour="#9c6644",
    doc="the node killed and one of its files damaged: a bit flipped, its tail cut, a chunk "
    "copied, term.json rolled back",
)
