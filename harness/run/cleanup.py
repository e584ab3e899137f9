"""Crash-only cleanup: remove what earlier runs left on the hosts, and prove it is gone.

Every run starts with :func:`clean_start` (Jepsen's DB cycle): replay the fault journal,
stop and wipe whatever any earlier run of any test left, then scan again
(:mod:`harness.run.leftovers`) and refuse to run (:class:`DirtyClusterError`, exit 3)
unless the scan is empty. ``splitbrain heal`` (:func:`heal_hosts`) and ``lab down``
(:func:`down_lab`) use the same parts; ``lab status`` prints a scan.

Nothing here knows a fault by name: a journal entry is undone by its registered kind,
and a leftover that only a fault can cure (a frozen host, a guest held off, a clock
skewed without a journal entry) by that fault's ``Residue`` (:mod:`nemesis.registry`).
The one journal kind this module owns is ``db-node``: the DB footprint a run starts
belongs to the run, not to a fault.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import shlex
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.db import HasFootprint
from harness.core.errors import SplitbrainError
from harness.core.fault import JournalKind, JournalRecord
from harness.run.leftovers import (
    DB_PORTS,
    DB_ROOTS,
    DEFAULT_SCOPE,
    Leftover,
    Scope,
    format_leftovers,
    local_leftovers,
    residues,
    scan_host,
    scan_hosts,
)
from nemesis import journal as jr
from nemesis import registry, undo_journal
from nemesis.base import on_nodes, stop_by_pidfile

if TYPE_CHECKING:
    from harness.core.remote import Host, Remote
    from harness.core.spec import RunContext
    from harness.inventory.lab import Lab

__all__ = [
    "DirtyClusterError",
    "DB_NODE",
    "scope_for_run",
    "clean_host",
    "cure_local",
    "clean_start",
    "run_journal",
    "heal_hosts",
    "down_lab",
    "journal_db_node",
    "clear_db_node",
    "HealReport",
    "hostless",
    "HEAL_DEADLINE_S",
    "heal_deadline_s",
    "retry_heals",
    "unreachable_in",
    # the scan's names, re-exported for callers that predate harness/run/leftovers.py
    "Leftover",
    "Scope",
    "format_leftovers",
    "scan_hosts",
]

log = logging.getLogger(__name__)


class DirtyClusterError(SplitbrainError):
    """The hosts could not be brought to a clean state: no run may start on them."""

    exit_code = 3


def _undo_db_node(remote: Remote | None, entry: JournalRecord) -> None:
    """Stop a killed run's DB node by its pid files and wipe its directory (and empty parents)."""
    remote = jr.connected(remote, entry)
    u = entry.undo
    for pf in u.get("pidfiles", []):
        stop_by_pidfile(remote, str(pf))
    d, root = str(u["dir"]), str(u.get("root", ""))
    parents = []
    p = d
    while root and len(p.rsplit("/", 1)[0]) > len(root):
        p = p.rsplit("/", 1)[0]
        parents.append(f"rmdir {shlex.quote(p)} 2>/dev/null")
    remote.run(
        f"rm -rf {shlex.quote(d)}; " + "; ".join([*parents, "true"]),
        sudo=remote.host.user != "root",
        timeout=60,
    )
    ports = sorted({int(p) for p in u.get("ports", [])})
    if ports:
        # The node's processes may have outlived their pid files (a plugin's daemon that
        # forks): the entry stays, and the clean start refuses, until its ports are free.
        pattern = "|".join(f":{p}$" for p in ports)
        r = remote.run(
            f"for i in $(seq 50); do ss -Hltn | awk '{{print $4}}' | grep -Eq '{pattern}' "
            "|| exit 0; sleep 0.1; done; ss -Hltn | awk '{print $4}' | "
            f"grep -E '{pattern}'; exit 1",
            sudo=remote.host.user != "root",
            timeout=30,
            check=False,
        )
        if r.exit_status != 0:
            busy = " ".join(r.stdout.split()) or "?"
            raise ValueError(
                f"{entry.host}: the DB node is stopped but its ports are still in use ({busy})"
            )


