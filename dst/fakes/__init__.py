"""The simulated world around the code under test: fake backends, users and LLMs.

Fakes are registered on a :class:`~dst.sim.kernel.Sim` (as services or
processes) and make every data choice through ``sim.choose``, so what the world
did is in the trace and replays exactly.
"""
