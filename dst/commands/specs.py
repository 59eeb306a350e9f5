"""``dst specs check``: run TLC on the TLA+ specs beside the code, row by row.

A row is one setting of a spec's switch constants; for each row TLC runs once
per invariant (TLC stops at the first invariant it breaks, and each invariant
deserves its own shortest counterexample).  Violated rows are findings, not
errors, as in ``dst table``: the exit status is 0 once every run gave a
verdict, 2 for bad input or a missing Java or TLC (one line says what to
install), 4 when a spec or TLC itself is broken.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from dst.errors import DstError, UsageError
from dst.specs import RowResult, Spec, check, find, locate
from dst.specs.catalog import SPECS_DIR, check_invariants, parse_value, row_files, rows, shown


class _BadInput(click.ClickException):
    exit_code = 2


class _Broken(click.ClickException):
    exit_code = 4  # a spec, or TLC itself, is broken: like a broken scenario


def _failed(err: DstError) -> click.ClickException:
    """A DstError as click reports it: ``error: ...`` in one line, with its exit status."""
    kind = _Broken if err.exit_code == _Broken.exit_code else _BadInput
    return kind(" ".join(str(err).split()))


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' * (n != 1)}"


def _cell(row: RowResult, invariant: str) -> str:
    o = row.outcomes[invariant]
    if o.verdict == "violated":
        return f"violated: {o.states} states ({o.distinct} distinct)"
    return f"holds ({o.distinct} distinct)"


def _row_line(spec: Spec, widths: list[int], row: RowResult, invariants: tuple[str, ...],
              cell_w: int) -> str:
    values = [f"{shown(row.row[c.name]):<{w}}" for c, w in zip(spec.constants, widths,
                                                                strict=True)]
    cells = [f"{_cell(row, inv):<{cell_w}}" for inv in invariants]
    return "  ".join([*values, *cells, f"{row.seconds:5.1f}s"])


def _header(spec: Spec, invariants: tuple[str, ...], cell_w: int) -> tuple[list[int], str]:
    widths = [max(len(c.name), *(len(shown(v)) for v in c.values)) for c in spec.constants]
    names = [f"{c.name:<{w}}" for c, w in zip(spec.constants, widths, strict=True)]
    return widths, "  ".join([*names, *(f"{i:<{cell_w}}" for i in invariants), "seconds"])


def _as_json(spec: Spec, results: list[RowResult], tlc_doc: dict[str, Any]) -> dict[str, Any]:
    return {
        "spec": spec.name, "tla": str(spec.tla), "scenario": spec.scenario, "tlc": tlc_doc,
        "rows": [{
            "config": dict(r.row),
            "scenario_config": spec.row_switches(r.row),
            "seconds": round(r.seconds, 3),
            "invariants": {inv: {"verdict": o.verdict, "states": o.states,
                                 "distinct_states": o.distinct, "seconds": round(o.seconds, 3),
                                 "scenario_invariant": spec.scenario_invariants.get(inv),
                                 "counterexample": list(o.actions)}
                           for inv, o in r.outcomes.items()},
        } for r in results],
    }


@click.group("specs")
def command() -> None:
    """TLA+ specs of the shipped protocols (specs/), checked by TLC.

    TLC comes with the specs extra (pip install 'dst[specs]') and needs Java 11
    or newer.
    """


@command.command("check")
@click.argument("spec_ref", metavar="[SPEC]", required=False)
@click.option("-c", "settings", multiple=True, metavar="NAME=VALUE",
              help="Only the rows where this constant has this value (repeatable).")
@click.option("--invariant", "invariants", multiple=True, metavar="NAME",
              help="Check only this invariant (repeatable).")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              default=SPECS_DIR, show_default=False,
              help="Where the specs are (default: this checkout's specs/).")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="TLC processes at once (each runs one worker).")
@click.option("-v", "--verbose", is_flag=True,
              help="Also print each counterexample's steps.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def check_command(spec_ref: str | None, settings: tuple[str, ...], invariants: tuple[str, ...],
                  directory: Path, jobs: int, verbose: bool, as_json: bool) -> None:
    """Run TLC on every row of SPEC (default: every spec) and print the verdicts.

    A row is one setting of the spec's switch constants (the cross product of
    the values its map file lists); TLC checks each invariant alone, so each
    violated one comes with its own shortest counterexample.  Per row: the
    constants, each invariant's verdict with the counterexample's length in
    states (the initial state is the first) and the distinct states TLC
    found, and the seconds the runs took.

    \b
      dst specs check
      dst specs check approval -c SpendMode=after --invariant AtMostOnce
    """
    try:
        specs = find(spec_ref, directory)
        if (settings or invariants) and spec_ref is None:
            raise UsageError("-c and --invariant name a spec's constants and invariants: "
                             f"give the SPEC too (one of {', '.join(s.name for s in specs)})")
        plans = []
        for spec in specs:
            wanted = {}
            for item in settings:
                name, sep, text = item.partition("=")
                if not sep:
                    raise click.BadParameter(f"{item!r} is not NAME=VALUE (e.g. "
                                             "-c SpendMode=after)", param_hint="-c")
                wanted[name.strip()] = parse_value(spec, name.strip(), text.strip())
            plans.append((spec, rows(spec, wanted), check_invariants(spec, invariants)))
        tlc = locate()
    except DstError as err:
        raise _failed(err) from None
    tlc_doc = {"jar": str(tlc.jar), "package": tlc.package, "java": tlc.java}
    docs = []
    for spec, selected, names in plans:
        cell_w = max(36, *(len(n) for n in names))
        widths, head = _header(spec, names, cell_w)
        if not as_json:
            click.echo(f"{spec.name} ({spec.tla.name}): {_count(len(selected), 'row')} x "
                       f"{_count(len(names), 'invariant')}, one TLC run each"
                       + (f" ({tlc.package})" if tlc.package else f" ({tlc.jar})"))
            click.echo(head)
            click.echo("-" * len(head))

        def show(r: RowResult, spec: Spec = spec, widths: list[int] = widths,
                 names: tuple[str, ...] = names, cell_w: int = cell_w) -> None:
            click.echo(_row_line(spec, widths, r, names, cell_w).rstrip())
            if verbose:
                for inv, o in r.outcomes.items():
                    if o.actions:
                        click.echo(f"    {inv}: {' -> '.join(o.actions)}")

        try:
            results = check(spec, tlc, selected, names, jobs=jobs,
                            on_row=None if as_json else show)
        except DstError as err:
            raise _failed(err) from None
        version = next((o.version for r in results for o in r.outcomes.values() if o.version),
                       None)
        tlc_doc["version"] = version
        docs.append(_as_json(spec, results, dict(tlc_doc)))
        if not as_json:
            runs = [o for r in results for o in r.outcomes.values()]
            broken = sum(o.verdict == "violated" for o in runs)
            seconds = sum(o.seconds for o in runs)
            click.echo(f"{spec.name}: {_count(len(results), 'row')}, {broken} of "
                       f"{_count(len(runs), 'TLC run')} found a violation ({seconds:.1f}s"
                       + (f", TLC {version})" if version else ")"))
    if as_json:
        click.echo(json.dumps({"specs": docs}, indent=2))


@command.command("cfgs")
@click.argument("spec_ref", metavar="[SPEC]", required=False)
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              default=SPECS_DIR, show_default=False,
              help="Where the specs are (default: this checkout's specs/).")
@click.option("--check", "only_check", is_flag=True,
              help="Write nothing; exit 1 if a row's file is missing or differs.")
def cfgs_command(spec_ref: str | None, directory: Path, only_check: bool) -> None:
    """Write one TLC configuration per row of SPEC (default: every spec).

    Each row of the switch cross product gets its own file, every invariant
    in it, under NAME.rows/ beside the spec, so that any row runs by hand:

    \b
      java -cp tla2tools.jar tlc2.TLC -deadlock \\
          -config specs/approval.rows/after-false-false-false.cfg specs/approval.tla

    The files are generated from NAME.cfg and the map: --check says whether
    the checked-in ones are still what they would be.
    """
    try:
        specs = find(spec_ref, directory)
    except DstError as err:
        raise _failed(err) from None
    stale: list[str] = []
    for spec in specs:
        before = len(stale)
        folder = directory / f"{spec.name}.rows"
        files = row_files(spec)
        for name, text in files.items():
            path = folder / name
            if path.is_file() and path.read_text(encoding="utf-8") == text:
                continue
            stale.append(str(path))
            if not only_check:
                folder.mkdir(exist_ok=True)
                path.write_text(text, encoding="utf-8")
        extra = sorted(p for p in folder.glob("*.cfg") if p.name not in files) \
            if folder.is_dir() else []
        for path in extra:
            stale.append(f"{path} (no such row)")
            if not only_check:
                path.unlink()
        if not only_check:
            click.echo(f"{spec.name}: {len(files)} row files in {folder}"
                       + (f" ({len(stale) - before} written or removed)" if len(stale) > before
                          else " (up to date)"))
    if only_check and stale:
        click.echo(f"{len(stale)} row files are stale, first {stale[0]}: run dst specs cfgs",
                   err=True)
        sys.exit(1)
