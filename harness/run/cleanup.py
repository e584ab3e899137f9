"""Crash-only cleanup: find what earlier runs left on the hosts, remove it, prove it is gone.

A run that ends normally heals its faults and wipes its nodes in ``finally``; a
harness killed with SIGKILL does neither. Its faults are in the fault journal
(:mod:`nemesis.journal`), but a journal cannot cover everything (an older
harness, a journal on another machine, a DB started under another test name),
so this module also *looks*: one SSH command per host lists iptables rules,
netem qdiscs, processes (stopped ones, DB ones, fault daemons), listening ports,
the libfaketime offset, the clock itself and the DB data directories.

Every run starts with :func:`clean_start` (Jepsen's DB cycle): replay the
journal, stop and wipe whatever any earlier run of any test left, then scan
again and refuse to run (:class:`DirtyClusterError`, exit 3) unless the scan is
empty. ``splitbrain heal`` (:func:`heal_hosts`), ``lab status``
(:func:`scan_hosts`) and ``lab down`` (:func:`down_lab`) use the same parts.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from harness.control.memory import MemoryRemote
from harness.core.db import HasFootprint
from harness.core.errors import SplitbrainError
from nemesis import journal as jr
from nemesis import replay as fault_replay

if TYPE_CHECKING:
    from harness.core.remote import Host, Remote
    from harness.core.spec import RunContext
    from harness.inventory.lab import Lab

__all__ = [
    "Leftover",
    "Scope",
    "DirtyClusterError",
    "DEFAULT_SCOPE",
    "scope_for_run",
    "scan_host",
    "scan_hosts",
    "clean_host",
    "clean_start",
    "heal_hosts",
    "thaw_local",
    "wake_machines",
    "down_lab",
    "journal_db_node",
    "clear_db_node",
    "format_leftovers",
    "status_leftovers",
    "HealReport",
]

log = logging.getLogger(__name__)

DB_ROOTS = ("/var/lib/splitbrain/run", "/var/lib/splitbrain/etcd", "/var/lib/splitbrain/redis")
"""Default data roots of the DBs in harness/dbs (dledger and ha, etcd, redis)."""
DB_PORTS = (9000, 9001, 2379, 2380, 6379, 26379)
FAULT_PIDFILES = ("/tmp/splitbrain-delayer.pid", "/tmp/splitbrain-strobe.pid")
"""Daemons some faults run (the NFQUEUE delayer, the real-clock strobe)."""
FAULT_MARKERS = ("splitbrain-delayer", ".strobe.sh", "splitbrain-strobe")
CLOCK_SKEW_S = 2.0
"""A host clock further than this from ours (after one SSH round trip) is a leftover."""
MACHINE_CLOCK_SKEW_S = 1.0
"""The same for a VM's real clock, measured on its own (``date`` alone, best of three):
a guest's clock starts from its RTC, good to a second, so a tighter bound would flag
every fresh boot; smaller skews a killed harness left are in the journal."""
_MARK = "@@sb-scan"


class DirtyClusterError(SplitbrainError):
    """The hosts could not be brought to a clean state: no run may start on them."""

    exit_code = 3


@dataclass(frozen=True)
class Leftover:
    """One thing an earlier run left on a host."""

    host: str
    kind: str  # rule netem clock stopped db-process daemon port data frozen machine journal unreachable
    detail: str
    pid: int | None = None

    def __str__(self) -> str:
        return f"{self.host}: {self.kind}: {self.detail}"


@dataclass
class Scope:
    """What counts as ours on a host: DB data roots, DB ports, peer addresses."""

    roots: tuple[str, ...] = DB_ROOTS
    ports: tuple[int, ...] = DB_PORTS
    peers: tuple[str, ...] = ()

    def with_peers(self, hosts: Iterable[Host]) -> Scope:
        addrs = {str(h.extras.get("cluster_address", h.address)) for h in hosts}
        return Scope(self.roots, self.ports, tuple(sorted(addrs | set(self.peers))))


DEFAULT_SCOPE = Scope()


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


def _sudo(remote: Remote) -> bool:
    return remote.host.user != "root"


def _data_globs(host: Host, roots: Iterable[str]) -> list[str]:
    """Per-node data directories under the DB roots, as harness/dbs/daemon.py lays them out."""
    lab = host.extras.get("lab")
    from harness.core.layout import safe_name

    mid = f"{safe_name(str(lab))}/" if lab else ""
    return [f"{r}/{mid}*/{safe_name(host.name)}" for r in roots]


def _scan_script(remote: Remote, scope: Scope, pidfiles: Sequence[str]) -> str:
    from nemesis.net import iptables_cmd

    host = remote.host
    ft = host.extras.get("faketime_file")
    q = shlex.quote
    globs = " ".join(_data_globs(host, scope.roots))  # unquoted: the shell expands them
    pfs = " ".join(q(p) for p in pidfiles)
    return "; ".join(
        [
            f"echo {_MARK}ipt",
            f"{iptables_cmd(remote)} -S 2>&1",
            f"echo {_MARK}tc",
            "tc qdisc show 2>/dev/null",
            f"echo {_MARK}ps",
            "ps -eo pid=,stat=,args= 2>/dev/null",
            f"echo {_MARK}ss",
            "ss -Hltn 2>/dev/null",
            f"echo {_MARK}ft",
            f"cat {q(str(ft))} 2>/dev/null" if ft else "true",
            f"echo {_MARK}dirs",
            f'for d in {globs}; do [ -e "$d" ] && echo "$d"; done',
            f"echo {_MARK}daemons",
            f'for f in {pfs}; do p=$(cat "$f" 2>/dev/null) && [ -n "$p" ] && '
            f'kill -0 "$p" 2>/dev/null && echo "$f $p"; done',
            f"echo {_MARK}date",
            "date +%s.%N",
            "true",
        ]
    )


def _sections(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    cur = None
    for line in text.splitlines():
        if line.startswith(_MARK):
            cur = line[len(_MARK) :].strip()
            out[cur] = []
        elif cur is not None and line.strip():
            out[cur].append(line.rstrip())
    return out


def _fault_pidfiles(host: Host, journal: jr.HostJournal | None) -> list[str]:
    pfs = list(FAULT_PIDFILES)
    ft = host.extras.get("faketime_file")
    if ft:
        pfs.append(f"{ft}.strobe.pid")
    if journal is not None:
        pfs += [
            str(e.undo["pidfile"])
            for e in journal.entries()
            if e.kind == "daemon" and "pidfile" in e.undo
        ]
    return sorted(set(pfs))


def parse_scan(
    host: Host, text: str, scope: Scope, *, skew_s: float | None = None
) -> list[Leftover]:
    """Leftovers from the scan script's output (pure: tested without hosts)."""
    from nemesis.clock import parse_offset

    name = host.name
    s = _sections(text)
    out: list[Leftover] = []
    peers = set(scope.peers)
    for line in s.get("ipt", []):
        f = line.split()
        if len(f) < 2 or f[0] != "-A":
            continue
        target = f[f.index("-j") + 1] if "-j" in f and f.index("-j") + 1 < len(f) else ""
        ours = f[1].startswith("SPLITBRAIN")
        src = f[f.index("-s") + 1].split("/")[0] if "-s" in f and f.index("-s") + 1 < len(f) else ""
        if target in ("DROP", "REJECT", "NFQUEUE") and (ours or src in peers):
            out.append(Leftover(name, "rule", line))
    for line in s.get("tc", []):
        if " netem " in f" {line} ":
            out.append(Leftover(name, "netem", line))
    roots = tuple(scope.roots)
    for line in s.get("ps", []):
        f = line.split(None, 2)
        if len(f) < 3 or not f[0].isdigit() or _MARK in line:
            continue
        pid, stat, args = int(f[0]), f[1], f[2]
        if any(r + "/" in args for r in roots) and f"/{host.name}/" in args:
            out.append(Leftover(name, "db-process", f"pid {pid} [{stat}] {args[:160]}", pid))
            if stat.startswith("T"):  # a paused DB node: both stray and stopped
                out.append(Leftover(name, "stopped", f"pid {pid} [{stat}] DB process", pid))
        elif any(m in args for m in FAULT_MARKERS):
            out.append(Leftover(name, "daemon", f"pid {pid} [{stat}] {args[:160]}", pid))
        elif stat.startswith("T"):
            out.append(Leftover(name, "stopped", f"pid {pid} [{stat}] {args[:160]}", pid))
    ports = set(scope.ports)
    for line in s.get("ss", []):
        f = line.split()
        if (
            len(f) >= 4
            and f[3].rsplit(":", 1)[-1].isdigit()
            and int(f[3].rsplit(":", 1)[-1]) in ports
        ):
            out.append(Leftover(name, "port", f"{f[3]} is in use"))
    ft = s.get("ft", [])
    if host.extras.get("faketime_file") and ft:
        with contextlib.suppress(ValueError, IndexError):
            if abs(parse_offset(ft[0])) >= 0.0005:
                out.append(Leftover(name, "clock", f"faketime offset {ft[0].strip()}"))
    if skew_s is not None and abs(skew_s) > CLOCK_SKEW_S:
        out.append(Leftover(name, "clock", f"clock off by {skew_s:+.1f} s"))
    for line in s.get("dirs", []):
        out.append(Leftover(name, "data", line))
    for line in s.get("daemons", []):
        pf, _, pid_text = line.partition(" ")
        dpid = int(pid_text) if pid_text.isdigit() else None
        if not any(o.kind == "daemon" and o.pid == dpid for o in out):
            out.append(Leftover(name, "daemon", f"{pf} (pid {pid_text})", dpid))
    return out


