"""Known differences (``pagedkv check --known FILE``, ``specs/oracle.md`` §9): a run that ends on
a known class is counted and stepped past, the search goes on to the next unknown divergence,
and a file that cannot be used is one line and exit code 2."""

from __future__ import annotations

import io
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from pagedkv import cli
from pagedkv.model_tests.independent import broken
from pagedkv.model_tests.lockstep.calls import Divergence
from pagedkv.model_tests.lockstep.capture import RunRecord
from pagedkv.model_tests.oracle import codec, trace
from pagedkv.model_tests.oracle.check import AllKnown, check_report, run_check
from pagedkv.model_tests.oracle.known import Finding, KnownError, finding_of, load, parse
from pagedkv.model_tests.peers.run import PEERS
from pagedkv.specs.types import ManagerConfig

TWO_BUGS = "pagedkv.model_tests.independent.broken:BrokenLeaksAndIgnoresExtraKey"
SEEDS = (11, 25, 37)
"""Seeds whose search meets the extra-key bug before the leak (tried in turn, should the machine
change what a seed draws)."""

EXTRA_KEY_IS_KNOWN = """
level = "manager"

[[difference]]
name = "no-extra-key"
about = "the hash leaves out the extra key"
operation = ["allocate", "append_slots"]
kind = ["table", "choice", "error"]
message = "under (different extra keys|another extra key)"
config = { enable_caching = true }
"""


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_a_known_difference_is_stepped_past_to_the_next_one(tmp_path: Path) -> None:
    """Two bugs, one declared known: the check counts the runs that end on it and reports the
    other; the reported trace is the leak's (it fails on the leak alone, not on the extra-key
    bug alone), and the known class's example is the extra-key bug's. Without the file, the
    same search reports the extra-key bug, sooner."""
    known = tmp_path / "known.toml"
    known.write_text(EXTRA_KEY_IS_KNOWN)
    out_path = tmp_path / "out.jsonl"
    for seed in SEEDS:
        options = ["--seed", str(seed), "--known", str(known), "--trace-out", str(out_path)]
        code, out, err = run_cli("check", "--target", TWO_BUGS, *options)
        assert (code, err) == (1, ""), out + err
        if re.search(r"\d+ runs? ended on known differences: no-extra-key", out):
            break
    else:
        pytest.fail(f"no seed of {SEEDS} met the extra-key bug before the leak")
    assert f"known differences ({known}):" in out and "  no-extra-key: " in out, out
    assert "e.g. " in out and "under different extra keys" in out, out
    assert "FAIL: the target diverges from the reference" in out, out

    reported = trace.read(out_path)
    assert trace.replay(reported, broken.BrokenFreeLeaksLastBlock).status == "divergence"
    assert trace.replay(reported, broken.BrokenHashIgnoresExtraKey).ok
    example_path = tmp_path / "out.known-no-extra-key.jsonl"
    example = trace.read(example_path)
    verdict = trace.replay(example, broken.BrokenHashIgnoresExtraKey)
    assert verdict.status == "divergence" and verdict.step == len(example.ops), verdict.describe()
    assert f"example: {example_path}" in out, out

    plain = run_check(broken.BrokenLeaksAndIgnoresExtraKey, seed=seed, trace_out=None)
    assert plain.trace is not None and plain.found_after is not None
    assert trace.replay(plain.trace, broken.BrokenHashIgnoresExtraKey).status == "divergence"
    found = re.search(r"found after (\d+) calls? in (\d+) runs?", out)
    assert found is not None, out
    assert plain.found_after < (int(found[2]), int(found[1]))  # the leak comes later


class Crashes:
    """Every call raises an untyped error: each run ends at once."""

    def __init__(self, config: ManagerConfig) -> None:
        self.config = config

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def crash(*args: Any) -> Any:
            raise RuntimeError("boom")

        return crash


def test_a_check_where_every_run_ends_on_a_known_difference_fails() -> None:
    """Nothing past the known differences was checked: no PASS."""
    everything = [*codec.OPS["manager"], "create"]
    known = parse(
        {"difference": [{"name": "boom", "operation": everything, "kind": ["untyped", "table"]}]},
        "manager",
    )
    result = run_check(Crashes, steps=100, seed=0, trace_out=None, known=known)
    assert isinstance(result.failure, AllKnown)
    assert result.stepped is not None and result.stepped.runs == {"boom": result.runs}
    report = check_report(result, "Crashes")
    assert not report.ok and "nothing past them was checked" in report.verdict
    assert any("RuntimeError('boom') at " in line for line in report.known), report.known


