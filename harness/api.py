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
    [project.entry-points."splitbrain.faults"]     # --nemesis NAME
    myfault = "my_plugin.fault:MY_FAULT"           # a Fault object (docs/your-own-system.md)
    [project.entry-points."splitbrain.checkers"]   # a check a workload selects by name
    mycheck = "my_plugin.check:MY_CHECK"           # a CheckerSpec object

or, without packaging, pass ``--db my_module:make_db`` / ``-w my_module:make_workload``
with the module on ``PYTHONPATH``. ``--db NAME:ARGUMENT`` hands ``ARGUMENT`` to the
factory as ``options["argument"]``. The built-ins are registered the same way (see
splitbrain's own ``pyproject.toml``).

Options
-------
DB options come from ``--db-option k=v``, workload options from ``--workload-option k=v``;
each role gets only its own (a workload never sees the DB's). Declare them as a frozen
dataclass and the harness parses and checks them before anything connects::

    @dataclass(frozen=True)
    class MyDbOptions:
        port: int = option(7500, "client port", minimum=1, maximum=65535)

    @declares_options(MyDbOptions)
    def make_db(options: MyDbOptions) -> DB: ...

An unknown key then stops the run (exit 3) with one line naming the key, the role and
the known keys, and ``"3"`` arrives as ``3``. A factory that declares nothing gets the
mapping of strings, ints, floats and bools as parsed from the command line, unknown keys
included: checking them is then the plugin's job (today's behaviour, kept). ``--db
NAME:ARGUMENT`` needs an ``argument`` field in a declared class.

What the checker must know of the DB (for instance that acked writes may be lost in a
documented window) is the DB's to declare: ``InformsChecker.checker_options()`` returns
``{checker name: {option: value}}``, merged into the workload's ``Workload.checker`` by the
harness; ``splitbrain check`` rebuilds it from ``test.json``, so it must depend on the
options only.

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
  your system supports, and a test simply never gets the other faults. A capability
  you have but cannot honour in some configuration, or a fault's way of acting your
  system was never meant to survive, is declined by what the fault does or needs, never
  by its name: ``declines = {"changes_membership": "the ensemble is static"}`` (keys:
  an ``EFFECTS`` name, a ``NEEDS`` word or a capability's class name; ``declines``).
  The deck leaves such faults out and a ``--nemesis`` run naming one exits 3 with your
  reason, a plugin's fault of the same kind included.
* **Timeouts.** One client timeout per run, ``ctx.spec.client_timeout`` (``run
  --client-timeout``, 5 s by default): use it for your client's calls (``client_timeout(ctx)``
  when the client is opened). A client op that raises is recorded ``info``, and one still
  open after twice the timeout is completed ``info`` by the runner's watchdog: it may or
  may not have happened, and the worker continues under a fresh process id with a freshly
  opened client. Return ``fail`` only when the op certainly did not happen. A
  ``Remote.run`` that times out raises ``RemoteCommandError``.
* **Footprint.** A DB that is ``HasFootprint`` (``root``, ``node_dir``, ``pidfiles``,
  ``ports``) has each node's footprint journaled before its setup, so the next run's clean
  start, ``heal`` and ``lab status`` find and stop a killed run's nodes whatever DB that
  next run uses.
* **libfaketime.** On the namespace lab every SSH session has libfaketime preloaded (clock
  faults). A DB whose processes must not run under it (a JVM) sets the class attribute
  ``runs_under_faketime = False``: the harness then strips the preload from the commands
  it runs on that DB's hosts; clock faults do not move that DB's clock.
* **Errors.** Raise ``ConfigError`` for a bad option (shown as one line, exit 3);
  a factory that raises anything else, or returns the wrong type, is reported
  as one line naming the plugin.
* **Generators** run under one lock shared by all pool workers, never sleep and
  read time only from ``GenContext.time_ns``; return ``PENDING`` to be asked
  again shortly and None when exhausted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from checker.models import UNKNOWN, Fail, Model, get_model
from harness.control import connect
from harness.control.memory import MemoryRemote
from harness.core.checker import ALL, CheckConfig, CheckerSpec, OpShape
from harness.core.db import (
    DB,
    Address,
    Addressable,
    Convergence,
    ConvergenceReport,
    Converges,
    DataFiles,
    FailsOver,
    HasDefaultWorkload,
    HasFootprint,
    HasLogFiles,
    HasPrimaries,
    HasWorkloadDefaults,
    InformsChecker,
    Killable,
    Members,
    Pausable,
    Reconfigurable,
    TransfersLeadership,
    Upgradable,
    WaitsReady,
    WorkloadChoice,
    poll_converged,
    runs_under_faketime,
)
from harness.core.errors import (
    CheckerError,
    ConfigError,
    NemesisError,
    RemoteCommandError,
    RemoteError,
    SplitbrainError,
)
from harness.core.events import NodeEvent, ReportsEvents
from harness.core.fault import (
    EFFECTS,
    NEEDS,
    Draw,
    Effects,
    Fault,
    JournalKind,
    JournalRecord,
    NemesisFactory,
    Periods,
    Residue,
    Selected,
    declines,
    no_value,
)
from harness.core.nemesis import FaultJournal, Nemesis
from harness.core.op import Op
from harness.core.options import (
    OptionDoc,
    declares_options,
    describe_options,
    option,
    parse_options,
)
from harness.core.paired import PairedHistory
from harness.core.plugins import GROUPS as ENTRY_POINT_GROUPS
from harness.core.remote import CommandResult, Host, Remote, UploadsTrees
from harness.core.spec import DEFAULT_CLIENT_TIMEOUT, RunContext, TestSpec
from harness.core.workload import (
    PENDING,
    Client,
    DeclaresReads,
    ExtraWorker,
    GenContext,
    Generator,
    Workload,
    client_timeout,
)
from harness.dbs import get_db
from harness.dbs.support import (
    address,
    host_addresses,
    kill_daemon,
    node_dir,
    port_open,
    wait_for_port,
    wait_until,
)
from workloads import get_workload
from workloads.total_queue import DrainUntilEmpty, EnqueueDequeue
from workloads.txn import (
    TransactionalDB,
    TxnAborted,
    TxnSession,
    txn_checker_options,
    txn_generator,
)

__all__ = [
    # DB and its optional capabilities
    "DB",
    "Killable",
    "Pausable",
    "HasPrimaries",
    "HasLogFiles",
    "WaitsReady",
    "Addressable",
    "Address",
    "HasFootprint",
    "Upgradable",
    "FailsOver",
    "InformsChecker",
    "HasDefaultWorkload",
    "HasWorkloadDefaults",
    "WorkloadChoice",
    "Reconfigurable",
    "TransfersLeadership",
    "Members",
    "Converges",
    "Convergence",
    "ConvergenceReport",
    "poll_converged",
    "ReportsEvents",
    "NodeEvent",
    "runs_under_faketime",
    "DataFiles",
    "declines",
    # options
    "option",
    "declares_options",
    "parse_options",
    "describe_options",
    "OptionDoc",
    # helpers a DB or client needs
    "node_dir",
    "host_addresses",
    "address",
    "port_open",
    "wait_until",
    "wait_for_port",
    "kill_daemon",
    "client_timeout",
    "DEFAULT_CLIENT_TIMEOUT",
    # workloads
    "Client",
    "DeclaresReads",
    "Generator",
    "GenContext",
    "PENDING",
    "ExtraWorker",
    "Workload",
    "EnqueueDequeue",
    "DrainUntilEmpty",
    # transactions (docs/transactions.md): a DB that runs them gets -w list-append and
    # -w rw-register; a client of your own uses the generator and the checker options
    "TransactionalDB",
    "TxnSession",
    "TxnAborted",
    "txn_generator",
    "txn_checker_options",
    # checking
    "CheckerSpec",
    "CheckConfig",
    "OpShape",
    "ALL",
    "PairedHistory",
    "Model",
    "UNKNOWN",
    "Fail",
    # faults (docs/your-own-system.md, "A fault of your own")
    "Fault",
    "Effects",
    "EFFECTS",
    "NEEDS",
    "Periods",
    "Nemesis",
    "NemesisFactory",
    "Draw",
    "no_value",
    "Selected",
    "FaultJournal",
    "JournalKind",
    "JournalRecord",
    "Residue",
    # hosts
    "Host",
    "CommandResult",
    "Remote",
    "UploadsTrees",
    "connect",
    "MemoryRemote",
    # the history and the run
    "Op",
    "RunContext",
    "TestSpec",
    # errors
    "SplitbrainError",
    "ConfigError",
    "RemoteError",
    "RemoteCommandError",
    "NemesisError",
    "CheckerError",
    # registries
    "ENTRY_POINT_GROUPS",
    "DBFactory",
    "WorkloadFactory",
    "ModelFactory",
    "get_db",
    "get_workload",
    "get_model",
]

DBFactory = Callable[[Any], DB]
"""What a ``splitbrain.dbs`` entry point names: options (``--db-option``) in, a DB out; the
options are the mapping, or an instance of the class named by ``declares_options``."""

WorkloadFactory = Callable[[Any], Workload]
"""What a ``splitbrain.workloads`` entry point names: the workload's own options in (the
mapping, or its declared class's instance), a Workload out."""

ModelFactory = Callable[..., Model]
"""What a ``splitbrain.models`` entry point names: parameters as keywords in, a Model out."""
