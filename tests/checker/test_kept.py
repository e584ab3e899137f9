"""How a check keeps the frames it reads again (checker.spark.kept): as objects for a
short check, serialized for a long one, persisted on a cluster, and let go at once when
released."""

from __future__ import annotations

from typing import Any

import pytest

from checker.spark.tuning import SHORT_CHECK_ROWS

pytestmark = [pytest.mark.spark]


@pytest.fixture(scope="module")
def spark() -> Any:
    from checker.spark.session import get_session

    return get_session()


def test_short_checks_keep_rows_as_objects() -> None:
    pytest.importorskip("pyspark")
    from checker.spark.kept import kept_level

    short, long = kept_level(SHORT_CHECK_ROWS), kept_level(SHORT_CHECK_ROWS + 1)
    assert short.deserialized and short.useMemory and short.useDisk
    assert not long.deserialized and long.useMemory and long.useDisk


@pytest.mark.parametrize("rows", [1_000, SHORT_CHECK_ROWS + 1])
def test_a_kept_frame_reads_back_alike_and_is_released(spark: Any, rows: int) -> None:
    from pyspark.sql import functions as F

    from checker.spark.kept import keep, kept_level, release

    df = spark.range(0, 5_000, 1, 4).select("id", F.concat(F.lit("p"), "id").alias("payload"))
    kept = keep(df, kept_level(rows), eager=True)
    stored = spark.sparkContext._jsc.sc().getRDDStorageInfo()
    assert len(stored) == 1 and stored[0].numCachedPartitions() == 4
    assert sorted(kept.collect()) == sorted(df.collect())
    release(kept)
    assert list(spark.sparkContext._jsc.sc().getRDDStorageInfo()) == []


def test_on_a_cluster_a_kept_frame_is_persisted(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local checkpoint lost with a cluster's executor cannot be recomputed; a persisted
    frame can. The local session stands in for a cluster's master here."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from checker.spark import kept as kept_module

    monkeypatch.setattr(kept_module, "_on_local_master", lambda df: False)
    seen = Observation("n")
    df = spark.range(0, 3_000, 1, 3).observe(seen, F.count("id").alias("n"))
    kept = kept_module.keep(df, kept_module.kept_level(1_000), eager=True)
    assert kept.is_cached and seen.get == {"n": 3_000}  # eager: filled, and observed
    assert kept.count() == 3_000
    kept_module.release(kept)
    assert not kept.is_cached
    assert list(spark.sparkContext._jsc.sc().getRDDStorageInfo()) == []
