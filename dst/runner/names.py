"""Names that say what made them: a kept trace's file name, and a resumable run's identity.

A trace of a failing seed is written as ``<name>[-<config>][-<strategy>]-<seed>.jsonl``:

- ``name`` is the scenario's name, or for a ``@dst.test`` its module and name
  (``test_bank.test_x``), as pytest names it: two files may each hold a
  ``test_x``, and one directory must not hold both under one name;
- ``config`` appears only when the config is not the scenario's default: the
  switches that differ, ``cas=false-workers=3``, or, when a value holds a
  character a file name should not (or the tag is long), ``cfg`` and a short
  digest of them;
- ``strategy`` appears only when it is not ``random`` (``pct.d=5``);
- and when ``dst run``'s ``--out`` keeps traces under that name for a scenario of
  another file (two ``sw.py`` whose scenarios are both ``sw``), ``f`` and a short
  digest of this one's file follow (:func:`unclaimed_stem`).

So the default run of a scenario file keeps the name it always had
(``bank-57.jsonl``), and two runs of one directory that differ in what they ran
never write one file.

A resumable run (``dst run --resume``) is identified by its *run key*
(:func:`dst.runner.results.run_key`); :func:`identity` is what the key holds
beyond the scenario's name, config and strategy: where the scenario was loaded
from, a digest of that file's source, its fault plan and step bound.  A seed
done under another file, other code or another plan is not the same run, and
is never counted as done.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..scenario import Scenario

#: The strategy a trace name leaves out (the default of ``dst run`` and ``check_seeds``).
DEFAULT_STRATEGY = "random"
#: One switch as a file name shows it: a plain name, a value without ``=``, ``/`` or blanks.
_PART = re.compile(r"[A-Za-z0-9_]+=[A-Za-z0-9_.+-]+")
#: A config tag longer than this becomes a digest: a file name stays readable.
_MAX_TAG = 60
#: Hex digits of a digest in a name or a key: enough to tell configs apart, short to read.
_DIGEST = 10


def _digest(data: str | bytes, digits: int = _DIGEST) -> str:
    """The first ``digits`` hex digits of ``data``'s SHA-256: the same on every machine."""
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()[:digits]


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def config_tag(scenario: Scenario, config: Mapping[str, Any]) -> str:
    """The switches of ``config`` that differ from ``scenario``'s defaults, as a file
    name shows them (``cas=false-workers=3``); empty for the default config."""
    defaults = scenario.default_config()
    order = [*scenario.switches, *sorted(set(config) - set(scenario.switches))]
    changed = [(k, config[k]) for k in order if k in config and not (
        k in defaults and type(config[k]) is type(defaults[k]) and config[k] == defaults[k])]
    if not changed:
        return ""
    parts = [f"{k}={_shown(v)}" for k, v in changed]
    tag = "-".join(parts)
    if len(tag) <= _MAX_TAG and all(_PART.fullmatch(p) for p in parts):
        return tag
    text = json.dumps(changed, separators=(",", ":"))
    return "cfg" + _digest(text)


def strategy_tag(strategy: str) -> str:
    """``strategy`` as a file name shows it: empty for the default, ``pct.d=5`` for ``pct:d=5``."""
    if strategy == DEFAULT_STRATEGY:
        return ""
    shown = strategy.replace(":", ".").replace(",", ".")
    if re.fullmatch(r"[A-Za-z0-9_.=+-]{1,40}", shown):
        return shown
    return "strategy" + _digest(strategy)


def trace_stem(scenario: Scenario, config: Mapping[str, Any], *, name: str | None = None,
               strategy: str = DEFAULT_STRATEGY) -> str:
    """A trace's file name before ``-SEED.jsonl``: ``name`` (default: the scenario's),
    then the config's tag and the strategy's, each when not the default."""
    return "-".join(p for p in (name or scenario.name, config_tag(scenario, config),
                                strategy_tag(strategy)) if p)


def _file_of(key: str) -> str | None:
    """The scenario file a run key records (None: a key of an older dst, or made by hand)."""
    try:
        found = json.loads(key)
    except ValueError:
        return None
    file = found.get("file") if isinstance(found, dict) else None
    return file if isinstance(file, str) else None


