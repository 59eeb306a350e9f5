"""dst: deterministic simulation testing for AI-agent runtimes on trio.

The public API is small: a :class:`Scenario` declares switches, planted bugs,
a setup and checks; its setup builds the system on a :class:`Sim`; the code
under test sees only an :class:`Env`.
"""

__version__ = "0.1.0"

from .coverage import sometimes as sometimes
from .env import Env as Env
from .env import Json as Json
from .env import Message as Message
from .env import ServiceUnavailable as ServiceUnavailable
from .errors import DstError as DstError
from .errors import NondeterminismError as NondeterminismError
from .scenario import Scenario as Scenario
from .sim.faults import FaultPlan as FaultPlan
from .sim.faults import ServiceFaults as ServiceFaults
from .sim.kernel import Sim as Sim
