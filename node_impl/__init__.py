"""splitbrain: node_impl."""
