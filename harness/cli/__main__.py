"""``python -m harness.cli``: the same command as the ``splitbrain`` script."""

from harness.cli import main

main()
