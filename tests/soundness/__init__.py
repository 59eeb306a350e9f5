"""Soundness: each test pins one way a run could hang, leak, lie or lose determinism."""
