"""Verdicts a CI system reads (issue 26, item 1): ``--json`` (validated against
``specs/verdict.schema.json``) and ``--junit-xml`` (validated against ``specs/junit.xsd`` and parsed
back) of ``check``, ``replay`` and
``soak``, for a pass and for a failure; the files tried before the run and never left behind by
an earlier run; progress lines on stderr where stdout is not a terminal. A failing check must
write a failing verdict: the worst bug a verdict file can have is a false ``pass``.
"""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import xmlschema

from pagedkv import cli
from pagedkv.model_tests.oracle import trace
from pagedkv.model_tests.oracle.junit import junit_xml
from pagedkv.model_tests.oracle.progress import Progress, seconds
from pagedkv.model_tests.tests.teaching_pages import SWAP_TARGET, swap_trace

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "specs" / "verdict.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(
    SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
)
JUNIT_SCHEMA = xmlschema.XMLSchema(ROOT / "specs" / "junit.xsd")
BROKEN_COW = "pagedkv.model_tests.independent.broken:BrokenForgetsCowSource"


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def verdict_files(tmp_path: Path, *argv: str) -> tuple[int, str, dict[str, Any], ET.Element]:
    """Run ``argv`` with both files; (exit code, stdout, the JSON validated, the XML's root)."""
    json_path, junit_path = tmp_path / "out" / "verdict.json", tmp_path / "out" / "junit.xml"
    code, out, err = run_cli(*argv, "--json", str(json_path), "--junit-xml", str(junit_path))
    assert err == "", err
    verdict = json.loads(json_path.read_text())
    VALIDATOR.validate(verdict)
    assert verdict["exit_code"] == code
    JUNIT_SCHEMA.validate(str(junit_path))
    return code, out, verdict, ET.fromstring(junit_path.read_bytes())


def one_testcase(root: ET.Element, failures: int, errors: int = 0) -> ET.Element:
    """The JUnit shape CI reporters read: one suite of one testcase, its counts consistent."""
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    for element in (root, suite):
        assert (element.get("tests"), element.get("failures"), element.get("errors")) == (
            "1",
            str(failures),
            str(errors),
        )
        assert float(element.get("time", "-1")) >= 0
    (case,) = suite.findall("testcase")
    assert case.get("classname", "").startswith("pagedkv.") and case.get("name")
    assert len(case.findall("failure")) == failures and len(case.findall("error")) == errors
    assert case.findtext("system-out")
    return case


# --- check ------------------------------------------------------------------------------------


def test_a_passing_check_writes_a_passing_verdict(tmp_path: Path) -> None:
    code, out, verdict, root = verdict_files(
        tmp_path, "check", "--target", "reference", "--seed", "0", "--steps", "300"
    )
    assert code == 0 and "PASS" in out
    assert (verdict["command"], verdict["verdict"], verdict["divergence"]) == (
        "check",
        "pass",
        None,
    )
    assert verdict["seeds"] == [0] and verdict["level"] == "manager"
    assert verdict["budget"] == {"steps": 300, "runs": 10, "steps_per_run": 30}
    assert verdict["runs"] == 10 and verdict["calls"] > 0 and verdict["summary"] in out
    case = one_testcase(root, failures=0)
    assert case.get("name") == "check reference (manager level, profile pagedkv, seed 0)"


def check_swap(
    tmp_path: Path, steps: str, *more: str
) -> tuple[int, str, dict[str, Any], ET.Element]:
    """``BrokenSwapDropsPair`` (it drops the last copy of a swap in) checked with seed 0."""
    return verdict_files(
        tmp_path, "check", "--target", SWAP_TARGET, "--seed", "0", "--steps", steps, *more
    )


def test_a_failing_check_writes_a_failing_verdict_with_its_divergence(tmp_path: Path) -> None:
    trace_out = tmp_path / "found.jsonl"
    code, out, verdict, root = check_swap(tmp_path, "500", "--trace-out", str(trace_out))
    assert code == 1 and "FAIL" in out
    assert verdict["verdict"] == "fail" and verdict["summary"].startswith("FAIL")
    divergence = verdict["divergence"]
    assert divergence["kind"] == ["result"] and divergence["operation"] == "swap_in"
    assert divergence["trace"] == str(trace_out) and trace_out.exists()
    assert divergence["page"] == str(tmp_path / "found.html")
    assert divergence["replay"].startswith(f"pagedkv replay {trace_out}")
    assert divergence["step"] == len(divergence["steps"]) == 3
    assert divergence["steps"][-1]["diverges"] and "the target []" in divergence["message"]
    assert verdict["found_after"]["runs"] <= verdict["runs"]
    failure = one_testcase(root, failures=1).find("failure")
    assert failure is not None and failure.get("message") == divergence["message"]
    assert failure.get("type") == "result" and "expected vs did" in (failure.text or "")


