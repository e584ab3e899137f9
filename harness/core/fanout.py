"""Doing one thing on every host at once: the one fan-out every layer uses.

One thread per item, so a slow or frozen host delays but never blocks the
others, and every host is tried even when some fail: a heal that stopped at the
first unreachable host would leave the others partitioned.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["each", "each_or_raise", "map_values"]

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
T = TypeVar("T")

MAX_THREADS = 32


def each(
    items: Iterable[K], fn: Callable[[K], T], *, what: str = "fanout"
) -> dict[K, T | Exception]:
    """``fn(item)`` for every distinct item at once; each result, or the exception it raised."""
    ks = list(dict.fromkeys(items))

    def safe(k: K) -> T | Exception:
        try:
            return fn(k)
        except Exception as e:  # reported per item by the caller
            return e

    if len(ks) <= 1:
        return {k: safe(k) for k in ks}
    with ThreadPoolExecutor(max_workers=min(len(ks), MAX_THREADS), thread_name_prefix=what) as ex:
        return dict(zip(ks, ex.map(safe, ks), strict=True))


def each_or_raise(items: Iterable[K], fn: Callable[[K], T], *, what: str = "fanout") -> dict[K, T]:
    """Like :func:`each`, but once all have run, the first failure (in item order) is raised."""
    results = each(items, fn, what=what)
    failed = [(k, r) for k, r in results.items() if isinstance(r, Exception)]
    for k, e in failed:
        log.error("%s on %s failed: %s", what, k, e)
    if failed:
        raise failed[0][1]
    return {k: r for k, r in results.items() if not isinstance(r, Exception)}


def map_values(mapping: Mapping[K, V], fn: Callable[[V], T], *, what: str = "fanout") -> dict[K, T]:
    """``fn(value)`` for every entry at once, keyed as the mapping is (errors propagate)."""
    return each_or_raise(list(mapping), lambda k: fn(mapping[k]), what=what)
