"""The simulated world of the Stock Replenisher: fakes, courier, decider and shared checks."""

from .kit import Kit, build
from .world import DAY, World, WorldConfig

__all__ = ["DAY", "Kit", "World", "WorldConfig", "build"]
