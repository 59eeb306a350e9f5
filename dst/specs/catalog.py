"""The specs beside the code, their rows, and the configuration TLC gets for each.

A spec ``NAME`` is three files in the specs directory: ``NAME.tla``; ``NAME.cfg``,
a configuration TLC runs as it is (the correct design, every invariant) and the
template of every row; and ``NAME.map.json``, which lists the constants the rows
vary (with their values, and the scenario switch each one is), the invariants
(with the scenario invariant each one is), and the scenario switches the spec
assumes.  The rows are the cross product of the constants' values, in the order
the map lists them; a row's configuration is the template with the row's
values and one invariant, so TLC reports a counterexample for each invariant
rather than only for the first one it breaks.  The generated text depends on
the files alone: the same files give the same configurations.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dst.errors import UsageError

from .tlc import SpecError

#: The specs directory of this checkout (beside the ``dst`` package).
SPECS_DIR = Path(__file__).resolve().parents[2] / "specs"
#: Words that open a section of a TLC configuration file.
_SECTIONS = re.compile(
    r"^\s*(SPECIFICATION|INIT|NEXT|CONSTANTS?|INVARIANTS?|PROPERT(Y|IES)|SYMMETRY|VIEW|"
    r"CONSTRAINTS?|ACTION_CONSTRAINTS?|CHECK_DEADLOCK|POSTCONDITION|ALIAS)\b")

Value = str | bool | int


@dataclass(frozen=True)
class Constant:
    """A constant the rows vary, and the scenario switch it stands for."""

    name: str
    values: tuple[Value, ...]
    switch: str | None
    switch_values: tuple[Any, ...]  # the switch's value for each of ``values``


@dataclass(frozen=True)
class Spec:
    name: str
    tla: Path
    cfg: Path
    constants: tuple[Constant, ...]
    invariants: tuple[str, ...]
    scenario_invariants: Mapping[str, str | None]
    scenario: str | None
    fixed_switches: Mapping[str, Any]
    #: The map file as read: its ``conformance`` section is read by ``dst.specs.mapping``.
    doc: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def row_switches(self, row: Mapping[str, Value]) -> dict[str, Any]:
        """The scenario config a row stands for (the mapped switches and the fixed ones)."""
        out = dict(self.fixed_switches)
        for c in self.constants:
            if c.switch is not None:
                out[c.switch] = c.switch_values[c.values.index(row[c.name])]
        return out


def tla(value: Value) -> str:
    """A value as TLA+ writes it: ``"after"``, ``TRUE``, ``2``."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    return json.dumps(value)


def shown(value: Value) -> str:
    """A value as the table shows it: strings without their quotes."""
    return value if isinstance(value, str) else tla(value)


def available(directory: Path = SPECS_DIR) -> list[str]:
    """Names of the specs in ``directory``: each ``.tla`` with its ``.cfg`` and map."""
    if not directory.is_dir():
        return []
    return sorted(p.stem for p in directory.glob("*.tla")
                  if p.with_suffix(".cfg").is_file() and p.with_suffix(".map.json").is_file())


def find(ref: str | None, directory: Path = SPECS_DIR) -> list[Spec]:
    """Every spec in ``directory``, or the one ``ref`` names (a name or a .tla path)."""
    if ref is not None and ref.endswith(".tla"):
        path = Path(ref)
        if not path.is_file():
            raise UsageError(f"no spec file {ref}")
        return [load(path.parent, path.stem)]
    names = available(directory)
    if not names:
        raise UsageError(f"no specs in {directory} (a spec is NAME.tla with NAME.cfg and "
                         "NAME.map.json); give --dir the directory that holds them")
    if ref is None:
        return [load(directory, n) for n in names]
    if ref not in names:
        raise UsageError(f"no spec {ref!r} in {directory}; the specs are: {', '.join(names)}")
    return [load(directory, ref)]


