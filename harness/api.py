"""splitbrain's public plugin API: everything a plugin for your own system imports, from here.

``from harness.api import DB, Killable, Client, Workload, Op, ...``. Names not
exported here are internal and may change without notice; names here change
only with a note in the changelog. ``docs/your-own-system.md`` is the tutorial.

Registering a plugin
--------------------
Declare factories as entry points in your package's ``pyproject.toml``::

    [project.entry-points."splitbrain.dbs"]        # --db NAME
    mydb = "my_plugin.db:make_db"                  # make_db(options: Mapping) -> DB
    [project.entry-points."splitbrain.workloads"]  # --workload NAME
    mywork = "my_plugin.work:make_workload"        # make_workload(options: Mapping) -> Workload
    [project.entry-points."splitbrain.models"]     # a checker model name
    mymodel = "my_plugin.model:make_model"         # make_model(**params) -> Model

or, without packaging, pass ``--db my_module:make_db`` / ``-w my_module:make_workload``
with the module on ``PYTHONPATH``. ``--db NAME:ARGUMENT`` hands ``ARGUMENT`` to the
factory as ``options["argument"]``. DB options come from ``--db-option k=v``;
workload options (a flat mapping, shared with the built-in knobs such as
``client_timeout``) from ``--workload-option k=v``. The built-ins are registered
the same way (see splitbrain's own ``pyproject.toml``).

What the harness guarantees
---------------------------
* **Order of a run.** Connect to every host -> ``Addressable.addresses`` is copied
  into ``ctx.addresses`` -> nemesis setup -> ``DB.setup`` on every node *in
  parallel*, once per node -> ``WaitsReady.wait_ready`` once -> the workers open
  their clients and run the load while the nemesis injects faults -> the nemesis
  heals -> final reads -> ``DB.teardown`` on every node (also after a crash,
  Ctrl-C or SIGTERM, unless ``--leave-db-running``) -> the checker.
* **Idempotency.** ``DB.setup`` must cope with leftovers of an earlier, killed
  run on the same host (stop and wipe first); ``teardown`` may be called on a
  node whose setup failed halfway and must not raise for what is already gone;
  ``kill``/``start``/``pause``/``resume`` may be called on a node already in that
  state. Everything ``Client.open`` does must leave data untouched.
* **Capabilities.** A nemesis uses a fault only if the DB has the matching
  protocol (``isinstance(db, Killable)`` and so on): implement just the methods
  your system supports, and a test simply never gets the other faults.
* **Timeouts.** A client op that raises, or runs longer than ``client_timeout``
  (10 s by default; the watchdog completes it), is recorded ``info``: it may or
  may not have happened, and the worker continues under a fresh process id
  with a freshly opened client. Return ``fail`` only when the op certainly did
  not happen. A ``Remote.run`` that times out raises ``RemoteCommandError``.
* **Errors.** Raise ``ConfigError`` for a bad option (shown as one line, exit 3);
  a factory that raises anything else, or returns the wrong type, is reported
  as one line naming the plugin.
* **Generators** run under one lock shared by all pool workers, never sleep and
  read time only from ``GenContext.time_ns``; return ``PENDING`` to be asked
  again shortly and None when exhausted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from checker.models import UNKNOWN, Fail, Model, get_model
from harness.control import connect
from harness.control.memory import MemoryRemote
from harness.core.db import (
    DB,
    Address,
    Addressable,
    HasLogFiles,
    HasPrimaries,
    Killable,
    Pausable,
    WaitsReady,
)
from harness.core.errors import (
    CheckerError,
    ConfigError,
    NemesisError,
    RemoteCommandError,
    RemoteError,
    SplitbrainError,
)
from harness.core.op import Op
from harness.core.plugins import GROUPS as ENTRY_POINT_GROUPS
from harness.core.remote import CommandResult, Host, Remote, UploadsTrees
from harness.core.spec import RunContext, TestSpec
from harness.core.workload import (
    PENDING,
    Client,
    DeclaresReads,
    ExtraWorker,
    GenContext,
    Generator,
    Workload,
)
from harness.dbs import get_db
from workloads import get_workload

__all__ = [
    # DB and its optional capabilities
    "DB", "Killable", "Pausable", "HasPrimaries", "HasLogFiles", "WaitsReady", "Addressable",
    "Address",
    # workloads
    "Client", "DeclaresReads", "Generator", "GenContext", "PENDING", "ExtraWorker", "Workload",
    # checking
    "Model", "UNKNOWN", "Fail",
    # hosts
    "Host", "CommandResult", "Remote", "UploadsTrees", "connect", "MemoryRemote",
    # the history and the run
    "Op", "RunContext", "TestSpec",
    # errors
    "SplitbrainError", "ConfigError", "RemoteError", "RemoteCommandError", "NemesisError",
    "CheckerError",
    # registries
    "ENTRY_POINT_GROUPS", "DBFactory", "WorkloadFactory", "ModelFactory", "get_db",
    "get_workload", "get_model",
]

DBFactory = Callable[[Mapping[str, Any]], DB]
"""What a ``splitbrain.dbs`` entry point names: options (``--db-option``) in, a DB out."""

WorkloadFactory = Callable[[Mapping[str, Any]], Workload]
"""What a ``splitbrain.workloads`` entry point names: the test's options in, a Workload out."""

ModelFactory = Callable[..., Model]
"""What a ``splitbrain.models`` entry point names: parameters as keywords in, a Model out."""
