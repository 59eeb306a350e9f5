"""Where the durable runtime keeps things in the store (one place, so tools agree).

``wfmeta/<id>``                    the workflow's type, code version, run number,
                                   status, arguments, carried state, parent, result
``wf/<id>/<run>/s/<n>``            step ``n`` of run ``run``: name, input, output (or error)
``wf/<id>/in/<message id>``        a message in the workflow's inbox (a wait step's
                                   log entry consumes it; deleted at continue-as-new)

Run and step numbers are zero-padded so that a ``scan`` returns them in order.
A continue-as-new bumps ``run`` in the meta record (one write: the commit
point) and the old run's steps become garbage that the next load deletes, so a
crash in the middle of cleaning up can never mix two runs.  Workflow ids may
not contain ``/``: ``wf/a/`` must not be a prefix of another workflow's keys.
"""

from __future__ import annotations


def check_id(wf_id: str) -> str:
    if not wf_id or "/" in wf_id:
        raise ValueError(f"workflow ids are non-empty and contain no '/': {wf_id!r}")
    return wf_id


def meta_key(wf_id: str) -> str:
    return f"wfmeta/{wf_id}"


META_PREFIX = "wfmeta/"


def log_prefix(wf_id: str) -> str:
    """Every key of the workflow's log and inbox."""
    return f"wf/{wf_id}/"


def run_prefix(wf_id: str, run: int) -> str:
    return f"wf/{wf_id}/{run:04d}/s/"


def step_key(wf_id: str, run: int, n: int) -> str:
    return f"wf/{wf_id}/{run:04d}/s/{n:06d}"


def inbox_prefix(wf_id: str) -> str:
    return f"wf/{wf_id}/in/"


def inbox_key(wf_id: str, message_id: str) -> str:
    return f"wf/{wf_id}/in/{message_id}"


def parse_step_key(wf_id: str, key: str) -> tuple[int, int] | None:
    """``(run, n)`` of a step key of ``wf_id``; ``None`` for any other key."""
    rest = key[len(log_prefix(wf_id)):]
    parts = rest.split("/")
    if len(parts) == 3 and parts[1] == "s" and parts[0].isdigit() and parts[2].isdigit():
        return int(parts[0]), int(parts[2])
    return None