def test_a_call_that_broke_two_rules_is_known_only_if_both_are() -> None:
    """A known class never hides an unknown finding of the same call."""
    known = parse(
        {"difference": [{"name": "D", "operation": "allocate", "kind": "aliasing"}]}, "manager"
    )
    record = RunRecord("manager", ManagerConfig(1, 2, 1), (("allocate", (1, [2], [3])),), True)
    both = Divergence("x", parts=[("aliasing", "a"), ("accounting", "b")])
    alone = Divergence("x", parts=[("aliasing", "a")])
    assert known.classify(_finding(both, record)) is None
    assert known.classify(_finding(alone, record)) == "D"


def test_a_class_matches_its_operation_kind_message_and_configuration() -> None:
    known = parse(
        {
            "difference": [
                {
                    "name": "W",
                    "operation": "can_allocate",
                    "kind": "result",
                    "message": "returned NEVER",
                    "config": {"sliding_window": "set", "enable_caching": [True, False]},
                }
            ]
        },
        "manager",
    )
    windowed = ManagerConfig(1, 2, 1, 0.0, sliding_window=1)

    def classify(op: str, kind: str, message: str, config: ManagerConfig) -> str | None:
        return known.classify(Finding(op, ((kind, message),), config))

    assert classify("can_allocate", "result", "the model returned NEVER, the target OK", windowed)
    assert not classify("can_allocate", "result", "returned NEVER", ManagerConfig(1, 2, 1))
    assert not classify("can_allocate", "error", "returned NEVER", windowed)
    assert not classify("allocate", "result", "returned NEVER", windowed)
    assert not classify("can_allocate", "result", "returned LATER", windowed)
    anywhere = parse(
        {"difference": [{"name": "K", "operation": "*", "kind": "kv", "message": "another"}]},
        "manager",
    )
    for op in ("allocate", "free", "get_common_computed_block_ids"):
        assert anywhere.classify(Finding(op, (("kv", "under another key"),), windowed)) == "K"
    assert anywhere.classify(Finding("free", (("table", "under another key"),), windowed)) is None


def _finding(failure: BaseException, record: RunRecord) -> Finding:
    found = finding_of(failure, record)
    assert found is not None
    return found


