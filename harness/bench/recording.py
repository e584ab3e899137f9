"""``splitbrain bench harness``: how many ops/s the runner can record.

Two runs through the real runner (workers, pacing off, validation wrappers,
live JSONL history, store): one against the lab with the reference node, one
with a null client that answers ``ok`` at once and a DB that does nothing. The
null run is the harness's own ceiling; the ratio says how much of a real run's
throughput is the node's and how much is ours.
"""

from __future__ import annotations

import json
import tempfile
import time
from typing import Any

import click

from harness.cli import options
from harness.control.memory import MemoryRemote
from harness.core.layout import HISTORY_JSONL
from harness.core.remote import Host
from harness.dbs.null import NullDB
from workloads.null import CountingGenerator, NullClient

__all__ = ["bench_harness", "measure"]

TARGET_NULL_OPS = 5000.0


def measure(
    hosts: list[Host],
    *,
    null: bool,
    seconds: float,
    concurrency: int,
    store_root: str,
    workload_name: str = "append",
    client_timeout: float | None = 10.0,
) -> dict[str, Any]:
    """One run; ops/s counts client completions recorded during the load phase."""
    from harness.core.history import read_jsonl
    from harness.core.spec import TestSpec
    from harness.core.workload import Workload
    from harness.run.runner import RunOptions, run_test

    spec = TestSpec(
        name="bench-null" if null else "bench-node",
        nodes=tuple(h.name for h in hosts),
        workload=workload_name,
        time_limit=seconds,
        concurrency=concurrency,
        rate=0.0,
        seed=1,
    )
    opts = RunOptions(check=False, progress=False, recovery_s=0.0, client_timeout=client_timeout)
    if null:
        wl = Workload(name="null", client=NullClient(), generator=CountingGenerator())
        res = run_test(
            spec,
            hosts,
            store_root=store_root,
            db=NullDB(),
            workload=wl,
            options=opts,
            connect_fn=MemoryRemote,
        )
    else:
        from workloads import get_workload

        real = get_workload(workload_name, {})
        wl = Workload(name=real.name, client=real.client, generator=real.generator)
        res = run_test(spec, hosts, store_root=store_root, workload=wl, options=opts)
    if res.interrupted:
        raise click.ClickException(f"bench run failed: {res.reason}")
    ops = read_jsonl(res.store_dir / HISTORY_JSONL)
    done = [op for op in ops if op.is_client and op.type != "invoke"]
    if not done:
        return {"ops": 0, "seconds": 0.0, "ops_per_s": 0.0}
    first = min(op.time for op in ops if op.is_client)
    span = (max(op.time for op in done) - first) / 1e9
    by_type = {t: sum(1 for op in done if op.type == t) for t in ("ok", "fail", "info")}
    return {
        "ops": len(done),
        "seconds": round(span, 3),
        "ops_per_s": round(len(done) / span, 1) if span > 0 else 0.0,
        "ok_per_s": round(by_type["ok"] / span, 1) if span > 0 else 0.0,
        **by_type,
        "history_lines": len(ops),
    }


@click.command(name="harness")
@click.option(
    "--seconds",
    type=click.FloatRange(min=1),
    default=10.0,
    show_default=True,
    help="Load phase per run.",
)
@click.option("--concurrency", "-c", type=click.IntRange(min=1), default=10, show_default=True)
@options.lab(help="Lab for the real-node run.")
@click.option("--skip-node", is_flag=True, help="Only the null-client run (no lab needed).")
@options.store(default=None, help="Keep the runs here (default: temp).")
def bench_harness(
    seconds: float, concurrency: int, lab: str, skip_node: bool, store_root: str | None
) -> None:
    """Ops/s the harness records with a null client and against the reference node."""
    with tempfile.TemporaryDirectory(prefix="sb-bench-") as tmp:
        root = store_root or tmp
        fake_hosts = [Host(name=f"n{i}", address=f"127.0.0.{i}") for i in range(1, 6)]
        t0 = time.monotonic()
        null = measure(
            fake_hosts, null=True, seconds=seconds, concurrency=concurrency, store_root=root
        )
        out: dict[str, Any] = {
            "benchmark": "harness",
            "concurrency": concurrency,
            "load_seconds": seconds,
            "null_client": null,
        }
        if not skip_node:
            from harness.inventory.resolve import resolve_hosts

            hosts = resolve_hosts(
                lab=lab, nodes_file=None, vagrant=None, docker=False, insecure=False
            )
            node = measure(
                hosts, null=False, seconds=seconds, concurrency=concurrency, store_root=root
            )
            out["reference_node"] = node
            if node["ops_per_s"]:
                out["null_over_node_ratio"] = round(null["ops_per_s"] / node["ops_per_s"], 2)
        out["target_null_ops_per_s"] = TARGET_NULL_OPS
        out["meets_target"] = null["ops_per_s"] >= TARGET_NULL_OPS
        out["wall_seconds"] = round(time.monotonic() - t0, 1)
    click.echo(json.dumps(out, indent=2))
