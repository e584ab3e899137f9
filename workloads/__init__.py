"""splitbrain: workloads."""