def _toml(text: str) -> dict[str, Any]:
    return tomllib.loads(text)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("level = 'manager'\n", "no [[difference]] entries"),
        ("[[difference]]\nname = 'a'\noperation = 'allocate'\n", "kind is missing"),
        ("[[difference]]\nname = 'a'\noperation = 'nope'\nkind = 'result'\n", "unknown operation"),
        ("[[difference]]\nname = 'a'\noperation = 'free'\nkind = 'bad'\n", "unknown kind 'bad'"),
        (
            "[[difference]]\nname = 'a'\noperation = 'free'\nkind = 'count'\nmessage = '('\n",
            "not a regular expression",
        ),
        (
            "[[difference]]\nname = 'a'\noperation = 'free'\nkind = 'count'\nconfig = {x = 1}\n",
            "config has no field 'x'",
        ),
        (
            "[[difference]]\nname='a'\noperation='free'\nkind='count'\n"
            "config = {enable_caching = 1}\n",
            "config.enable_caching cannot be 1",
        ),
        ("[[difference]]\nname = 'a b'\noperation = 'free'\nkind = 'count'\n", "name must be"),
        ("[[difference]]\nname = 'a'\noperation = 'free'\nkind = 'count'\nx = 1\n", "'x'"),
        ("level = 'pool'\n[[difference]]\n", "for the pool level"),
        ("difference = 3\n", "array of tables"),
        ("this is = not toml = at all\n", "not TOML"),
        (
            "[[difference]]\nname = 'a'\noperation = ['*', 'free']\nkind = 'count'\n",
            'operation "*" stands alone (it means every operation)',
        ),
        (
            "[[difference]]\nname = 'a'\noperation = 'free'\nkind = ['count', '*']\n",
            'kind "*" stands alone (it means every kind)',
        ),
    ],
)
def test_a_bad_file_is_one_line_and_exit_2(text: str, says: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    code, out, err = run_cli("check", "--target", "reference", "--known", str(path))
    assert (code, out) == (2, ""), out + err
    assert says in err and err.count("\n") == 1 and str(path) in err, err


def test_unreadable_files_are_refused(tmp_path: Path) -> None:
    for path, says in (
        (tmp_path / "missing.toml", "cannot read it"),
        (tmp_path, "cannot read it"),
        (Path("/dev/zero"), "larger than"),
    ):
        with pytest.raises(KnownError, match=says):
            load(path, "manager")
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(KnownError, match="not UTF-8"):
        load(binary, "manager")


@pytest.mark.parametrize("peer", PEERS, ids=lambda p: p.name)
def test_each_peer_file_loads_and_names_defects_of_the_findings(peer: Any) -> None:
    """Each shipped file is valid at its peer's level, and names defects of specs/peers.md."""
    if not peer.known_file.exists():
        return  # no defect found in this engine
    known = load(peer.known_file, peer.level)
    findings = (Path(__file__).resolve().parents[2] / "specs" / "peers.md").read_text()
    for difference in known.differences:
        for name in difference.name.split("-"):
            assert f"**{name}." in findings, f"{peer.name}: {name} is not a finding of peers.md"


def test_a_known_file_copied_from_a_report_steps_past_that_divergence(tmp_path: Path) -> None:
    """The report prints the divergence's kind and the entry that names it; that entry, copied
    into a file as it stands, is a known difference the next check steps past."""
    target = "pagedkv.model_tests.independent.broken:BrokenNoUpFrontCheck"
    first = tmp_path / "first.jsonl"
    out, err = io.StringIO(), io.StringIO()
    argv = ["check", "--target", target, "--seed", "0", "--trace-out", str(first)]
    assert cli.main(argv, stdout=out, stderr=err) == 1, out.getvalue() + err.getvalue()
    lines = out.getvalue().splitlines()
    (head,) = [line for line in lines if line.startswith("kind: ")]
    said = re.fullmatch(r"kind: (\S+) \(at (\w+)\); .* --known FILE:", head)
    assert said is not None, head
    kind, operation = said.groups()
    entry = lines[lines.index(head) + 1 : lines.index(head) + 5]
    assert [line.split(" =")[0].strip() for line in entry] == [
        "[[difference]]",
        "name",
        "operation",
        "kind",
    ]
    header = trace.read(first)
    assert header.divergence == (operation, (kind,))  # the trace's header says it too
    known = tmp_path / "known.toml"
    known.write_text("\n".join(entry) + "\n")
    name = f"{operation}-{kind}"
    out, err = io.StringIO(), io.StringIO()
    argv = ["check", "--target", target, "--seed", "0", "--trace-out", str(tmp_path / "t.jsonl")]
    code = cli.main([*argv, "--known", str(known)], stdout=out, stderr=err)
    report = out.getvalue()
    assert code in (0, 1) and err.getvalue() == "", report + err.getvalue()
    assert re.search(rf"^  {name}: \d+ runs?", report, re.MULTILINE), report
    assert f"kind: {kind} (at {operation})" not in report  # whatever fails now is another class


@pytest.mark.parametrize(
    ("divergence", "says"),
    [
        ({"operation": "allocate"}, '"divergence" must be'),
        ({"operation": "nope", "kind": ["table"]}, "unknown manager operation 'nope'"),
        ({"operation": "free", "kind": []}, "kinds are"),
        ({"operation": "free", "kind": ["weird"]}, "kinds are"),
    ],
)
def test_a_bad_divergence_in_a_trace_header_is_refused(divergence: Any, says: str) -> None:
    text = trace.dumps(trace.Trace("manager", ManagerConfig(2, 2, 1)))
    header, rest = text.split("\n", 1)
    bad = header[:-1] + f', "divergence": {json.dumps(divergence)}}}'
    with pytest.raises(trace.TraceError, match=re.escape(says)):
        trace.loads(bad + "\n" + rest)
