"""splitbrain workloads: clients and generators for the reference node.

``get_workload(name, spec.workload_options)`` returns a :class:`~harness.core.workload.Workload`.
Names are entry points of the group ``splitbrain.workloads`` (declared in
``pyproject.toml`` like any plugin's; :mod:`harness.core.plugins`): ``append``,
``register``, ``set``, ``mixed`` (append + register), ``sampler-only``, ``null``,
the etcd and Redis ones, and ``stdio:PROGRAM`` (a client in any language,
:mod:`workloads.stdio`).

How the runner drives a Workload
--------------------------------
1. **Pool workers.** ``spec.concurrency`` workers; worker w is bound to node
   ``nodes[w % len(nodes)]`` and opens ``workload.client.open(ctx, node)``. Its
   process ids are w, w + concurrency, w + 2*concurrency, ... (next one after
   each ``info``). Each asks ``generator.op(GenContext(time_ns=history.now(),
   process, worker=w, node, rng, nodes))`` under one lock shared by all pool
   workers (generators are shared, mutable state machines), records the op,
   calls ``client.invoke(ctx, op)``, records the completion and calls
   ``generator.update(gen_ctx, completion)`` under the same lock.
   ``PENDING`` -> ask again a few ms later; None -> that worker is done.
   Pacing to ``spec.rate`` and the time limit are the runner's (wrap the
   generator in ``generator.time_limit``, or stop asking).
2. **Extra workers** (``workload.extra_workers(nodes)``, may be None): the
   per-node status samplers. Each :class:`~harness.core.workload.ExtraWorker` is
   one more worker driven the same way, with its own generator and client
   (``ew.client.open(ctx, ew.node)``), processes ``process_base + k *
   process_stride`` (1_000_000 + i + k*1000 for the sampler of node i), no
   rate pacing (the generator throttles itself: poll it on PENDING) and no
   shared lock. They run alongside all client phases (warm-up, faults, heal,
   recovery) and are stopped when the final reads begin.
3. **Final reads.** After the nemesis healed and the recovery phase, run
   ``workload.final_generator`` (may be None) through the pool workers until
   it returns None for every worker. Final ops name their target node in
   ``op.node``; the client sends them there, not to its bound node.
4. ``workload.checker`` tells the checker what to run (harness/run/roles.py merges it
   with the DB's declaration): ``model`` (a linearizability model name, or None),
   ``model_params``, ``keys`` (check each key alone), and ``checks`` (names of registered
   checkers: ``linearizable``, ``log-safety``, ``queue``, ``total-queue``, ``set``; the status
   samples feed ``log-safety``).

Options: each built-in declares a frozen dataclass (``AppendOptions``, ``RegisterOptions``,
``MixedOptions``, ``SetOptions``, ``QueueOptions``, ``EtcdOptions``, ``StdioOptions``; shared
pieces in :mod:`workloads.options`), parsed from ``--workload-option`` before anything
connects (listed by :func:`harness.core.options.describe_options`). The workload never sees the DB's options nor
the run's: the client timeout is ``TestSpec.client_timeout`` (``--client-timeout``), read by
each client when it is opened; ``client_port`` see :mod:`workloads.addr`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.core import plugins
from harness.core.options import typed_options
from harness.core.workload import Workload

__all__ = ["get_workload", "workload_names"]


def workload_names() -> list[str]:
    """Every workload name available now (built-ins and installed plugins)."""
    return plugins.names("workload")


def get_workload(name: str, options: Mapping[str, Any] | None = None) -> Workload:
    """The workload called ``name`` (or ``NAME:ARGUMENT``, or ``module:factory``), configured
    from ``options`` (spec.options); a broken or unknown one is a one-line ConfigError."""
    opts = dict(options or {})

    def call(factory: Any, argument: str | None) -> Any:
        raw = plugins.with_argument(opts, argument)
        return factory(typed_options(factory, raw, f"workload {name}"))

    wl: Workload = plugins.build("workload", name, call, Workload)
    return wl
