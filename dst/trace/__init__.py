"""Traces: the record of one run, its JSON Lines codec, hashing, replay and renderers."""
