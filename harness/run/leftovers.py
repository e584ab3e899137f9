"""Finding what earlier runs left on the hosts: one scan per host, parsed into leftovers.

A run that ends normally heals its faults and wipes its nodes in ``finally``; a harness
killed with SIGKILL does neither. Its faults are in the fault journal
(:mod:`nemesis.journal`), but a journal cannot cover everything (an older harness, a
journal on another machine, a DB started under another test name), so the harness also
*looks*: one SSH command per host lists iptables rules, netem qdiscs, processes (stopped
ones, DB ones, fault daemons), listening ports, the libfaketime offset, the clock itself
and the DB data directories. What only a fault can recognise (its daemons' pid files and
command lines, a frozen cgroup or a guest held off, seen from this machine) comes from
the fault's ``Residue`` (:mod:`nemesis.registry`), never from a table kept here.

This module changes nothing; :mod:`harness.run.cleanup` removes what it finds.
"""

from __future__ import annotations

import contextlib
import shlex
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.core.fault import Residue
from harness.dbs.builtin import DLedgerOptions, EtcdOptions, RedisOptions
from nemesis import journal as jr
from nemesis import registry

if TYPE_CHECKING:
    from harness.core.remote import Host, Remote

__all__ = [
    "Leftover",
    "Scope",
    "DEFAULT_SCOPE",
    "DB_ROOTS",
    "DB_PORTS",
    "residues",
    "parse_scan",
    "local_leftovers",
    "offline_leftovers",
    "scan_host",
    "scan_hosts",
    "format_leftovers",
]

_DLEDGER, _ETCD, _REDIS = DLedgerOptions(), EtcdOptions(), RedisOptions()
DB_ROOTS = (_DLEDGER.root, _ETCD.root, _REDIS.root)
"""Default data roots of the DBs in harness/dbs (dledger and ha, etcd, redis): their
options' defaults (harness/dbs/builtin.py)."""
DB_PORTS = (
    _DLEDGER.peer_port,
    _DLEDGER.client_port,
    _ETCD.client_port,
    _ETCD.peer_port,
    _REDIS.port,
    _REDIS.sentinel_port,
)
CLOCK_SKEW_S = 2.0
"""A host clock further than this from ours (after one SSH round trip) is a leftover."""
MACHINE_CLOCK_SKEW_S = 1.0
"""The same for a VM's real clock, measured on its own (``date`` alone, best of three):
a guest's clock starts from its RTC, good to a second, so a tighter bound would flag
every fresh boot; smaller skews a killed harness left are in the journal."""
_MARK = "@@sb-scan"


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


def residues() -> list[tuple[str, Residue]]:
    """Every registered fault's residue once (faults may share one), with the fault's name."""
    seen: list[tuple[str, Residue]] = []
    for f in registry.faults().values():
        if not any(r is f.residue for _, r in seen):
            seen.append((f.name, f.residue))
    return seen


def _fault_pidfiles(host: Host, journal: jr.HostJournal | None) -> list[str]:
    pfs: list[str] = []
    for _, r in residues():
        if r.pidfiles is not None:
            pfs += r.pidfiles(host)
    if journal is not None:
        pfs += [str(e.undo["pidfile"]) for e in journal.entries() if "pidfile" in e.undo]
    return sorted(set(pfs))


def _markers() -> tuple[str, ...]:
    return tuple(m for _, r in residues() for m in r.markers)


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


def parse_scan(
    host: Host, text: str, scope: Scope, *, skew_s: float | None = None
) -> list[Leftover]:
    """Leftovers from the scan script's output (pure: tested without hosts)."""
    from nemesis.clock import parse_offset

    name = host.name
    s = _sections(text)
    out: list[Leftover] = []
    peers = set(scope.peers)
    markers = _markers()
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
        elif any(m in args for m in markers):
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


def local_leftovers(host: Host) -> list[Leftover]:
    """What this machine sees of ``host`` without SSH: each fault's ``Residue.local``
    (a frozen cgroup, a guest held off or paused by its hypervisor)."""
    out = []
    for fault, r in residues():
        if r.local is None:
            continue
        try:
            detail = r.local(host)
        except Exception as e:  # noqa: BLE001 - reported as the leftover
            detail = f"cannot tell ({type(e).__name__}: {e})"
        if detail:
            out.append(Leftover(host.name, r.kind or fault, detail))
    return out


def offline_leftovers(host: Host) -> list[Leftover]:
    """A host SSH cannot reach: what this machine sees, and its journal."""
    return local_leftovers(host) + [
        Leftover(host.name, "journal", e.describe()) for e in jr.HostJournal(host).entries()
    ]


def scan_host(
    remote: Remote, scope: Scope = DEFAULT_SCOPE, *, with_journal: bool = True
) -> list[Leftover]:
    """Everything an earlier run left on ``remote``'s host (one SSH command)."""
    host = remote.host
    journal = jr.HostJournal(host) if with_journal else None
    local = local_leftovers(host)
    out: list[Leftover] = list(local)
    if journal is not None:
        out += [Leftover(host.name, "journal", e.describe()) for e in journal.entries()]
    if host.machine is not None and local:
        return out  # a guest that is off or paused: nothing more to see over SSH
    t0 = time.time()
    r = remote.run(
        _scan_script(remote, scope, _fault_pidfiles(host, journal)),
        sudo=remote.host.user != "root",
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
            out[n] = [*offline_leftovers(by[n]), Leftover(n, "unreachable", str(r))]
        else:
            out[n] = r
    return out


def format_leftovers(found: Mapping[str, Sequence[Leftover]]) -> list[str]:
    return [str(x) for h in sorted(found) for x in found[h]]
