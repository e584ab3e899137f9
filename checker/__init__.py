"""splitbrain: checker."""