def _frozen(host: Host) -> Leftover | None:
    cg = host.extras.get("cgroup")
    if not cg or not os.path.isdir(str(cg)):
        return None
    for fname, on in (("cgroup.freeze", "1"), ("freezer.state", "FROZEN")):
        with contextlib.suppress(OSError):
            if Path(str(cg), fname).read_text().strip() == on:
                return Leftover(host.name, "frozen", f"cgroup {cg} is frozen")
    return None


def _machine_down(host: Host) -> Leftover | None:
    """A VM guest its hypervisor holds off or paused (asked locally: SSH cannot reach it)."""
    if host.machine is None:
        return None
    try:
        state = host.machine.state()
    except Exception as e:  # noqa: BLE001 - reported as the leftover
        return Leftover(host.name, "machine", f"guest state unknown: {e}")
    return None if state == "running" else Leftover(host.name, "machine", f"guest is {state}")


def wake_machines(hosts: Iterable[Host], remotes: Mapping[str, Remote]) -> list[str]:
    """Power on or resume every VM guest that is not running (journaled or not)."""
    from nemesis.power import restore

    woken = []
    for h in hosts:
        if h.machine is not None and _machine_down(h) is not None:
            how = restore(remotes.get(h.name), h.machine)
            log.warning("%s: guest was not running: %s", h.name, how)
            woken.append(h.name)
    return woken


