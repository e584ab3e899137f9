"""A DB gives a workload the user named the options it needs (``HasWorkloadDefaults``):
``-w watch`` on Kafka subscribes with Kafka's client, not etcd's."""

from __future__ import annotations

from typing import Any

import pytest

from harness.core.db import HasWorkloadDefaults
from harness.core.errors import ConfigError
from harness.run.roles import workload_defaults


@pytest.mark.parametrize("db", ["etcd", "nats", "zookeeper", "kafka"])
def test_watch_takes_the_systems_own_client(db: str) -> None:
    assert workload_defaults(db, {}, "watch") == {"client": db}
    assert workload_defaults(db, {}, "register") == {}


def test_a_db_declaring_none_gives_nothing() -> None:
    assert workload_defaults("dledger", {}, "watch") == {}


class _Broken:
    def workload_defaults(self, workload: str) -> Any:
        return ["client", "x"]


def broken_db(options: Any) -> _Broken:
    return _Broken()


def test_a_db_giving_a_non_mapping_is_named() -> None:
    assert isinstance(_Broken(), HasWorkloadDefaults)
    with pytest.raises(ConfigError, match="workload_defaults"):
        workload_defaults("tests.harness.test_workload_defaults:broken_db", {}, "watch")
