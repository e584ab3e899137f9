"""The one error tree of splitbrain.

Every failure a user can cause or meet is one of these, so the CLI can catch
``SplitbrainError`` once, print a one-line message and exit with a usage or
environment code instead of a traceback::

    SplitbrainError
    ├── ConfigError          bad option, inventory or nodes file   (path, line, field)
    ├── HistoryError         malformed history record              (path, line, index, field)
    ├── RemoteError          a host could not be reached over SSH  (host)
    │   └── RemoteCommandError  a command exited non-zero           (host, cmd, exit, stdout, stderr)
    ├── LabError             the local lab cannot be built or removed
    ├── NemesisError         a fault could not be applied or healed
    └── CheckerError         a checker could not run (unknown model, engine failure)
"""

from __future__ import annotations

__all__ = [
    "SplitbrainError",
    "ConfigError",
    "HistoryError",
    "RemoteError",
    "RemoteCommandError",
    "LabError",
    "NemesisError",
    "CheckerError",
]


class SplitbrainError(Exception):
    """Base of every error the CLI reports without a traceback."""

    exit_code = 3


def _where(path: object | None, line: int | None) -> str:
    if path is None:
        return ""
    return f"{path}:{line}: " if line is not None else f"{path}: "


class ConfigError(SplitbrainError):
    def __init__(
        self,
        message: str,
        *,
        path: object | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.path, self.line, self.field = path, line, field
        fld = f"field {field!r}: " if field else ""
        super().__init__(f"{_where(path, line)}{fld}{message}")


class HistoryError(SplitbrainError):
    def __init__(
        self,
        message: str,
        *,
        path: object | None = None,
        line: int | None = None,
        index: int | None = None,
        field: str | None = None,
    ) -> None:
        self.path, self.line, self.index, self.field = path, line, index, field
        parts = []
        if index is not None:
            parts.append(f"op {index}")
        if field:
            parts.append(f"field {field!r}")
        ctx = (", ".join(parts) + ": ") if parts else ""
        super().__init__(f"{_where(path, line)}{ctx}{message}")


class RemoteError(SplitbrainError):
    def __init__(self, message: str, *, host: str) -> None:
        self.host = host
        super().__init__(f"{host}: {message}")


def _tail(text: str, lines: int = 5) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


class RemoteCommandError(RemoteError):
    def __init__(
        self, *, host: str, cmd: str, exit_status: int | None, stdout: str, stderr: str
    ) -> None:
        self.cmd, self.exit_status, self.stdout, self.stderr = cmd, exit_status, stdout, stderr
        status = "timed out" if exit_status is None else f"exited {exit_status}"
        tail = _tail(stderr) or _tail(stdout)
        msg = f"command {cmd!r} {status}" + (f": {tail}" if tail else "")
        super().__init__(msg, host=host)


class LabError(SplitbrainError):
    pass


class NemesisError(SplitbrainError):
    pass


class CheckerError(SplitbrainError):
    pass
