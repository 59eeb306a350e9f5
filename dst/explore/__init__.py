"""Exploring beyond the seeded random walk: strategies and tools that work on decisions.

``follow.Follow`` replays recorded choices leniently (where they still apply);
``shrink.shrink`` turns a failing trace into the shortest failing story it can find.
"""