def unclaimed_stem(stem: str, key: str, kept: Iterable[tuple[str, str]]) -> str:
    """``stem``, or, when a run of another file keeps traces under it (``kept``: ``(run
    key, trace path)`` of the results database), ``stem`` and a short digest of this
    run's file: two scenario files whose scenarios share a name (``a/sw.py``,
    ``b/sw.py``) then keep their traces apart in one ``--out``.

    The choice is the same every time a run key asks, so a resumed run keeps writing
    where it wrote: the digest names only the run that came second.
    """
    mine = _file_of(key)
    if mine is None:
        return stem
    plain = re.compile(re.escape(stem) + r"-\d+(\.min)?\.jsonl")
    for other, trace in kept:
        if other == key or not plain.fullmatch(Path(trace).name):
            continue
        theirs = _file_of(other)
        if theirs is not None and theirs != mine:
            return f"{stem}-f{_digest(mine, 8)}"
    return stem


def _module_of(ref: str) -> Any:
    """The module ``ref`` (a ``.py`` file or a module name, before any ``::NAME``) was
    loaded as, already loaded by :func:`dst.registry.load`; None if it is not."""
    from ..registry import _file_module  # cached: the module load() executed

    where = ref.partition("::")[0]
    if where.endswith(".py"):
        return _file_module(where)
    return sys.modules.get(where)


def _dotted(file: str) -> str:
    """The module name pytest (``prepend`` import mode) gives the test file ``file``: its
    path from the parent of its top package (its own directory when in none)."""
    from ..project import import_dirs

    path = Path(os.path.abspath(file))
    base = import_dirs(path)[0]
    return ".".join(path.relative_to(base).with_suffix("").parts)


def qualified_name(ref: str | None, scenario: Scenario) -> str:
    """The name a trace of ``scenario`` (loaded from ``ref``; None: a shipped scenario)
    starts with: ``module.test`` for a ``@dst.test``, as under pytest, else the
    scenario's own name."""
    if ref is None:
        return scenario.name
    module = _module_of(ref)
    if module is None or getattr(module, "scenario", None) is scenario:
        return scenario.name
    if getattr(getattr(module, scenario.name, None), "scenario", None) is not scenario:
        return scenario.name
    where = ref.partition("::")[0]
    return f"{_dotted(where) if where.endswith('.py') else where}.{scenario.name}"


def _source_file(ref: str | None, scenario: Scenario) -> tuple[str, Path | None]:
    """Where the scenario was loaded from, as the run key records it, and its file.

    A file given by path is recorded by its resolved path, relative to the
    results database's directory (``out``) when it can be: one checkout mounted
    at two places (shards sharing ``--out``) is one file.  A module (a shipped
    scenario is one) is recorded by its name, as ``sys.path`` finds it.
    """
    if ref is None:
        from ..registry import shipped

        where = shipped().get(scenario.name, scenario.name)
    else:
        where = ref.partition("::")[0]
    if where.endswith(".py"):
        return str(Path(where).resolve()), Path(where)
    found = getattr(sys.modules.get(where), "__file__", None)
    return where, Path(found) if found else None


def identity(ref: str | None, scenario: Scenario, config: Mapping[str, Any],
             out: str | os.PathLike[str]) -> dict[str, Any]:
    """What a run key holds beyond the scenario's name, config and strategy: ``file``,
    ``source`` (a digest of the file's bytes), ``faults`` (the plan) and ``max_steps``."""
    where, file = _source_file(ref, scenario)
    if file is not None and where.endswith(".py"):
        try:
            where = os.path.relpath(where, Path(out).resolve())
        except ValueError:  # another drive (Windows): the absolute path
            pass
    try:
        source = _digest(file.read_bytes(), 2 * _DIGEST) if file else ""
    except OSError:
        source = ""
    try:
        faults: Any = scenario.fault_plan(config).as_dict()
    except Exception:  # the scenario's own failure: its seeds report it
        faults = None
    return {"file": where, "source": source, "faults": faults,
            "max_steps": scenario.max_steps}
