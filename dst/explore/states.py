"""State keys: a digest of everything that decides what can happen next.

The explorer names the state it is in by a 128-bit digest, to count distinct
states and, with state caching, to skip one it has explored before.  A key is
made of up to three parts:

* the kernel's: the enabled options, virtual time, fault budgets, crashed
  processes, each store's contents, the messages in flight and in mailboxes,
  the next message id, each process's incarnation and state, and where
  libraries' draws of entropy have got to (``dst.sim.outside``);
* the scenario's fingerprint of its world (``@scenario.fingerprint``): a JSON
  value for an abstraction, any objects, read in full, for an exact one;
* for state caching, every process's memory (:func:`process_memory`: its
  tasks' frames as :mod:`dst.explore.memory` reads them, with the objects the
  fingerprint names standing for themselves by number), the fake services'
  handlers and what they hold, and how many steps each task has taken (which
  tells apart two turns of a loop whose variables do not change).

Without the memory the key is what the fingerprint says: good for counting
states, not for skipping them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Mapping
from typing import Any

import trio.lowlevel as ll

from ..errors import ScenarioError
from ..sim.findings import defined_at
from ..sim.kernel import Sim
from ..sim.outside import state as outside_state
from .memory import Reads, shared_objects, tasks_memory, write

__all__ = ["kernel_state", "process_memory", "shared_objects", "state_key", "task_labels"]


def kernel_state(sim: Sim, labels: tuple[str, ...]) -> tuple[Any, ...]:
    """The kernel's part of a state (see the module docstring)."""
    net = sim.net
    return (
        labels, sim.now,
        (sim.crashes_left, sim.drops_left, sim.dups_left, sim.preemptions_left,
         getattr(sim, "slow_left", 0), outside_state(sim),
         sim.partitions_left, sim.cut_off, tuple(sorted(sim.crashed)), sim.calm_at,
         tuple(name for name, _, _ in getattr(sim, "_pending", ())),
         repr(getattr(sim, "_service_faults", None)), repr(getattr(sim, "_process_crashes", None)),
         repr(getattr(sim, "_link_drops", None)), repr(getattr(sim, "_link_dups", None))),
        tuple((name, tuple(sorted(store.data.items())))
              for name, store in sorted(sim.stores.items())),
        tuple((m.id, m.source, m.dest, m.body) for m in net.in_flight.values()),
        getattr(net, "_next", None),
        tuple((name, p.state, p.incarnation, tuple((m.source, _text(m.body)) for m in p.mailbox))
              for name, p in sorted(sim.processes.items())),
    )


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)


def task_labels(sim: Sim) -> Callable[[ll.Task], str]:
    """How the kernel labels a task of ``sim`` (its trio name, for one it did not label)."""
    labels: dict[ll.Task, str] = getattr(sim, "_task_labels", {})
    return lambda task: labels.get(task) or task.name


def process_memory(sim: Sim, changed: Collection[str] | None = None,
                   known: Mapping[str, bytes] | None = None,
                   shared: Mapping[int, int] | None = None,
                   reads: Reads | None = None) -> dict[str, bytes]:
    """A digest of each process's memory: its incarnation's tasks, their frames and what
    those reach (an object of ``shared``, from :func:`shared_objects`, by its number).

    Only the processes in ``changed`` (every one, if None) are read again; the
    others keep their digest in ``known``.  A process whose code did not run
    cannot have changed what only it holds, and what it shares with other
    processes or the fakes is the exact fingerprint's to name (it is read at
    every state, and stands for itself by number in each process's memory).
    Raises :class:`dst.explore.memory.Unreadable`.
    """
    label = task_labels(sim)
    out: dict[str, bytes] = {}
    for name, proc in sim.processes.items():
        if changed is not None and known is not None and name not in changed \
                and name in known:
            out[name] = known[name]
            continue
        tasks = sorted(((label(task), task) for task in proc.live.tasks), key=_first)
        out[name] = hashlib.blake2b(tasks_memory(tasks, label, shared, reads),
                                    digest_size=16).digest()
    return out


def _first(pair: tuple[str, Any]) -> str:
    return pair[0]


def state_key(sim: Sim, world: Any, fingerprint: Callable[[Any], Any] | None,
              labels: tuple[str, ...], scenario: str, *,
              processes: Mapping[str, bytes] | None = None,
              steps: Mapping[str, int] | None = None, exact: bool = False,
              value: Any = None, reads: Reads | None = None) -> bytes:
    """The digest of the state ``sim`` is in (see the module docstring).

    With ``processes`` (from :func:`process_memory`) the key holds every task's
    memory, the fingerprint's objects read in full and the fake services'
    handlers: a key for state caching.  Raises
    :class:`dst.explore.memory.Unreadable` when an object cannot be read.  Without
    it, an ``exact`` fingerprint's objects are read in full, any other
    fingerprint must return JSON values.  ``value`` is the fingerprint's, when
    the caller took it already.
    """
    kernel = kernel_state(sim, labels)
    if value is None and fingerprint is not None:
        value = fingerprint(world)
    if processes is not None:
        roots = (value, tuple(sorted(sim.services.items())))
        digest = hashlib.blake2b(write(roots, task_labels(sim), reads=reads), digest_size=16)
        digest.update(repr((kernel, sorted(processes.items()),
                            sorted((steps or {}).items()))).encode("utf-8", "surrogatepass"))
        return digest.digest()
    if exact:
        digest = hashlib.blake2b(write(value, task_labels(sim)), digest_size=16)
        digest.update(repr(kernel).encode("utf-8", "surrogatepass"))
        return digest.digest()
    try:
        world_text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=_encode)
    except (TypeError, ValueError) as exc:
        raise ScenarioError(
            f"the fingerprint of {scenario}{defined_at(fingerprint)} returned a value with no "
            f"stable text ({exc}); "
            "return JSON values, tuples, frozensets, strings and numbers") from None
    text = repr((kernel, world_text))
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _encode(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(json.dumps(v, sort_keys=True, default=_encode) for v in value)
    raise TypeError(f"{type(value).__name__} is not JSON")