DB_NODE = JournalKind(
    name="db-node",
    rank=1_000,
    undo=_undo_db_node,
    doc="a DB node a run started (its pid files and data directory): stopped and wiped, last",
)
registry.register_journal_kind(DB_NODE)
# The test fault on the harness's own link (harness/control/cut.py) registers its kind on
# import: a clean start after a killed test must know how to lift a cut it finds.
import harness.control.cut  # noqa: E402,F401

HEAL_DEADLINE_S = 120.0
"""Seconds a run keeps retrying a heal it could not confirm (its host's control link
is down) before it gives up, calls the verdict unknown and leaves the entry journaled.
``$SPLITBRAIN_HEAL_DEADLINE_S`` overrides it."""


def heal_deadline_s() -> float:
    """:data:`HEAL_DEADLINE_S`, or ``$SPLITBRAIN_HEAL_DEADLINE_S`` (a ConfigError when not a number)."""
    raw = os.environ.get("SPLITBRAIN_HEAL_DEADLINE_S")
    if not raw:
        return HEAL_DEADLINE_S
    try:
        v = float(raw)
    except ValueError:
        v = -1.0
    if not v >= 0:
        from harness.core.errors import ConfigError

        raise ConfigError(
            f"SPLITBRAIN_HEAL_DEADLINE_S must be a number of seconds >= 0, got {raw!r}",
            field="SPLITBRAIN_HEAL_DEADLINE_S",
        )
    return v


def unreachable_in(error: str | None, nodes: Iterable[str]) -> list[str]:
    """The nodes a fault completion's ``error`` says could not be reached (not: refused).

    :func:`nemesis.base.completion` writes ``"<node>: <ExceptionType>: <first line>"``
    per host; a ``RemoteError`` (no connection, no session) or a command that timed out
    is a control link that may come back, worth retrying; any other failure is not.
    """
    if not error:
        return []
    out = []
    for part in error.split("; "):
        node, _, rest = part.partition(": ")
        if node in nodes and (
            rest.startswith("RemoteError:")
            or (rest.startswith("RemoteCommandError:") and rest.endswith("timed out"))
        ):
            out.append(node)
    return out


def _retry_host(
    ctx: RunContext,
    todo: Mapping[str, list[jr.Entry]],
    journals: Mapping[str, jr.HostJournal],
    last: dict[tuple[str, str, str], str],
    attempt: int,
    node: str,
) -> None:
    """One attempt of :func:`retry_heals` on one host: undo each entry, forget what healed."""
    remote = ctx.remotes.get(node)
    reset = getattr(remote, "reset", None)
    if attempt > 1 and callable(reset):
        reset()  # a silent link leaves a dead connection looking alive
    for e in todo[node]:
        try:
            undo_journal.undo(remote, e)
        except Exception as ex:  # noqa: BLE001 - retried, then reported
            last[(node, e.kind, e.key)] = f"{type(ex).__name__}: {ex}"
            continue
        journals[node].forget(e)
        last.pop((node, e.kind, e.key), None)
        log.warning("%s: healed %s on retry %d", node, e.describe(), attempt)


