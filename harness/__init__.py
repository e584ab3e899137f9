"""splitbrain's harness: control of hosts, the lab, campaigns, the results store.

Kept import-light on purpose: the checker imports ``harness.core.history`` and must not
pull in paramiko or pyspark through this package.
"""

__version__ = "0.1.0"