def thaw_local(hosts: Iterable[Host]) -> list[str]:
    """Thaw frozen hosts on this machine (journaled or not): nothing else can reach them."""
    from nemesis.process import _freeze_file

    thawed = []
    for h in hosts:
        j = jr.HostJournal(h)
        for e in j.entries():
            if e.kind == "freeze":
                with contextlib.suppress(OSError):
                    fault_replay.undo(None, e)
                    j.forget(e)
                    thawed.append(h.name)
        if _frozen(h) is not None:
            path, _on, off = _freeze_file(str(h.extras["cgroup"]))
            Path(path).write_text(off)
            thawed.append(h.name)
    return sorted(set(thawed))


def scan_host(
    remote: Remote, scope: Scope = DEFAULT_SCOPE, *, with_journal: bool = True
) -> list[Leftover]:
    """Everything an earlier run left on ``remote``'s host (one SSH command)."""
    host = remote.host
    journal = jr.HostJournal(host) if with_journal else None
    out: list[Leftover] = []
    fr = _frozen(host)
    if fr is not None:
        out.append(fr)
    if journal is not None:
        out += [Leftover(host.name, "journal", e.describe()) for e in journal.entries()]
    down = _machine_down(host)
    if down is not None:
        return [*out, down]  # nothing more to see over SSH
    t0 = time.time()
    r = remote.run(
        _scan_script(remote, scope, _fault_pidfiles(host, journal)),
        sudo=_sudo(remote),
        timeout=30,
        check=False,
    )
    t1 = time.time()
    skew = None
    date = _sections(r.stdout).get("date", [])
    if date:
        with contextlib.suppress(ValueError):
            skew = float(date[0]) - (t0 + t1) / 2 if t1 - t0 < CLOCK_SKEW_S else None
    found = parse_scan(host, r.stdout, scope, skew_s=skew)
    if host.machine is not None and not any(lo.kind == "clock" for lo in found):
        # A guest's real clock, on its own: the scan script is too slow under TCG
        # for its one date to bound anything.
        from nemesis.clock import measure_offset_ms

        with contextlib.suppress(Exception):
            off_ms, unc_ms = measure_offset_ms(remote)
            if abs(off_ms) - unc_ms > MACHINE_CLOCK_SKEW_S * 1000:
                found.append(
                    Leftover(host.name, "clock", f"real clock off by {off_ms / 1000:+.2f} s")
                )
    return out + found


