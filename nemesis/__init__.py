"""splitbrain: nemesis."""