def load(directory: Path, name: str) -> Spec:
    tla_path, cfg, map_path = (directory / f"{name}{ext}" for ext in (".tla", ".cfg", ".map.json"))
    for path in (tla_path, cfg, map_path):
        if not path.is_file():
            raise UsageError(f"spec {name} lacks {path}")
    try:
        doc = json.loads(map_path.read_text(encoding="utf-8"))
        constants = tuple(
            Constant(c["name"], tuple(c["values"]), c.get("switch"),
                     tuple(c.get("switch_values", c["values"])))
            for c in doc["constants"])
        invariants = {i["name"]: i.get("scenario_invariant") for i in doc["invariants"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SpecError(f"{map_path} is not a spec map ({type(exc).__name__}: {exc}); "
                        "see specs/README.md for its fields") from None
    for c in constants:
        if not c.values or len(c.switch_values) != len(c.values):
            raise SpecError(f"{map_path}: constant {c.name} needs values, and one switch "
                            "value for each")
    return Spec(name, tla_path, cfg, constants, tuple(invariants), invariants,
                doc.get("scenario"), doc.get("fixed_switches", {}), doc)


def parse_value(spec: Spec, name: str, text: str) -> Value:
    """``-c NAME=TEXT``: one of the constant's values, in TLA+ or plain spelling."""
    const = next((c for c in spec.constants if c.name == name), None)
    if const is None:
        raise UsageError(f"spec {spec.name} has no switch constant {name!r}; it has: "
                         f"{', '.join(c.name for c in spec.constants)}")
    for v in const.values:
        if text in (tla(v), shown(v), str(v).lower()):
            return v
    raise UsageError(f"constant {name} of spec {spec.name} takes one of "
                     f"{', '.join(shown(v) for v in const.values)}, not {text!r}")


def rows(spec: Spec, fixed: Mapping[str, Value] | None = None) -> list[dict[str, Value]]:
    """The cross product of the constants' values, less rows that differ from ``fixed``."""
    want = fixed or {}
    names = [c.name for c in spec.constants]
    every = (dict(zip(names, combo, strict=True))
             for combo in itertools.product(*(c.values for c in spec.constants)))
    return [row for row in every if all(row[k] == v for k, v in want.items())]


def row_cfg(spec: Spec, row: Mapping[str, Value], invariant: str | Sequence[str],
            template: str | None = None) -> str:
    """The template with ``row``'s constants and ``invariant`` (or each of several)."""
    text = spec.cfg.read_text(encoding="utf-8") if template is None else template
    lines = text.splitlines()
    for name, value in row.items():
        pattern = re.compile(rf"^(\s*{re.escape(name)}\s*=\s*)\S.*$")
        hits = [i for i, line in enumerate(lines) if pattern.match(line)]
        if len(hits) != 1:
            raise SpecError(f"{spec.cfg} must set constant {name} on exactly one line "
                            f"(found {len(hits)})")
        found = pattern.match(lines[hits[0]])
        assert found is not None
        lines[hits[0]] = found.group(1) + tla(value)
    kept, skipping = [], False
    for line in lines:
        if _SECTIONS.match(line):
            skipping = bool(re.match(r"^\s*INVARIANTS?\b", line))
        if not skipping:
            kept.append(line)
    setting = ", ".join(f"{k} = {tla(v)}" for k, v in row.items())
    if isinstance(invariant, str):
        head = f"\\* {spec.cfg.name} for {setting}; invariant {invariant} (dst specs check)"
        return "\n".join([head, *kept, f"INVARIANT {invariant}", ""])
    while kept and kept[0].startswith("\\*"):
        del kept[0]  # the template's own comment speaks of the template
    lines = [f"\\* {spec.name}.tla, one row of the switch cross product: {setting}.",
            f"\\* Written from {spec.cfg.name} by `dst specs cfgs`; by hand:",
            f"\\* java -cp tla2tools.jar tlc2.TLC -deadlock -config THIS_FILE {spec.name}.tla"]
    return "\n".join([*lines, *kept, "INVARIANTS", *(f"    {i}" for i in invariant), ""])


def row_files(spec: Spec) -> dict[str, str]:
    """One TLC configuration per row, every invariant in it, by file name.

    ``approval.rows/after-false-false-false.cfg``: the values in the map's order,
    lower case, so that a reader can run any row by hand.
    """
    return {f"{'-'.join(shown(v).lower() for v in row.values())}.cfg":
            row_cfg(spec, row, spec.invariants) for row in rows(spec)}


def check_invariants(spec: Spec, wanted: Sequence[str]) -> tuple[str, ...]:
    unknown = [w for w in wanted if w not in spec.invariants]
    if unknown:
        raise UsageError(f"spec {spec.name} has no invariant {unknown[0]!r}; it has: "
                         f"{', '.join(spec.invariants)}")
    return tuple(wanted) or spec.invariants