def clean_host(remote: Remote, found: Sequence[Leftover], scope: Scope) -> None:
    """Remove what a scan found: rules, qdiscs, daemons, DB processes, stops, offsets, data."""
    from nemesis.net import iptables_cmd, remove_chain_script

    host = remote.host
    ipt = iptables_cmd(remote)
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
    ft = host.extras.get("faketime_file")
    if ft and any(lo.kind == "clock" for lo in found):
        cmds.append(
            f"printf '+0\\n' > {q(str(ft) + '.tmp')} && mv -f {q(str(ft) + '.tmp')} {q(str(ft))}"
        )
    dirs = [lo.detail for lo in found if lo.kind == "data"]
    if dirs:
        cmds.append("rm -rf " + " ".join(q(d) for d in dirs))
    cmds.append("true")
    remote.run("; ".join(cmds), sudo=_sudo(remote), timeout=60, check=False)
    # Pid files of stopped fault daemons (their processes are gone now).
    for lo in found:
        if lo.kind == "daemon" and lo.detail.startswith("/"):
            remote.run(
                f"rm -f {q(lo.detail.split()[0])}", sudo=_sudo(remote), timeout=30, check=False
            )
    if any(lo.kind == "clock" for lo in found) and not ft:
        from nemesis.clock import RealClock

        with contextlib.suppress(Exception):
            RealClock(remote).reset()


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
    from nemesis.base import on_nodes

    rep = HealReport()
    by = {h.name: h for h in hosts}
    journals = [jr.HostJournal(h) for h in hosts]
    rep.before = {
        h: [x for x in [_frozen(by[h]), _machine_down(by[h])] if x is not None] for h in by
    }
    for j in journals:
        rep.before[j.host.name] += [
            Leftover(j.host.name, "journal", e.describe()) for e in j.entries()
        ]
    thaw_local(hosts)
    for h, ps in fault_replay.replay(journals, remotes).items():
        rep.problems.setdefault(h, []).extend(ps)
    try:
        wake_machines(hosts, remotes)  # off or paused with no journal entry saying so
    except Exception as e:  # noqa: BLE001 - the rescan reports the guest
        rep.problems.setdefault("machines", []).append(f"cannot wake a guest: {e}")

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
            rep.before[n] += r[0]
            rep.after[n] = r[1]
    rep.problems = {h: p for h, p in rep.problems.items() if p}
    return rep


def format_leftovers(found: Mapping[str, Sequence[Leftover]]) -> list[str]:
    return [str(x) for h in sorted(found) for x in found[h]]


def clean_start(ctx: RunContext) -> HealReport:
    """Jepsen's DB cycle before setup: heal, stop and wipe every earlier run, verify.

    Raises :class:`DirtyClusterError` (exit 3) naming each host and leftover when
    the hosts cannot be made clean; on success the run's journal is attached, so
    the faults this run applies are journaled from the first one.
    """
    if all(isinstance(ctx.remotes.get(n), MemoryRemote) for n in ctx.nodes):
        # The null run of the harness bench (and runner tests) has no hosts to clean.
        log.info("clean start skipped: in-memory remotes, no hosts")
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
    jr.attach(ctx)
    return rep


