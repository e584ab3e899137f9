"""Mutation testing of the default campaign (``splitbrain mutants``, docs/zoo.md).

One concept per module: ``mutator`` (source -> mutants, pure), ``selection`` (which
node functions are mutated and why), ``plan`` (the zoo campaign's specs for a
mutant, and the sample), ``tree`` (a mutant as a node package on disk),
``stages`` (the filters: unit tests, fault-free run, campaign), ``record`` (a
mutant's stages and outcome), ``ledger`` (results appended as they come),
``runner`` (the loop), ``score`` (score, table, survivors).
"""
