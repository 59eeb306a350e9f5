"""The tickets domain agent: risky ticket operations behind confirmation cards.

``tools`` says which tools exist and which need a card; ``agent`` runs one turn
(ask the model, propose a card, or resume an approval); ``server`` is the
orchestrator process: connections, routing, surfacing cards and answers.
"""

from dst.agents.tickets.agent import TicketsAgent
from dst.agents.tickets.server import Orchestrator, serve
from dst.agents.tickets.tools import RISKY, SAFE, allowed_tools

__all__ = ["RISKY", "SAFE", "Orchestrator", "TicketsAgent", "allowed_tools", "serve"]