def journal_db_node(ctx: RunContext, node: str) -> None:
    """Journal the DB node before setup starts it: a killed run's cluster is found by it."""
    db = ctx.db
    if not isinstance(db, HasFootprint):
        return
    jr.note(
        ctx,
        node,
        "db-node",
        "db",
        {"dir": db.node_dir(ctx, node), "root": db.root, "pidfiles": db.pidfiles(ctx, node)},
        f"{ctx.spec.db} node of test {ctx.spec.name}",
    )


def clear_db_node(ctx: RunContext, node: str) -> None:
    """The DB node was stopped and wiped by its teardown."""
    jr.clear(ctx, node, "db-node", "db")


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


def scan_hosts(
    hosts: Sequence[Host],
    *,
    connect_fn: Callable[[Host], Remote] | None = None,
    scope: Scope = DEFAULT_SCOPE,
) -> dict[str, list[Leftover]]:
    """Leftovers per host, journal entries included; changes nothing."""
    from harness.control import connect
    from nemesis.base import on_nodes

    sc = scope.with_peers(hosts)
    by = {h.name: h for h in hosts}

    def one(n: str) -> list[Leftover]:
        r = (connect_fn or connect)(by[n])
        try:
            return scan_host(r, sc)
        finally:
            with contextlib.suppress(Exception):
                r.close()

    out: dict[str, list[Leftover]] = {}
    for n, r in on_nodes(by, one).items():
        if isinstance(r, BaseException):
            fr = _frozen(by[n])
            out[n] = [fr] if fr else []
            out[n] += [
                Leftover(n, "journal", e.describe()) for e in jr.HostJournal(by[n]).entries()
            ]
            out[n].append(Leftover(n, "unreachable", str(r)))
        else:
            out[n] = r
    return out


def down_lab(lab: Lab) -> None:
    """``lab down``: remove the lab, then the DB data its runs left on this machine's disk.

    Lab hosts share this machine's file system, so data under the DB roots
    (outside the lab's state dir) would survive the namespaces; the journal,
    inside the state dir, is read first because ``down`` removes it.
    """
    dirs = {f"{r}/{lab.name}" for r in DB_ROOTS}
    with contextlib.suppress(Exception):
        for h in lab.hosts():
            for e in jr.HostJournal(h).entries():
                if e.kind == "db-node" and str(e.undo.get("dir", "")).startswith("/"):
                    dirs.add(str(e.undo["dir"]))
    lab.down()
    for d in sorted(dirs):
        if os.path.isdir(d):
            shutil.rmtree(d, ignore_errors=True)
            log.info("removed %s", d)


class _LabLike(Protocol):
    """What ``lab status`` needs of a lab, whichever driver made it."""

    name: str

    def hosts(self) -> list[Host]: ...


def status_leftovers(
    lab: _LabLike, reachable: Sequence[str], echo: Callable[[str], Any] | None = None
) -> None:
    """``lab status``: print each host's leftovers; :class:`DirtyClusterError` if any.

    Hosts that do not answer SSH are still checked for what this machine can
    see (their journal, a frozen cgroup).
    """
    import click

    out = echo or click.echo
    hosts = lab.hosts()
    found = scan_hosts([h for h in hosts if h.name in reachable])
    for h in hosts:
        if h.name not in reachable:
            fr = _frozen(h)
            found[h.name] = ([fr] if fr else []) + [
                Leftover(h.name, "journal", e.describe()) for e in jr.HostJournal(h).entries()
            ]
    lines = format_leftovers(found)
    if not lines:
        out("leftovers: none")
        return
    out(f"leftovers ({len(lines)}):")
    for line in lines:
        out(f"  {line}")
    raise DirtyClusterError(
        f"lab {lab.name!r}: {len(lines)} leftovers of earlier runs; "
        f"`splitbrain heal --lab {lab.name}` removes them"
    )
