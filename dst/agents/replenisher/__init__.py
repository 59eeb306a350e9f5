"""The Stock Replenisher: a ``SkuAgent`` entity per SKU and a ``Replenish`` process per order."""

from .app import entity_id, run_replenisher, workflow_types
from .options import MAX_CHASES, MAX_TURNS, Options
from .tools import TOOLS, new_state

__all__ = ["MAX_CHASES", "MAX_TURNS", "TOOLS", "Options", "entity_id", "new_state",
           "run_replenisher", "workflow_types"]
