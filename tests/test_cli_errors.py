"""Bad input: each case is one line on stderr starting with ``error:``, exit 2, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from dst.cli import main
from dst.trace.model import VERSION


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def assert_one_line_error(result: Result, *fragments: str) -> str:
    """The contract for bad input; returns the message for further checks."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert isinstance(result.exception, SystemExit)  # not an uncaught error
    assert "Traceback" not in result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


# -- scenarios and switches ------------------------------------------------------


def test_an_unknown_scenario_is_refused_with_a_did_you_mean() -> None:
    assert_one_line_error(invoke("run", "countr"), "'countr'", "did you mean counter?")


def test_an_unknown_scenario_file_is_refused(tmp_path: Path) -> None:
    assert_one_line_error(invoke("run", str(tmp_path / "nope.py")), "no scenario file")


def test_a_scenario_file_not_found_is_refused_with_a_near_name(tmp_path: Path) -> None:
    (tmp_path / "bank.py").write_text("", encoding="utf-8")
    assert_one_line_error(invoke("run", str(tmp_path / "bnak.py")),
                          f"(no such file in {tmp_path})", f"did you mean {tmp_path / 'bank.py'}?")


def test_a_pins_note_given_as_a_trace_is_told_apart(tmp_path: Path) -> None:
    counter = Path(__file__).parent.parent / "traces" / "counter-lost-update.jsonl"
    pinned = invoke("pin", str(counter), "--dir", str(tmp_path))
    assert pinned.exit_code == 0, pinned.output
    for command in ("shrink", "replay", "show"):
        assert_one_line_error(invoke(command, str(tmp_path / "counter-0.json")),
                              "this is a pin's note", f"give the trace: "
                              f"{tmp_path / 'counter-0.jsonl'}")


def test_an_unknown_switch_is_refused_with_a_did_you_mean() -> None:
    assert_one_line_error(invoke("run", "counter", "-c", "cass=false"),
                          "no switch 'cass'", "did you mean cas?")


@pytest.mark.parametrize(("setting", "allowed"), [
    ("cas=maybe", "true or false"),
    ("workers=9", "1, 2, 3, 4"),
    ("workers=two", "integer"),
])
def test_an_ill_typed_switch_is_refused_naming_the_allowed_values(
    setting: str, allowed: str
) -> None:
    assert_one_line_error(invoke("run", "counter", "-c", setting), allowed)


def test_a_switch_without_equals_is_refused() -> None:
    assert_one_line_error(invoke("run", "counter", "-c", "cas"), "key=value")


@pytest.mark.parametrize("bad", ["5:2", "3:3", "a:b", "10", "-1:4"])
def test_a_bad_seed_range_is_refused(bad: str) -> None:
    assert_one_line_error(invoke("run", "counter", "--seed-range", bad), "seed range")


def test_two_seed_selections_at_once_are_refused() -> None:
    assert_one_line_error(invoke("run", "counter", "--seeds", "5", "--seed", "3"),
                          "one of --seeds, --seed, --seed-range")


@pytest.mark.parametrize("bad", ["soon", "0s", "8x"])
def test_a_bad_duration_is_refused(bad: str) -> None:
    assert_one_line_error(invoke("run", "counter", "--for", bad), "duration")


def test_an_unknown_option_and_command_are_one_line_errors() -> None:
    assert_one_line_error(invoke("run", "counter", "--sedes", "3"), "--sedes")
    assert_one_line_error(invoke("frobnicate"), "frobnicate")
    assert_one_line_error(invoke("run"), "SCENARIO")


# -- traces ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def good_trace(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The bytes of a real failing trace (counter with its lost update)."""
    out = tmp_path_factory.mktemp("traces")
    result = CliRunner().invoke(main, ["run", "counter", "-c", "cas=false", "--seeds", "20",
                                       "--out", str(out), "--json"])
    assert result.exit_code == 1, result.output
    path = json.loads(result.stdout)["failures"][0]["trace"]
    return Path(path).read_bytes()


def _write(tmp_path: Path, data: bytes) -> str:
    path = tmp_path / "t.jsonl"
    path.write_bytes(data)
    return str(path)


COMMANDS = ["replay", "show"]


@pytest.mark.parametrize("command", COMMANDS)
def test_the_good_trace_itself_is_accepted(command: str, tmp_path: Path,
                                           good_trace: bytes) -> None:
    result = invoke(command, _write(tmp_path, good_trace))
    assert result.exit_code in (0, 1), result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_a_trace_whose_last_line_is_cut_is_refused(command: str, tmp_path: Path,
                                                   good_trace: bytes) -> None:
    path = _write(tmp_path, good_trace[:-20])
    assert_one_line_error(invoke(command, path), "truncated")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_trace_without_its_footer_is_refused(command: str, tmp_path: Path,
                                               good_trace: bytes) -> None:
    lines = good_trace.splitlines(keepends=True)
    path = _write(tmp_path, b"".join(lines[:-1]))
    assert_one_line_error(invoke(command, path), "no footer", "truncated")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_trace_with_one_character_changed_is_refused_by_its_hash(
    command: str, tmp_path: Path, good_trace: bytes
) -> None:
    edited = good_trace.replace(b'"read counter"', b'"read countex"', 1)
    assert edited != good_trace
    assert_one_line_error(invoke(command, _write(tmp_path, edited)), "sha256", "edited")


