"""The results store: one directory per run, written in phases (docs/architecture.md §4).

``store/<test-name>/<UTC timestamp>/`` is created before anything touches a host,
so even a run that dies while connecting leaves a record of what was attempted.
Each phase writes its own file: ``test.json`` first, ``history.jsonl`` live,
``nodes/<node>/`` after the test, then ``history.parquet`` and ``results.json``.
``store/<test-name>/latest`` is a relative symlink to the newest run, so a
store directory can be moved or copied whole.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.core.layout import HISTORY_JSONL, HISTORY_PARQUET, LATEST, RESULTS, TEST, safe_name

__all__ = ["RunStore", "SECRET_WORDS", "scrub", "utc_stamp", "latest_run", "write_atomic_json"]

SECRET_WORDS = ("password", "passphrase", "secret", "token", "private_key", "key_data")


def utc_stamp(now: _dt.datetime | None = None) -> str:
    """A sortable, filesystem-safe UTC timestamp with milliseconds."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%S.") + f"{now.microsecond // 1000:03d}Z"


def scrub(obj: Any) -> Any:
    """Drop values whose key looks like a secret, recursively.

    ``test.json`` is meant to be shared along with a bug report, so passwords or
    key material given as options must not end up in it.
    """
    if isinstance(obj, Mapping):
        out = {}
        for k, v in obj.items():
            if any(w in str(k).lower() for w in SECRET_WORDS):
                out[k] = "<redacted>"
            else:
                out[k] = scrub(v)
        return out
    if isinstance(obj, (list, tuple)):
        return [scrub(v) for v in obj]
    return obj


def latest_run(root: str | os.PathLike[str], test_name: str) -> Path | None:
    link = Path(root) / safe_name(test_name) / LATEST
    return link.resolve() if link.exists() else None


def write_atomic_json(target: Path, obj: Any) -> None:
    """Write JSON beside ``target``, fsync it, rename it over ``target``, fsync the directory.

    A crash or a SIGKILL at any point leaves ``target`` as it was or whole; a full or
    read-only file system raises ``OSError`` and leaves ``target`` as it was, with no
    temporary file behind.
    """
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(obj, fh, indent=2, sort_keys=True, default=str)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    with contextlib.suppress(OSError):
        fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class _StoreLogHandler(logging.FileHandler):
    """``splitbrain.log``; when its file system refuses a write, one line on stderr
    naming the file, then silence (not a traceback per log record)."""

    failed = False

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        if self.failed:
            return
        self.failed = True
        e = sys.exc_info()[1]
        why = (e.strerror if isinstance(e, OSError) else None) or str(e)
        sys.stderr.write(f"splitbrain: cannot write {self.baseFilename} ({why}); log lost\n")

    def emit(self, record: logging.LogRecord) -> None:
        if not self.failed:
            super().emit(record)

    def close(self) -> None:
        try:
            super().close()
        except OSError:  # the last flush on a full disk: already said, or said now
            self.handleError(logging.makeLogRecord({}))


_OUR_PACKAGES = ("harness", "nemesis", "workloads", "checker", "node_impl")


def _ours_or_info(record: logging.LogRecord) -> bool:
    """Debug detail from splitbrain's own packages; INFO and up from libraries."""
    return record.levelno >= logging.INFO or record.name.split(".", 1)[0] in _OUR_PACKAGES


class RunStore:
    """The directory of one run, and the only code that knows its layout."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, root: str | os.PathLike[str], test_name: str) -> RunStore:
        base = Path(root) / safe_name(test_name)
        base.mkdir(parents=True, exist_ok=True)
        stamp = utc_stamp()
        path = base / stamp
        n = 1
        while True:
            try:
                path.mkdir()
                break
            except FileExistsError:
                n += 1
                path = base / f"{stamp}-{n}"
        (path / "nodes").mkdir()
        store = cls(path)
        store._point_latest()
        return store

    def _point_latest(self) -> None:
        link = self.path.parent / LATEST
        tmp = self.path.parent / f".latest.{os.getpid()}"
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        os.symlink(self.path.name, tmp)
        os.replace(tmp, link)  # atomic: readers never see a missing link

    # paths ---------------------------------------------------------------
    @property
    def history_path(self) -> Path:
        return self.path / HISTORY_JSONL

    @property
    def parquet_path(self) -> Path:
        return self.path / HISTORY_PARQUET

    @property
    def log_path(self) -> Path:
        return self.path / "splitbrain.log"

    @property
    def results_path(self) -> Path:
        return self.path / RESULTS

    def node_dir(self, node: str) -> Path:
        d = self.path / "nodes" / safe_name(node)
        d.mkdir(parents=True, exist_ok=True)
        return d

    # phases --------------------------------------------------------------
    def write_json(self, name: str, obj: Any) -> Path:
        """Write atomically, so a crash never leaves half a JSON file."""
        target = self.path / name
        write_atomic_json(target, obj)
        return target

    def write_test(self, spec: Mapping[str, Any]) -> Path:
        return self.write_json(TEST, scrub(spec))

    def write_results(self, results: Mapping[str, Any]) -> Path:
        return self.write_json(RESULTS, results)

    def write_parquet(self) -> int:
        """Convert the live JSONL history to Parquet; returns the number of ops.

        Streams records straight into the columns (no ``Op`` per record), so a
        long run's history is converted in bounded memory and about twice as fast.
        """
        from harness.core.history import jsonl_to_parquet

        if not self.history_path.exists():
            return 0
        tmp = self.parquet_path.with_name(".history.parquet.tmp")
        try:
            n = jsonl_to_parquet(self.history_path, tmp)
            os.replace(tmp, self.parquet_path)
        except BaseException:
            with contextlib.suppress(OSError):  # a full disk keeps no half-written Parquet
                tmp.unlink()
            raise
        return n

    @contextmanager
    def capture_log(self, level: int = logging.DEBUG) -> Iterator[Path]:
        """Send the harness's logging to ``splitbrain.log`` for the life of the run.

        The root logger's level is lowered for the duration (and restored), so the
        file gets the full story even when the console shows only warnings.
        """
        handler = _StoreLogHandler(self.log_path, encoding="utf-8")
        handler.setLevel(level)
        handler.addFilter(_ours_or_info)
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s")
        )
        root = logging.getLogger()
        old_level = root.level
        # Console handlers installed by the CLI keep the threshold they had.
        pinned = [h for h in root.handlers if h.level == logging.NOTSET]
        for h in pinned:
            h.setLevel(old_level if old_level != logging.NOTSET else logging.WARNING)
        root.addHandler(handler)
        root.setLevel(min(level, old_level) if old_level else level)
        try:
            yield self.log_path
        finally:
            root.removeHandler(handler)
            root.setLevel(old_level)
            for h in pinned:
                h.setLevel(logging.NOTSET)
            handler.close()
