"""A client in any language: an executable speaking JSON lines (``-w stdio:PROGRAM``).

For every operation the harness writes one line to the program's stdin::

    {"f": "write", "key": "k1", "value": 3, "process": 4, "node": "n2", "address": "127.81.0.12:7400"}

and reads one line back::

    {"type": "ok" | "fail" | "info", "value": ..., "error": "optional text"}

``ok`` means the op happened (``value`` is what a read saw; for writes and cas it
may be left out), ``fail`` that it certainly did not, ``info`` that nobody knows.
The program may keep a connection open across lines; it is started lazily, one
per worker, with the node and its address also in ``SPLITBRAIN_NODE`` and
``SPLITBRAIN_ADDRESS``. What the harness guarantees:

* a program that exits, closes stdout, answers nothing within ``stdio_timeout``
  seconds (5), or answers something that is not such a JSON object, ends the op
  in flight as ``info`` (it may have happened), is killed with its whole process
  group, and the next op starts a fresh program: nothing recorded is lost;
* a program that prints more than one line for an op is replaced before the
  next op is sent, so no answer meant for one op is ever taken for another;
* after any ``info`` the program is restarted too, since the runner moves the
  worker to a new process id anyway.

Operations are those of the ``register`` workload (read, write, cas on a few
independent keys; cas value ``[old, new]``, ``fail`` on mismatch), checked for
linearizability with the ``cas-register`` model; same knobs (``keys``,
``ops_per_key``, ``max_value``). The program's stderr is appended to
``stdio-client.stderr`` in the run's store directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from harness.core.errors import ConfigError
from harness.core.op import Op
from harness.core.options import as_options, declares_options, option
from harness.core.spec import RunContext
from harness.core.workload import Workload
from workloads.options import RegisterGenOptions
from workloads.register import CHECKER, register_gen

__all__ = ["StdioOptions", "StdioClient", "workload", "parse_program"]
_MAX_LINE = 1 << 20


def parse_program(text: str) -> list[str]:
    """``PROGRAM [ARGS...]`` to argv; the program must exist and be executable (ConfigError)."""
    try:
        argv = shlex.split(text)
    except ValueError as e:
        raise ConfigError(
            f"cannot parse the stdio program {text!r}: {e}", field="workload"
        ) from None
    if not argv:
        raise ConfigError(
            "the stdio workload needs a program: -w stdio:path/to/client", field="workload"
        )
    exe = argv[0]
    if os.sep in exe:
        if not os.path.isfile(exe):
            raise ConfigError(f"stdio program {exe!r}: no such file", field="workload")
        if not os.access(exe, os.X_OK):
            raise ConfigError(
                f"stdio program {exe!r} is not executable (chmod +x)", field="workload"
            )
        argv[0] = str(Path(exe).resolve())
    elif shutil.which(exe) is None:
        raise ConfigError(f"stdio program {exe!r} is not on PATH", field="workload")
    return argv


class StdioClient:
    """One worker's program: started on first use, replaced after any doubt."""

    read_fs = frozenset({"read"})

    def __init__(self, argv: list[str], timeout: float, node: str | None = None) -> None:
        self.argv = argv
        self.timeout = timeout
        self.node = node
        self.proc: subprocess.Popen[bytes] | None = None
        self._buf = b""

    def open(self, ctx: RunContext, node: str) -> StdioClient:
        return StdioClient(self.argv, self.timeout, node)  # starts nothing: open changes no data

    def setup(self, ctx: RunContext) -> None:
        pass

    def _address(self, ctx: RunContext, node: str) -> str | None:
        addr = ctx.addresses.get("client", {}).get(node)
        return f"{addr[0]}:{addr[1]}" if addr else None

    def _start(self, ctx: RunContext, node: str) -> subprocess.Popen[bytes]:
        err: IO[bytes] | int = subprocess.DEVNULL
        if ctx.store_dir:
            err = open(os.path.join(ctx.store_dir, "stdio-client.stderr"), "ab")  # noqa: SIM115
        try:
            proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,  # a killed client takes its children with it
                env={
                    **os.environ,
                    "SPLITBRAIN_NODE": node,
                    "SPLITBRAIN_ADDRESS": self._address(ctx, node) or "",
                },
            )
        finally:
            if not isinstance(err, int):
                err.close()
        self._buf = b""
        return proc

    def _kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        for stream in (proc.stdin, proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)

    def _readline(self, proc: subprocess.Popen[bytes], deadline: float) -> bytes | None:
        """One line from the program, or None at EOF; raises TimeoutError at the deadline."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buf += chunk
            if len(self._buf) > _MAX_LINE:
                raise ValueError("answer longer than 1 MiB without a newline")
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _spoke_out_of_turn(self, proc: subprocess.Popen[bytes]) -> bool:
        """Output (or EOF) waiting before an op was sent: an extra line, or a dying program."""
        if self._buf:
            return True
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout.fileno()], [], [], 0)
        return bool(ready)

    def _doubt(self, op: Op, why: str) -> Op:
        self._kill()
        return op.complete("info", op.value, error=why)

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        node = op.node or self.node or ""
        if self.proc is not None and self._spoke_out_of_turn(self.proc):
            self._kill()  # its next line would be taken for this op's answer
        if self.proc is None or self.proc.poll() is not None:
            self._kill()
            try:
                self.proc = self._start(ctx, node)
            except OSError as e:  # nothing was sent: the op certainly did not happen
                return op.complete("fail", op.value, error=f"client did not start: {e}")
        proc = self.proc
        assert proc.stdin is not None
        line = json.dumps(
            {
                "f": op.f,
                "key": op.key,
                "value": op.value,
                "process": op.process,
                "node": node,
                "address": self._address(ctx, node),
            }
        )
        try:
            proc.stdin.write(line.encode() + b"\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            # Whether the program read part of the line first is unknowable.
            return self._doubt(op, f"client crashed: {type(e).__name__}")
        try:
            raw = self._readline(proc, time.monotonic() + self.timeout)
        except TimeoutError:
            return self._doubt(op, f"timeout: client answered nothing in {self.timeout:g} s")
        except (OSError, ValueError) as e:
            return self._doubt(op, f"client output unreadable: {e}")
        if raw is None:
            code = proc.poll()
            return self._doubt(
                op, "client crashed: exited" + (f" with status {code}" if code is not None else "")
            )
        try:
            reply = json.loads(raw)
        except ValueError:
            return self._doubt(op, f"client answered garbage: {raw[:80]!r}")
        typ = reply.get("type") if isinstance(reply, dict) else None
        if typ not in ("ok", "fail", "info"):
            return self._doubt(op, f"client answered garbage: {raw[:80]!r}")
        error = reply.get("error")
        error = None if error is None else str(error)
        if typ == "ok":
            return op.complete("ok", reply.get("value", op.value))
        if typ == "fail":
            return op.complete("fail", op.value, error=error or "fail")
        return self._doubt(op, error or "info")

    def teardown(self, ctx: RunContext) -> None:
        pass

    def close(self, ctx: RunContext) -> None:
        self._kill()


@dataclass(frozen=True)
class StdioOptions(RegisterGenOptions):
    argument: str | None = option(None, "the program (what follows ``stdio:``)")
    program: str | None = option(None, "the program, when not given as ``stdio:PROGRAM``")
    stdio_timeout: float = option(
        5.0, "seconds the program may take to answer one op", minimum=0.001
    )


@declares_options(StdioOptions)
def workload(options: StdioOptions | Mapping[str, Any]) -> Workload:
    """The ``stdio`` entry point: ``-w stdio:PROGRAM`` (or ``--workload-option program=...``)."""
    opts = as_options(StdioOptions, options, role="workload stdio")
    program = opts.argument or opts.program
    if not program:
        raise ConfigError(
            "the stdio workload needs a program: -w stdio:path/to/client", field="workload"
        )
    return Workload(
        name="stdio",
        client=StdioClient(parse_program(str(program)), opts.stdio_timeout),
        generator=register_gen(opts),
        final_generator=None,
        checker=dict(CHECKER),
    )
