"""``splitbrain bench ...``: the benchmarks, apart from what they measure.

Each drives the real code (the runner, the checkers, the report) and prints JSON;
nothing in the runner, the checkers or the report imports them. One module per
command (``recording``: ``bench harness``; ``campaign``, ``soak``, ``checker`` and its
parts ``checker_*``, ``report``); the CLI's ``bench`` group loads them lazily
(``harness.cli.BENCH_COMMANDS``).
"""