def retry_heals(
    ctx: RunContext,
    *,
    deadline_s: float,
    keep_db_nodes: bool = False,
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """Confirm every heal of this run: what its journal still holds after the teardown.

    The nemeses clear an entry only once its heal succeeded on the host, and the runner
    clears a ``db-node`` entry once the node is stopped and wiped; so an entry of this run
    left after the teardown is a fault nobody confirmed healed (its host's control link
    was down, say). Each is undone again by its registered kind, through a fresh
    connection, until none is left or ``deadline_s`` passed. Returns one line per entry
    still there, naming host and fault; those stay journaled for the next clean start
    (or ``splitbrain heal``). ``keep_db_nodes``: the DB nodes were left running on purpose.
    Entries of no run (the control-link cut of harness/control/cut.py, the world's fault
    on the harness) are never lifted here.
    """
    if ctx.journal is None:
        return []
    run = getattr(ctx.journal, "run", None)
    journals = {n: jr.HostJournal(ctx.hosts[n]) for n in ctx.nodes if n in ctx.hosts}

    def pending() -> dict[str, list[jr.Entry]]:
        out: dict[str, list[jr.Entry]] = {}
        for n, j in journals.items():
            es = [
                e
                for e in j.entries()
                if e.run == run and not (keep_db_nodes and e.kind == DB_NODE.name)
            ]
            if es:
                out[n] = es
        return out

    todo = pending()
    if not todo:
        return []
    last: dict[tuple[str, str, str], str] = {}
    started = time.monotonic()
    delay, attempt = 0.5, 0
    log.warning(
        "heals not confirmed after the teardown, retrying for up to %g s: %s",
        deadline_s,
        "; ".join(f"{n}: {e.describe()}" for n, es in sorted(todo.items()) for e in es),
    )
    while todo:
        attempt += 1
        on_nodes(
            sorted(todo),
            functools.partial(_retry_host, ctx, todo, journals, last, attempt),
        )
        todo = pending()
        left = deadline_s - (time.monotonic() - started)
        if not todo or left <= 0:
            break
        sleep(min(delay, left))
        delay = min(delay * 2, 5.0)
    out = []
    for n, es in sorted(todo.items()):
        for e in es:
            why = last.get((n, e.kind, e.key), "not undone")
            out.append(
                f"{n}: heal of {e.describe()} not confirmed within {deadline_s:g} s "
                f"({why.splitlines()[0] if why else why}); still journaled in {journals[n].dir}"
            )
    for line in out:
        log.error("%s", line)
    return out


def hostless(ctx: RunContext) -> bool:
    """Whether every remote of the run declares it reaches no host (``Remote.hostless``).

    Such a run (the harness bench's null run, the runner's own tests over in-memory
    remotes) has nothing to scan, heal or journal; the remote says so itself, so this
    module never asks which class it is.
    """
    return all(bool(getattr(ctx.remotes.get(n), "hostless", False)) for n in ctx.nodes)


def _db_ports(ctx: RunContext, node: str) -> set[int]:
    """The ports the run's DB will listen on at ``node`` (they must be free before setup)."""
    return set(ctx.db.ports(ctx, node)) if isinstance(ctx.db, HasFootprint) else set()


def scope_for_run(ctx: RunContext, node: str) -> Scope:
    """Every known DB root (any earlier test may have used any DB) and this DB's ports."""
    roots = set(DB_ROOTS)
    if isinstance(ctx.db, HasFootprint) and ctx.db.root.startswith("/"):
        roots.add(ctx.db.root.rstrip("/"))
    ports = _db_ports(ctx, node) or set(DB_PORTS)
    return Scope(tuple(sorted(roots)), tuple(sorted(ports))).with_peers(ctx.hosts.values())


def cure_local(hosts: Iterable[Host], remotes: Mapping[str, Remote]) -> list[str]:
    """Undo, from this machine, what keeps a host out of reach: journaled or not.

    First the journal's local kinds (a frozen cgroup), then each fault's
    ``Residue.cure_local`` for what the journal does not know (a host frozen or a guest
    held off by a harness that kept no journal). Returns the hosts that needed it.
    """
    cured = []
    for h in hosts:
        j = jr.HostJournal(h)
        for e in j.entries():
            kind = registry.journal_kind(e.kind)
            if kind is not None and kind.local:
                with contextlib.suppress(OSError, ValueError):
                    undo_journal.undo(None, e)
                    j.forget(e)
                    cured.append(h.name)
        for _, r in residues():
            if r.local is None or r.cure_local is None or not r.local(h):
                continue
            r.cure_local(h, remotes.get(h.name))
            log.warning("%s: cured a leftover no journal held (%s)", h.name, r.kind)
            cured.append(h.name)
    return sorted(set(cured))


def clean_host(remote: Remote, found: Sequence[Leftover], scope: Scope) -> None:
    """Remove what a scan found: rules, qdiscs, daemons, DB processes, stops, data, clocks."""
    from nemesis.net import iptables_cmd, remove_chain_script

    ipt = iptables_cmd(remote)
    sudo = remote.host.user != "root"
    q = shlex.quote
    cmds: list[str] = []
    chains, rules = set(), []
    for lo in found:
        if lo.kind == "rule":
            f = lo.detail.split()
            if f[1].startswith("SPLITBRAIN"):
                chains.add(f[1])
            else:
                rules.append("-D " + " ".join(q(x) for x in f[1:]))
    cmds += [f"{ipt} {r} 2>/dev/null" for r in rules]
    cmds += [remove_chain_script(ipt, c) for c in sorted(chains)]
    for lo in found:
        if lo.kind == "netem":
            f = lo.detail.split()
            if "dev" in f:
                dev = f[f.index("dev") + 1]
                cmds.append(f"tc qdisc del dev {q(dev)} root 2>/dev/null")
    pids = sorted(
        {
            lo.pid
            for lo in found
            if lo.pid is not None and lo.kind in ("db-process", "daemon", "stopped")
        }
    )
    kill = sorted(
        {lo.pid for lo in found if lo.pid is not None and lo.kind in ("db-process", "daemon")}
    )
    if pids:
        cmds.append(f"kill -CONT {' '.join(map(str, pids))} 2>/dev/null")
    if kill:
        ks = " ".join(map(str, kill))
        cmds.append(
            f"kill -TERM {ks} 2>/dev/null; i=0; while [ $i -lt 50 ]; do alive=; "
            f"for p in {ks}; do kill -0 $p 2>/dev/null && alive=1; done; "
            f'[ -z "$alive" ] && break; sleep 0.1; i=$((i+1)); done; '
            f"kill -KILL {ks} 2>/dev/null"
        )
    dirs = [lo.detail for lo in found if lo.kind == "data"]
    if dirs:
        cmds.append("rm -rf " + " ".join(q(d) for d in dirs))
    cmds.append("true")
    remote.run("; ".join(cmds), sudo=sudo, timeout=60, check=False)
    # Pid files of stopped fault daemons (their processes are gone now).
    for lo in found:
        if lo.kind == "daemon" and lo.detail.startswith("/"):
            remote.run(f"rm -f {q(lo.detail.split()[0])}", sudo=sudo, timeout=30, check=False)
    kinds = {lo.kind for lo in found}
    for fault, r in residues():
        if r.cure is not None and kinds & set(r.cures):
            try:
                r.cure(remote)
            except Exception as e:  # noqa: BLE001 - the rescan reports what is left
                log.warning("%s: %s could not cure its leftover: %s", remote.host.name, fault, e)


@dataclass
class HealReport:
    """What was found before, what remains after, and what could not be done, per host."""

    before: dict[str, list[Leftover]] = field(default_factory=dict)
    after: dict[str, list[Leftover]] = field(default_factory=dict)
    problems: dict[str, list[str]] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return not any(self.after.values()) and not any(self.problems.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "clean": self.clean,
            "before": {h: [asdict(x) for x in v] for h, v in self.before.items()},
            "after": {h: [asdict(x) for x in v] for h, v in self.after.items()},
            "problems": self.problems,
        }

    def remaining(self) -> list[str]:
        out = [str(x) for v in self.after.values() for x in v]
        out += [f"{h}: {p}" for h, ps in self.problems.items() for p in ps]
        return out


def _heal(
    hosts: Sequence[Host], remotes: Mapping[str, Remote], scopes: Mapping[str, Scope]
) -> HealReport:
    rep = HealReport()
    by = {h.name: h for h in hosts}
    journals = [jr.HostJournal(h) for h in hosts]
    rep.before = {h: local_leftovers(by[h]) for h in by}
    for j in journals:
        rep.before[j.host.name] += [
            Leftover(j.host.name, "journal", e.describe()) for e in j.entries()
        ]
    try:
        cure_local(hosts, remotes)  # frozen, off or paused: nothing else reaches them
    except Exception as e:  # noqa: BLE001 - the rescan reports the host
        rep.problems.setdefault("local", []).append(f"cannot reach a host from here: {e}")
    for h, ps in undo_journal.replay(journals, remotes).items():
        rep.problems.setdefault(h, []).extend(ps)

    def one(n: str) -> tuple[list[Leftover], list[Leftover]]:
        remote = remotes[n]
        found = scan_host(remote, scopes[n], with_journal=False)
        if found:
            clean_host(remote, found, scopes[n])
        return found, scan_host(remote, scopes[n])

    for n, r in on_nodes(by, one).items():
        if isinstance(r, BaseException):
            rep.problems.setdefault(n, []).append(f"unreachable or failed: {r}")
            rep.after[n] = [Leftover(n, "unreachable", str(r))]
        else:
            rep.before[n] += [x for x in r[0] if x not in rep.before[n]]
            rep.after[n] = r[1]
    rep.problems = {h: p for h, p in rep.problems.items() if p}
    return rep


def clean_start(ctx: RunContext) -> HealReport:
    """Jepsen's DB cycle before setup: heal, stop and wipe every earlier run, verify.

    Raises :class:`DirtyClusterError` (exit 3) naming each host and leftover when
    the hosts cannot be made clean. The runner then sets the run's journal
    (:func:`run_journal`), so the faults this run applies are journaled from the first.
    """
    if hostless(ctx):
        log.info("clean start skipped: the remotes reach no hosts")
        return HealReport()
    hosts = [ctx.hosts[n] for n in ctx.nodes]
    scopes = {n: scope_for_run(ctx, n) for n in ctx.nodes}
    rep = _heal(hosts, ctx.remotes, scopes)
    healed = format_leftovers(rep.before)
    if healed:
        log.warning("clean start: removed what earlier runs left: %s", "; ".join(healed))
    else:
        log.info("clean start: nothing left by earlier runs")
    with contextlib.suppress(OSError):
        Path(ctx.store_dir, "clean-start.json").write_text(
            json.dumps(rep.to_json(), indent=1) + "\n"
        )
    if not rep.clean:
        raise DirtyClusterError(
            "refusing to run on a dirty cluster; still there after cleanup: "
            + "; ".join(rep.remaining())
            + " (see `splitbrain heal` and `splitbrain lab status`)"
        )
    return rep


def run_journal(ctx: RunContext) -> jr.RunJournal | None:
    """The journal the runner sets as ``ctx.journal`` after the clean start (None when hostless)."""
    return None if hostless(ctx) else jr.run_journal(ctx)


def journal_db_node(ctx: RunContext, node: str) -> None:
    """Journal the DB node before setup starts it: a killed run's cluster is found by it."""
    db = ctx.db
    if not isinstance(db, HasFootprint):
        return
    jr.note(
        ctx,
        node,
        DB_NODE.name,
        "db",
        {
            "dir": db.node_dir(ctx, node),
            "root": db.root,
            "pidfiles": db.pidfiles(ctx, node),
            "ports": sorted(int(p) for p in db.ports(ctx, node)),
        },
        f"{ctx.spec.db} node of test {ctx.spec.name}",
    )


def clear_db_node(ctx: RunContext, node: str) -> None:
    """The DB node was stopped and wiped by its teardown."""
    jr.clear(ctx, node, DB_NODE.name, "db")


def heal_hosts(
    hosts: Sequence[Host],
    *,
    connect_fn: Callable[[Host], Remote] | None = None,
    scope: Scope = DEFAULT_SCOPE,
) -> HealReport:
    """``splitbrain heal``: replay the journal, remove every leftover, scan again."""
    from harness.control import connect

    remotes = {h.name: (connect_fn or connect)(h) for h in hosts}
    try:
        sc = scope.with_peers(hosts)
        return _heal(hosts, remotes, {h.name: sc for h in hosts})
    finally:
        for r in remotes.values():
            with contextlib.suppress(Exception):
                r.close()


def down_lab(lab: Lab) -> None:
    """``lab down``: remove the lab, then the DB data its runs left on this machine's disk.

    Lab hosts share ``/var/lib/splitbrain`` and most of this machine's file system,
    so data under the DB roots (outside the lab's state dir) would survive the
    namespaces; the journal, inside the state dir, is read first because ``down``
    removes it. A journaled node directory a host does not share with the machine
    (its own ``/var/lib/<package>``, ``/srv``) went with the state dir, and the
    machine's directory of that name is not the host's: it is left alone.
    """
    dirs = {f"{r}/{lab.name}" for r in DB_ROOTS}
    with contextlib.suppress(Exception):
        for h in lab.hosts():
            for e in jr.HostJournal(h).entries():
                d = str(e.undo.get("dir", ""))
                if e.kind == DB_NODE.name and d.startswith("/") and lab.shares(d):
                    dirs.add(d)
    lab.down()
    for d in sorted(dirs):
        if os.path.isdir(d):
            shutil.rmtree(d, ignore_errors=True)
            log.info("removed %s", d)