def test_a_check_that_stepped_past_known_differences_lists_them(tmp_path: Path) -> None:
    known = tmp_path / "known.toml"
    known.write_text(
        '[[difference]]\nname = "swap_in-result"\noperation = "swap_in"\nkind = "result"\n'
    )
    trace_out = str(tmp_path / "t.jsonl")
    code, _, verdict, _ = check_swap(
        tmp_path, "300", "--known", str(known), "--trace-out", trace_out
    )
    assert verdict["known"]["file"] == str(known)
    (stepped,) = verdict["known"]["classes"]
    assert stepped["name"] == "swap_in-result" and stepped["runs"] == verdict["known"]["runs"] > 0
    if code == 0:  # stepped past, and nothing else found in this budget: never "agrees"
        assert verdict["summary"].startswith("PASS with") and "agrees" not in verdict["summary"]


# --- soak -------------------------------------------------------------------------------------


def test_soak_writes_its_verdict_passing_and_failing(tmp_path: Path) -> None:
    code, _, verdict, root = verdict_files(
        tmp_path / "pass", "soak", "--level", "request", "--groups", "window", "--steps", "300"
    )
    assert code == 0 and verdict["verdict"] == "pass" and verdict["groups"] == ["window"]
    assert verdict["mode"] == "exact" and verdict["calls"] >= 300
    assert verdict["model"] == "reference"  # the request level has no stand-in
    one_testcase(root, failures=0)

    code, _, verdict, root = verdict_files(
        tmp_path / "fail",
        "soak",
        "--target",
        BROKEN_COW,
        "--seed",
        "1",
        "--steps",
        "3000",
        "--trace-out",
        str(tmp_path / "soak.jsonl"),
    )
    assert code == 1 and verdict["verdict"] == "fail"
    assert verdict["model"] == "reference"  # isomorphic mode: the reference is the model
    properties = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert properties["model"] == "reference"
    divergence = verdict["divergence"]
    assert divergence["trace"] == str(tmp_path / "soak.jsonl") and divergence["steps"]
    assert divergence["steps"][-1]["diverges"] and not divergence["hung"]
    failure = one_testcase(root, failures=1).find("failure")
    assert failure is not None and failure.get("message") == divergence["message"]


def test_a_soak_with_the_stand_in_model_names_it(tmp_path: Path) -> None:
    twin = "pagedkv.model_tests.tests.test_fast_soak:Twin"
    argv = ["soak", "--target", twin, "--exact", "--steps", "300", "--seed", "1"]
    code, _, verdict, root = verdict_files(tmp_path, *argv)
    assert code == 0 and verdict["model"] == "optimized", verdict["summary"]
    properties = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert properties["model"] == "optimized"


# --- replay -----------------------------------------------------------------------------------


def test_replay_writes_a_pass_a_fail_and_a_stale_trace_s_error(tmp_path: Path) -> None:
    path = trace.write(swap_trace(), tmp_path / "swap.jsonl")
    code, _, verdict, root = verdict_files(tmp_path, "replay", str(path), "--target", "reference")
    assert code == 0 and verdict["verdict"] == "pass" and verdict["traces"][0]["verdict"] == "pass"
    one_testcase(root, failures=0)

    code, _, verdict, root = verdict_files(tmp_path, "replay", str(path), "--target", SWAP_TARGET)
    assert code == 1 and verdict["verdict"] == "fail"
    assert verdict["divergence"]["step"] == 9 and verdict["divergence"]["trace"] == str(path)
    assert verdict["divergence"]["operation"] == "swap_in"
    one_testcase(root, failures=1)

    stale = tmp_path / "stale.jsonl"
    stale.write_text(path.read_text().replace('"result": [[2, 0]]', '"result": [[2, 1]]'))
    code, _, verdict, root = verdict_files(tmp_path, "replay", str(stale), "--target", "reference")
    assert code == 2 and verdict["verdict"] == "stale" and verdict["command"] == "replay"
    error = one_testcase(root, failures=0, errors=1).find("error")
    assert error is not None and error.get("type") == "stale"


# --- the files themselves ----------------------------------------------------------------------


def test_an_earlier_verdict_never_outlives_a_run_without_one(tmp_path: Path) -> None:
    earlier = tmp_path / "verdict.json"
    earlier.write_text('{"verdict": "pass"}')
    code, _, err = run_cli(
        "check", "--target", "no_such_module:f", "--steps", "5", "--json", str(earlier)
    )
    assert code == 2 and "no_such_module" in err and not earlier.exists()


@pytest.mark.parametrize("option", ["--json", "--junit-xml"])
@pytest.mark.parametrize("command", [["check", "--target", "reference"], ["soak"]])
def test_a_verdict_file_that_cannot_be_written_is_refused_before_the_run(
    tmp_path: Path, option: str, command: list[str]
) -> None:
    code, out, err = run_cli(*command, "--steps", "100000", option, str(tmp_path))
    assert (code, out) == (2, "") and "is a directory" in err and err.count("\n") == 1


def test_the_schema_refuses_a_pass_that_its_exit_code_denies(tmp_path: Path) -> None:
    """The schema can fail: a ``pass`` with exit code 1, or a missing field, is refused."""
    _, _, verdict, _ = verdict_files(
        tmp_path, "check", "--target", "reference", "--seed", "0", "--steps", "30"
    )
    with pytest.raises(jsonschema.ValidationError):
        VALIDATOR.validate({**verdict, "exit_code": 1})
    with pytest.raises(jsonschema.ValidationError):
        VALIDATOR.validate({key: value for key, value in verdict.items() if key != "divergence"})


