"""Scenarios and tests of the simulated network beneath trio's sockets (dst.sim.sockets)."""
