"""``splitbrain bench ...``: the benchmarks, apart from what they measure.

Each drives the real code (the runner, the checkers, the report) and prints JSON;
nothing in the runner, the checkers or the report imports them. One module per
command (``recording``: ``bench harness``; ``campaign``, ``soak``, ``checker`` and its
parts ``checker_*``, ``report``), each a plain function returning the figures; the
commands and their options are ``harness/cli/bench.py``, which imports them only when a
command runs (``recording`` still defines its own command: ``harness.cli.OUTSIDE_CLI``).
"""