def test_an_edited_verdict_is_refused_although_it_is_in_the_footer(
    tmp_path: Path, good_trace: bytes
) -> None:
    """The hash covers the footer's own fields, and the footer must agree with the records."""
    lines = good_trace.splitlines(keepends=True)
    footer = json.loads(lines[-1])
    footer["verdict"] = "pass"
    forged = json.dumps(footer, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    assert_one_line_error(invoke("replay", _write(tmp_path, b"".join(lines[:-1]) + forged)),
                          "contradicts")
    footer["violated"] = []
    forged = json.dumps(footer, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    assert_one_line_error(invoke("replay", _write(tmp_path, b"".join(lines[:-1]) + forged)),
                          "footer names violated []")
    footer = json.loads(lines[-1])
    footer["steps"] += 1
    forged = json.dumps(footer, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    assert_one_line_error(invoke("replay", _write(tmp_path, b"".join(lines[:-1]) + forged)),
                          "sha256")


def test_a_trace_reformatted_as_non_canonical_json_is_refused(
    tmp_path: Path, good_trace: bytes
) -> None:
    lines = good_trace.splitlines(keepends=True)
    lines[1] = json.dumps(json.loads(lines[1]), indent=None).encode() + b"\n"  # spaces
    assert_one_line_error(invoke("replay", _write(tmp_path, b"".join(lines))), "canonical")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_file_that_is_not_json_is_refused(command: str, tmp_path: Path) -> None:
    path = _write(tmp_path, b"step,time,actor\n1,0.0,worker-1\n")
    assert_one_line_error(invoke(command, path), "not JSON")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_file_that_is_not_utf8_is_refused(command: str, tmp_path: Path,
                                            good_trace: bytes) -> None:
    latin1 = good_trace.replace(b"read counter", b"read \xff\xfe counter", 1)
    assert latin1 != good_trace
    assert_one_line_error(invoke(command, _write(tmp_path, latin1)), "not UTF-8")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_trace_of_another_format_version_is_refused_naming_both_versions(
    command: str, tmp_path: Path, good_trace: bytes
) -> None:
    future = good_trace.replace(b'"version":%d' % VERSION, b'"version":%d' % (VERSION + 1), 1)
    assert future != good_trace
    message = assert_one_line_error(invoke(command, _write(tmp_path, future)))
    assert f"version {VERSION + 1}" in message and f"version {VERSION}" in message


@pytest.mark.parametrize("command", COMMANDS)
def test_a_trace_with_a_50_mb_line_is_refused_without_reading_it_whole(
    command: str, tmp_path: Path, good_trace: bytes
) -> None:
    header = good_trace.splitlines(keepends=True)[0]
    huge = b'{"type":"event","x":"' + b"a" * (50 * 1024 * 1024) + b'"}\n'
    assert_one_line_error(invoke(command, _write(tmp_path, header + huge)), ":2:", "longer")


@pytest.mark.parametrize("command", COMMANDS)
def test_an_empty_file_is_refused(command: str, tmp_path: Path) -> None:
    assert_one_line_error(invoke(command, _write(tmp_path, b"")), "empty")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_missing_file_is_refused(command: str, tmp_path: Path) -> None:
    assert_one_line_error(invoke(command, str(tmp_path / "gone.jsonl")), "no such file")


def test_a_directory_given_as_a_trace_is_refused(tmp_path: Path) -> None:
    assert_one_line_error(invoke("replay", str(tmp_path)), "cannot read")


def test_a_json_file_that_is_not_a_trace_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, b'{"format":"other","version":1}\n')
    assert_one_line_error(invoke("replay", path), "not a dst trace")


def test_a_trace_of_a_scenario_dst_does_not_ship_asks_for_scenario(
    tmp_path: Path, good_trace: bytes
) -> None:
    # Not a hash failure: the replay needs to know where the scenario lives first.
    from dst.trace.codec import read_trace

    trace = read_trace(_write(tmp_path, good_trace))
    trace.header["scenario"] = "mine"
    path = tmp_path / "mine.jsonl"
    path.write_text(trace.text(), encoding="utf-8")
    assert_one_line_error(invoke("replay", str(path)), "'mine'", "--scenario")
