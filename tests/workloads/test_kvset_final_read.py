"""The kv set's final read against a real cluster in read mode ``log``.

Seeds 7301 and 7304 of the default campaign (read mode ``log``) ended UNKNOWN: each of
the five final set reads asked for ~600 elements a key at a time, each key a commit,
and none finished within the final read's 30 s. The read now names many keys a request;
these tests count what it costs the log, which does not depend on the machine's load.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from harness.core.history import Op
from tests.node_impl.cluster_helpers import running_cluster
from workloads.kvset import READ_KEYS_CHUNK, element_key
from workloads.mixed import MixedClient

from .conftest import make_ctx

N = 600


def _read(node: str, n: int) -> Op:
    return Op(type="invoke", process=0, f="read", value=n, node=node)


@pytest.mark.integration
def test_a_final_set_read_in_read_mode_log_costs_a_few_entries_not_one_per_element(
    tmp_path,
) -> None:
    with running_cluster(tmp_path / "c", 3, extra_args=("--read-mode", "log")) as c:
        leader = c.wait_for_leader(15)
        follower = next(n for n in c.nodes if n != leader)
        with c.client(leader, timeout=5.0) as cl:
            for e in range(N):
                if e % 7 == 3:
                    continue  # never added: the read must say so
                assert cl.kv_write(element_key(e), e)["code"] == "SUCCESS"
            end_before = cl.status()["ledgerEndIndex"]
        ctx = make_ctx(tmp_path, {n: c.client_addr(n) for n in c.nodes})
        client = MixedClient().open(ctx, follower)
        try:
            done = client.invoke(ctx, _read(follower, N))
        finally:
            client.close(ctx)
            ctx.history.close()
        with c.client(leader) as cl:
            end_after = cl.status()["ledgerEndIndex"]
    assert done.type == "ok", done
    assert done.node == leader  # the follower redirected each request
    assert done.value == [e for e in range(N) if e % 7 != 3]
    # One read entry per chunk of keys; a key at a time was N entries.
    assert end_after - end_before == math.ceil(N / READ_KEYS_CHUNK)


class _OneKeyAtATime:
    """A DB gateway that knows only ``kv-read`` of one ``key`` (as jraft's and
    ZooKeeper's do): ``keys`` is UNSUPPORTED. Pure protocol logic, no network."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.single_reads = 0

    def kv_read_keys(self, keys: list[str]) -> dict:
        return {"type": "kv-read-resp", "code": "UNSUPPORTED", "error": "'key' must be a string"}

    def kv_read(self, key: str) -> dict:
        self.single_reads += 1
        return {"code": "SUCCESS", "found": key in self.data, "value": self.data.get(key)}

    def close(self) -> None:
        pass


def test_a_db_that_does_not_take_keys_is_read_a_key_at_a_time(tmp_path) -> None:
    gateway = _OneKeyAtATime({element_key(e): e for e in (0, 2, 3)})
    ctx = make_ctx(tmp_path, {"n1": ("127.0.0.1", 1)})
    client = MixedClient(connector=lambda host, port, timeout: gateway).open(ctx, "n1")
    try:
        done = client.invoke(ctx, _read("n1", 5))
    finally:
        client.close(ctx)
        ctx.history.close()
    assert (done.type, done.value) == ("ok", [0, 2, 3])
    assert gateway.single_reads == 5