def test_junit_holds_any_message_a_target_gives() -> None:
    verdict = {
        "command": "check",
        "target": "t",
        "verdict": "fail",
        "summary": "FAIL",
        "level": "pool",
        "groups": None,
        "profile": "pagedkv",
        "mode": "isomorphic",
        "exit_code": 1,
        "pagedkv": "0",
        "seeds": [3],
        "timings": {"started": "2026-01-01T00:00:00Z", "seconds": 1.0, "cpu_seconds": 1.0},
        "divergence": {"message": "bell \x07 and <tag> & \x1b[1m", "kind": [], "detail": "d"},
    }
    root = ET.fromstring(junit_xml(verdict, "report \x00"))
    failure = one_testcase(root, failures=1).find("failure")
    assert failure is not None and failure.get("message") == "bell \\x07 and <tag> & \\x1b[1m"


# --- progress -----------------------------------------------------------------------------------


def test_progress_lines_on_stderr_where_stdout_is_not_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PAGEDKV_PROGRESS", "0.000001")
    code, out, err = run_cli("check", "--target", "reference", "--seed", "0", "--steps", "150")
    lines = err.splitlines()
    assert code == 0 and "PASS" in out and lines, err
    assert all(line.startswith("pagedkv: checking: ") for line in lines), err
    assert " of 5 runs, " in lines[0] and " calls, " in lines[0]
    monkeypatch.setenv("PAGEDKV_PROGRESS", "0")
    assert run_cli("check", "--target", "reference", "--seed", "0", "--steps", "150")[2] == ""
    monkeypatch.setenv("PAGEDKV_PROGRESS", "soon")
    code, _, err = run_cli("check", "--target", "reference", "--steps", "150")
    assert code == 2 and "PAGEDKV_PROGRESS='soon'" in err and err.count("\n") == 1


def test_a_soak_tells_its_shrink_too(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A soak's shrink replays a long episode again and again, minutes with no line before."""
    monkeypatch.setenv("PAGEDKV_PROGRESS", "0.000001")
    target = "pagedkv.model_tests.independent.broken:BrokenSwapDropsPair"
    out_file = str(tmp_path / "d.jsonl")
    code, out, err = run_cli("soak", "--target", target, "--seed", "1", "--trace-out", out_file)
    lines = err.splitlines()
    assert code == 1 and "FAIL" in out, out + err
    shrinking = [line for line in lines if line.startswith("pagedkv: shrinking a divergence: ")]
    assert shrinking and all(" steps, " in line and " calls, " in line for line in shrinking)
    assert lines.index(shrinking[0]) > 0 and lines[0].startswith("pagedkv: soaking: "), err


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (12.4, "12 s"),
        (200, "3 min 20 s"),
        (5 * 3600 + 7 * 60 + 9, "5 h 7 min"),
        (86400 + 3600, "1 day 1 h"),
        (60_299_280, "697 days 21 h"),  # was "1004988 min 0 s", a soak's --steps 10**12
    ],
)
def test_an_estimate_reads_in_two_units_at_most(value: float, shown: str) -> None:
    assert seconds(value) == shown


def test_progress_gives_the_total_and_an_estimate_while_in_the_budget() -> None:
    now = [0.0]
    shown: list[str] = []
    progress = Progress(100, "runs", "checking", shown.append, every=5, clock=lambda: now[0])
    progress(10, 300)
    assert shown == []  # not yet: a line every 5 s
    now[0] = 20.0
    progress(25, 700)
    now[0] = 30.0
    progress(30, 900, "shrinking a divergence")
    assert shown == [
        "checking: 25 of 100 runs, 700 calls, 20 s, about 1 min 0 s left",
        "shrinking a divergence: 30 runs, 900 calls, 30 s",
    ]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b'failures="', b'failures="x'),  # a count that is not a number
        (b"<properties>", b"<properties><property/>"),  # a property without name and value
        (b' classname="', b' class="'),  # a required attribute missing
        (b"</testcase>", b"</testcase><testcase/>"),  # a second, empty testcase
    ],
)
def test_the_junit_schema_rejects_a_broken_file(old: bytes, new: bytes) -> None:
    """The schema that validates every written file is shown able to fail: each break of a real
    failing file is rejected, the file itself accepted."""
    verdict = {
        "command": "check",
        "verdict": "fail",
        "timings": {"seconds": 1.5, "started": "2026-11-26T19:00:00Z"},
        "pagedkv": "0.2.0",
        "target": "t",
        "level": "manager",
        "profile": "pagedkv",
        "mode": "isomorphic",
        "exit_code": 1,
        "seeds": [0],
        "groups": None,
        "summary": "FAIL",
        "divergence": {"message": "m", "kind": ["result"], "detail": "d"},
    }
    document = junit_xml(verdict, "report")
    JUNIT_SCHEMA.validate(document.decode())
    assert old in document
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        JUNIT_SCHEMA.validate(document.replace(old, new, 1).decode())
