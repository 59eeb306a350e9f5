"""The apps that run on the runtime: each domain agent is a package here.

Agents see only :mod:`dst.env` and :mod:`dst.runtime`; the simulation that
tests them lives in ``dst.sim`` and ``scenarios/``, wired by ``dst.fakes``.
"""
