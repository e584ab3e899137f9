"""The options the built-in workloads share, as frozen dataclasses (harness.core.options).

Each workload's own options class (``AppendOptions`` in workloads/append.py, ...) is built
from these pieces, so a knob that several workloads understand has one name, one default
and one documentation. The harness parses ``--workload-option`` against the workload's
class before anything connects: a misspelt key stops the run with the known keys listed.

The client timeout is not here: it is the run's (``--client-timeout``,
``TestSpec.client_timeout``), read by each client when it is opened.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.core.options import option

__all__ = ["SampleOptions", "SamplerOptions", "LogOptions", "RegisterGenOptions", "NoOptions"]

DEFAULT_CHUNK = 1000


@dataclass(frozen=True)
class NoOptions:
    """A workload with no knobs: any ``--workload-option`` is a mistake."""


@dataclass(frozen=True)
class SampleOptions:
    sample_rate: float = option(10.0, "status samples per node per second", minimum=0.001)
    sample_timeout: float = option(
        1.0,
        "seconds one status sample may take (short: a down node shows as an info at once)",
        minimum=0.001,
    )


@dataclass(frozen=True)
class SamplerOptions(SampleOptions):
    sampler: bool = option(
        True, "run one status sampler per node beside the clients (feeds log-safety)"
    )


@dataclass(frozen=True)
class LogOptions:
    read_chunk: int = option(DEFAULT_CHUNK, "most log entries one read asks for", minimum=1)
    read_fraction: float = option(
        0.1, "share of log ops that are reads (the rest append)", minimum=0.0, maximum=1.0
    )


@dataclass(frozen=True)
class RegisterGenOptions:
    keys: int = option(3, "registers written at once", minimum=1)
    ops_per_key: int = option(200, "ops on a key before it is retired for a fresh one", minimum=1)
    max_value: int = option(5, "values written are 1..max_value", minimum=1)
    retired_reads: float = option(
        0.0, "share of reads sent to retired keys (still readable)", minimum=0.0, maximum=0.99
    )
