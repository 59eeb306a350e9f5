"""``dst conformance SPEC``: the spec's verdicts beside the real code's, row by row.

The command around :mod:`dst.specs.conformance`: finds the spec (a name in
``specs/`` or a ``.tla`` path), TLC and the paired scenarios, runs the
comparison, and prints one line per row with each invariant's two verdicts,
then, for every disagreement, both stories in the code's words and the traces
that replay them.  Exit status 0 when spec and code agree on every row, 1 on
any disagreement, 2 bad input (or no Java or TLC), 4 a broken spec, map or
scenario.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from dst.errors import DstError, UsageError
from dst.specs import Spec, available, find, locate
from dst.specs.catalog import SPECS_DIR, Value, parse_value, shown
from dst.specs.conformance import Cell, CodeVerdict, Report, RowReport, compare, load, on_code_text
from dst.specs.mapping import scenario_names
from dst.specs.steer import tell

from .arguments import out_dir

EXIT_AGREE, EXIT_DISAGREE = 0, 1


def _die(err: DstError) -> NoReturn:
    click.echo(f"error: {' '.join(str(err).split())}", err=True)
    sys.exit(err.exit_code)


def _spec_cell(cell: Cell) -> str:
    o = cell.spec
    return f"violated {len(cell.spec_story)}" if o.verdict == "violated" else "holds"


def _code_cell(code: CodeVerdict) -> str:
    if code.verdict == "violated":
        return f"violated {len(code.story)}"
    return "holds" if code.proof else "not violated*"


def _cell(cell: Cell) -> str:
    mark = "" if cell.agree else "  <- DIFFERS"
    return f"{_spec_cell(cell)} | {_code_cell(cell.code)}{mark}"


def _rows_text(report: Report) -> list[str]:
    conf = report.conformance
    lines: list[str] = []
    for pair in conf.pairs:
        rows = [r for r in report.rows if r.pair is pair]
        if not rows:
            continue
        names = [n for n in pair.shared if len({r.row[n] for r in rows}) > 1]
        invs = list(pair.invariants)
        widths = [max(len(n), *(len(shown(r.row[n])) for r in rows)) for n in names]
        cell_w = max(28, *(len(i) + 16 for i in invs),
                     *(len(_cell(r.cells[i])) for r in rows for i in invs))
        fixed = [f"{c.name}={shown(rows[0].row[c.name])}" for c in conf.spec.constants
                 if c.name not in names]
        lines.append(f"{conf.spec.name} beside {pair.scenario}"
                     + (f" ({', '.join(fixed)})" if fixed else "")
                     + f": code by {pair.search.describe()}")
        head = "  ".join([*(f"{n:<{w}}" for n, w in zip(names, widths, strict=True)),
                          *(f"{i + ' (spec | code)':<{cell_w}}" for i in invs), "CPU s"])
        lines += [head, "-" * len(head)]
        for r in rows:
            secs = sum(c.spec_cpu + c.code.cpu for c in r.cells.values())
            lines.append("  ".join([
                *(f"{shown(r.row[n]):<{w}}" for n, w in zip(names, widths, strict=True)),
                *(f"{_cell(r.cells[i]):<{cell_w}}" for i in invs),
                f"{secs:5.1f}"]).rstrip())
    return lines


def _stories(row: RowReport, cell: Cell) -> list[str]:
    setting = ", ".join(f"{n}={shown(row.row[n])}" for n in row.pair.shared)
    out = [f"DIFFERS: {cell.invariant} at {setting}: spec {cell.spec.verdict}, "
           f"code {cell.code.verdict}"]
    if cell.spec.verdict == "violated":
        out.append(f"  spec: {tell(cell.spec_story)} -> {cell.invariant} violated "
                   f"({cell.spec.states} states)")
        if cell.on_code is not None:
            f = cell.on_code
            ended = (f"broke {', '.join(f.violated)}" if f.violated
                     else "broke nothing")
            out.append(f"  code, made to follow it: {tell(f.story)} -> {ended} "
                       f"({f.followed} of {f.of} spec steps taken)")
            if f.departure:
                out.append(f"    {f.departure}")
            out.append(f"    trace:  {f.trace}")
            out.append(f"    replay: {f.replay or 'does not replay: ' + str(f.replay_divergence)}")
    else:
        out.append(f"  spec: {cell.invariant} holds ({cell.spec.distinct} distinct states)")
    code = cell.code
    if code.verdict == "violated":
        out.append(f"  code: {tell(code.story)} -> {cell.scenario_invariant} violated "
                   f"({code.steps} decisions): {code.message}")
        if code.trace:
            out.append(f"    trace:  {code.trace}")
            out.append("    replay: " + (code.replay or "found checking it alone; `dst replay` "
                                         "runs every check and stops at another one first"))
    else:
        caveat = f" ({code.caveat})" if code.caveat else ""
        out.append(f"  code: {cell.scenario_invariant} {code.verdict}{caveat}")
    return out


def _steps(story: Any) -> list[dict[str, Any]]:
    return [{"actor": s.actor, "action": s.action} for s in story]


def _document(report: Report) -> dict[str, Any]:
    rows = []
    for r in report.rows:
        cells = {}
        for inv, c in r.cells.items():
            code = c.code
            follow = None
            if c.on_code is not None:
                f = c.on_code
                follow = {"followed": f.followed, "of": f.of, "violated": f.violated,
                          "reproduced": f.reproduced, "unfinished": f.unfinished,
                          "story": _steps(f.story), "departure": f.departure,
                          "trace": f.trace, "replay": f.replay,
                          "replay_divergence": f.replay_divergence}
            cells[inv] = {
                "agree": c.agree, "scenario_invariant": c.scenario_invariant,
                "spec": {"verdict": c.spec.verdict, "states": c.spec.states,
                         "distinct_states": c.spec.distinct, "story": _steps(c.spec_story),
                         "counterexample": list(c.spec.actions),
                         "seconds": round(c.spec.seconds, 3)},
                "code": {"verdict": code.verdict, "proof": code.proof,
                         "caveat": code.caveat or None, "story": _steps(code.story),
                         "decisions": code.steps, "message": code.message or None,
                         "trace": code.trace, "replay": code.replay,
                         "replay_divergence": code.replay_divergence, "runs": code.runs,
                         "seconds": round(code.seconds, 3), "cpu_seconds": round(code.cpu, 3)},
                "spec_on_code": follow}
        rows.append({"scenario": r.pair.scenario, "constants": r.row, "config": r.config,
                     "agree": r.agree, "invariants": cells})
    return {"spec": report.spec.name, "tla": str(report.spec.tla),
            "pairs": [{"scenario": p.scenario, "shared": list(p.shared),
                       "invariants": list(p.invariants), "search": p.search.describe()}
                      for p in report.conformance.pairs],
            "agree": not report.disagreements, "disagreements": len(report.disagreements),
            "rows": rows, "seconds": round(report.seconds, 3),
            "tlc_seconds": round(report.tlc_seconds, 3),
            "code_seconds": round(report.code_seconds, 3),
            "tlc_cpu_seconds": round(report.tlc_cpu, 3),
            "code_cpu_seconds": round(report.code_cpu, 3)}


def _spec_for(ref: str, directory: Path) -> tuple[Spec, str | None]:
    """The spec ``ref`` names, or the one whose map pairs it with scenario ``ref``."""
    try:
        return find(ref, directory)[0], None
    except UsageError:
        if ref.endswith(".tla"):
            raise
    paired: list[str] = []
    for name in available(directory):
        spec = find(name, directory)[0]
        if ref in scenario_names(spec):
            return spec, ref
        paired += scenario_names(spec)
    raise UsageError(f"no spec {ref!r} in {directory}, and no spec's map pairs a scenario of "
                     f"that name; the specs are: {', '.join(available(directory)) or 'none'}"
                     + (f" (paired with: {', '.join(dict.fromkeys(paired))})" if paired else ""))


class _Progress:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.shown = False

    def __call__(self, done: int, total: int, seconds: float) -> None:
        if self.enabled:
            self.shown = True
            click.echo(f"\r  {done}/{total} done (TLC per row, code per invariant), "
                       f"{seconds:.0f}s ", nl=False, err=True)

    def close(self) -> None:
        if self.shown:
            click.echo("\r\033[K", nl=False, err=True)


@click.command("conformance")
@click.argument("spec_ref", metavar="SPEC|SCENARIO")
@click.option("-c", "settings", multiple=True, metavar="NAME=VALUE",
              help="Only the rows where this spec constant has this value (repeatable).")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              default=SPECS_DIR, show_default=False,
              help="Where the specs are (default: this checkout's specs/).")
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="Processes at once, each running a row's TLC runs or one search "
                   "[default: the CPUs, at most 4].")
@click.option("--budget", type=click.FloatRange(min=0.1), default=None, metavar="SECONDS",
              help="Stop each search of the code after this long (its verdict is then not "
                   "a proof).")
@click.option("--out", default="traces/conformance", show_default=True,
              help="Where the traces of both sides' counterexamples are written.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def command(spec_ref: str, settings: tuple[str, ...], directory: Path, jobs: int | None,
            budget: float | None, out: str, as_json: bool) -> None:
    """Check that SPEC and the real code agree, invariant by invariant, row by row.

    SCENARIO instead of SPEC compares the spec whose map pairs it with that
    scenario, on that scenario's rows only.

    SPEC's map file (specs/NAME.map.json, section "conformance") pairs it with
    scenarios: which constants are which switches, which invariants are
    which, and the bounds.  For every row both share, TLC checks the spec
    (one run, and one more for each invariant another one's violation left
    open) and dst searches the code under the same bounds, once per invariant
    (every schedule, by default), and the two verdicts are printed side by
    side, with the length of each counterexample in protocol actions.  Each
    spec counterexample is also replayed on the real runtime by steering its
    scheduler through the spec's steps, written as a trace that `dst replay`
    replays, and one line says whether the code broke the same invariant; a
    disagreement prints both stories in the code's words and the traces.

    \b
      dst conformance approval
      dst conformance approval -c SpendMode=before --json
      dst conformance replenish_order

    \b
    Exit status: 0 spec and code agree on every row, 1 they disagree on one,
    2 bad input (or Java or TLC missing), 4 a broken spec, map or scenario.
    """
    try:
        spec, only_scenario = _spec_for(spec_ref, directory)
        conf, scenarios = load(spec)
        if only_scenario is not None:
            conf = dataclasses.replace(conf, pairs=tuple(
                p for p in conf.pairs if p.scenario == only_scenario))
        fixed: dict[str, Value] = {}
        for item in settings:
            name, sep, text = item.partition("=")
            if not sep:
                raise UsageError(f"{item!r} is not NAME=VALUE (e.g. -c SpendMode=after)")
            fixed[name.strip()] = parse_value(spec, name.strip(), text.strip())
        where = out_dir(out)
        tlc = locate()
        show = _Progress(enabled=not as_json and sys.stderr.isatty())
        workers = jobs or max(1, min(4, os.cpu_count() or 1))
        report = compare(conf, scenarios, tlc, where, fixed=fixed, jobs=workers, budget=budget,
                         progress=show)
        show.close()
    except DstError as err:
        _die(err)
    if as_json:
        click.echo(json.dumps(_document(report), indent=2, default=str))
    else:
        for line in _rows_text(report) + on_code_text(report):
            click.echo(line)
        for row, cell in report.disagreements:
            for line in _stories(row, cell):
                click.echo(line)
        cells = sum(len(r.cells) for r in report.rows)
        unproven = sum(1 for r in report.rows for c in r.cells.values()
                       if c.code.verdict == "not violated")
        verdict = (f"{len(report.disagreements)} of {cells} verdicts differ" if
                   report.disagreements else f"all {cells} verdicts agree")
        note = ("; * 1 code verdict is not a proof" if unproven == 1 else
                f"; * {unproven} code verdicts are not proofs" if unproven else "")
        click.echo(f"{spec.name}: {len(report.rows)} rows, {verdict}{note} "
                   f"(CPU: TLC {report.tlc_cpu:.1f}s, code {report.code_cpu:.1f}s; "
                   f"{report.seconds:.1f}s wall)")
    sys.exit(EXIT_DISAGREE if report.disagreements else EXIT_AGREE)
