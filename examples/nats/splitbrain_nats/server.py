"""Where the servers are: the built-in DB ``nats`` (``harness/dbs/nats.py``) runs them.

The plugin once carried its own DB; since splitbrain builds any served nats-server
release itself (``--db nats --db-option version=X``), the servers are splitbrain's and
this plugin is the workload for them. What the workload needs of the servers is their
layout (a node's directory, where its JetStream store lies) and the monitoring
endpoint, both given by the built-in DB's module.
"""

from __future__ import annotations

from harness.dbs.nats import jsz, node_dir

__all__ = ["jsz", "node_dir"]
