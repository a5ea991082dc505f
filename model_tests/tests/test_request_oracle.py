"""The oracle at the request level (``specs/oracle.md``): the protocol's values on the wire, the
isomorphic and safety sessions, and ``pagedkv check --level request`` end to end: the reference
passes, planted wrong managers fail with a trace that ``replay`` reproduces, a policy of
another engine fails against the ``pagedkv`` profile but not the safety tier, an ``exec:``
program is checked through the stdio protocol, and an answer that only compares like the right
value is a ``type`` divergence."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from pagedkv import cli
from pagedkv.model_tests.independent import request_broken
from pagedkv.model_tests.lockstep.calls import Divergence
from pagedkv.model_tests.lockstep.request_isomorphic_session import IsomorphicRequestSession
from pagedkv.model_tests.lockstep.request_safety_session import RequestSafetySession
from pagedkv.model_tests.oracle import api, trace
from pagedkv.model_tests.oracle.known import KnownError, parse
from pagedkv.model_tests.oracle.record import record_level
from pagedkv.model_tests.tests import request_oracle_targets as planted
from pagedkv.model_tests.tests.false_pass_targets import AgreeableInt
from pagedkv.optimized.request_manager import RequestManager
from pagedkv.reference.request_adapter import ReferenceRequestKVManager
from pagedkv.specs import request_calls as calls
from pagedkv.specs import wire
from pagedkv.specs.errors import PagedKVError
from pagedkv.specs.request_types import (
    AllBlocksCleared,
    AttentionKind,
    BlockRemoved,
    BlockStored,
    GroupBlocks,
    KVGroup,
    MultimodalInput,
    Request,
    RequestConfig,
)
from pagedkv.specs.types import ExtraKey

HERE = planted.HERE
PEER = [sys.executable, "-m", "pagedkv.model_tests.oracle.example_peer", "--impl", "reference"]
WINDOW = KVGroup(AttentionKind.SLIDING_WINDOW, 4)
HYBRID = RequestConfig(num_blocks=12, block_size=2, groups=(KVGroup(), WINDOW))


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


# --- the protocol's values ----------------------------------------------------------------------


def test_request_level_values_travel_as_json_and_back() -> None:
    request = Request("r1", (3, 1, 4), 3, 1, ExtraKey(2, "s"), (MultimodalInput(0, 2, "img"),))
    args = wire.encode_args("request", "allocate_slots", [request, 2, 0, [[1], [0]], 1])
    assert args[0]["multimodal"] == [{"offset": 0, "length": 2, "identifier": "img"}]
    assert wire.decode_args("request", "allocate_slots", args) == (request, 2, 0, [[1], [0]], 1)
    events = [
        BlockStored((b"\x01" * 32,), None, (3, 1), 2, 2, 0),
        BlockRemoved((b"\x02" * 32,), 1),
        AllBlocksCleared(),
    ]
    assert wire.exact_result("request", "take_events", events) == events
    assert wire.exact_result("request", "get_computed_blocks", ([[1, 2], [0, 3]], 4)) == (
        [[1, 2], [0, 3]],
        4,
    )
    assert wire.exact_result("request", "allocate_slots", None) is None
    config = wire.decode_config("request", wire.encode_config(HYBRID))
    assert config == HYBRID


@pytest.mark.parametrize(
    ("operation", "answer", "phrase"),
    [
        ("get_computed_blocks", ([[True]], 2), "bool at [0][0][0], not int"),
        ("get_computed_blocks", ([[1]], 2.0), "float at [1], not int"),
        ("allocate_slots", [(1, 2.0)], "float at [0][1], not int"),
        ("take_events", [BlockRemoved(("ab",), 0)], "str at [0].block_hashes[0], not bytes"),  # type: ignore[arg-type]
        ("take_events", [object()], "object at [0], not BlockStored"),
        ("get_block_ids", [[AgreeableInt(1)]], "AgreeableInt at [0][0], not int"),
    ],
)
def test_an_answer_not_exactly_of_its_kind_is_named(
    operation: str, answer: object, phrase: str
) -> None:
    with pytest.raises(wire.NotExact, match=phrase.replace("[", r"\[").replace("]", r"\]")):
        wire.exact_result("request", operation, answer)


@pytest.mark.parametrize(
    ("kind", "value", "says"),
    [
        ("hit", [[[1]], 2], "a hit"),
        ("events", [{"type": "stored"}], "an event"),
        ("events", [{"type": "removed", "block_hashes": ["zz"], "group": 0}], "hex"),
        ("request", {"id": "r", "tokens": []}, "lacks"),
        ("request_id", 3, "a string"),
    ],
)
def test_a_malformed_request_level_value_is_one_line(kind: str, value: object, says: str) -> None:
    with pytest.raises(wire.CodecError, match=says):
        wire.decode_value(kind, value)


# --- the sessions, call by call ----------------------------------------------------------------


class Renamed(ReferenceRequestKVManager):
    """The reference with every block id but the null block's renamed: agrees up to ids."""

    def __init__(self, config: RequestConfig) -> None:
        super().__init__(config)
        ids = list(range(1, config.num_blocks))
        self.out = {0: 0} | dict(zip(ids, reversed(ids), strict=True))
        self.back = {v: k for k, v in self.out.items()}

    def _renamed(self, blocks: GroupBlocks | None, names: dict[int, int]) -> GroupBlocks | None:
        return None if blocks is None else [[names.get(b, b) for b in g] for g in blocks]

    def get_computed_blocks(self, request: Request) -> tuple[GroupBlocks, int]:
        blocks, tokens = super().get_computed_blocks(request)
        return self._renamed(blocks, self.out) or [], tokens

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: GroupBlocks | None = None,
        num_lookahead_tokens: int = 0,
    ) -> GroupBlocks | None:
        hit = self._renamed(new_computed_blocks, self.back)
        answer = super().allocate_slots(
            request, num_new_tokens, num_new_computed_tokens, hit, num_lookahead_tokens
        )
        return self._renamed(answer, self.out)

    def get_block_ids(self, request_id: str) -> GroupBlocks:
        return self._renamed(super().get_block_ids(request_id), self.out) or []


def serve(
    session: IsomorphicRequestSession | RequestSafetySession, prompt: tuple[int, ...]
) -> None:
    """Admit a request for ``prompt`` through its hit, compute it, then free it."""
    request_id = f"r{len(session.steps)}"
    request = Request(request_id, prompt, len(prompt))
    blocks, hit = session.call(calls.get_computed_blocks(request))  # type: ignore[misc]
    session.call(calls.allocate_slots(request, len(prompt) - hit, hit, blocks if hit else None))
    session.call(calls.free(request_id))


def test_the_isomorphic_session_follows_a_target_through_its_own_ids() -> None:
    session = IsomorphicRequestSession(ReferenceRequestKVManager(HYBRID), Renamed(HYBRID))
    for prompt in [(1, 2, 3, 4, 5), (1, 2, 3, 4, 5, 6, 7), (9, 9, 9), (1, 2, 3, 4, 6)]:
        serve(session, prompt)
    session.call(calls.take_events())
    session.call(calls.usage())


def test_a_block_the_reference_keeps_cached_taken_by_the_target_is_a_choice() -> None:
    config = RequestConfig(num_blocks=5, block_size=2)
    session = IsomorphicRequestSession(
        ReferenceRequestKVManager(config), planted.head_first(config)
    )
    serve(session, (1, 2, 3, 4, 5))  # two cached blocks go back: tail first, or head first
    with pytest.raises(Divergence, match="evicted its cached block 2") as caught:
        serve(session, (7, 7, 7, 7, 7, 7))  # two blank blocks, then the first cached one
    assert caught.value.kind == "choice"


def test_the_safety_session_reads_a_hit_back_and_counts_the_blocks() -> None:
    session = RequestSafetySession(Renamed(HYBRID), HYBRID)
    for prompt in [(1, 2, 3, 4, 5), (1, 2, 3, 4, 5, 6, 7), (1, 2, 3, 4, 6)]:
        serve(session, prompt)

    class SwappedHit(Renamed):
        def get_computed_blocks(self, request: Request) -> tuple[GroupBlocks, int]:
            blocks, tokens = super().get_computed_blocks(request)
            blocks[0][:2] = blocks[0][1::-1]
            return blocks, tokens

    session = RequestSafetySession(SwappedHit(HYBRID), HYBRID)
    serve(session, (1, 2, 3, 4, 5))
    with pytest.raises(Divergence, match="holds position 2") as caught:
        serve(session, (1, 2, 3, 4, 5))
    assert caught.value.kind == "kv"

    class Leaks(ReferenceRequestKVManager):
        def free(self, request_id: str) -> None:
            pass

    session = RequestSafetySession(Leaks(HYBRID), HYBRID)
    with pytest.raises(Divergence, match="the tables hold 0") as caught:
        serve(session, (1, 2, 3))
    assert caught.value.kind == "accounting"


def test_the_safety_session_refuses_a_cached_draft_token() -> None:
    config = RequestConfig(num_blocks=8, block_size=2)
    session = RequestSafetySession(planted.DraftsCached(config), config)
    request = Request("r", (1, 2, 3), 3)
    with pytest.raises(Divergence, match="draft or lookahead token cached") as caught:
        session.call(calls.allocate_slots(request, 3 + 1))  # one draft token fills block 1
    assert caught.value.kind == "kv"


def test_the_safety_session_trusts_tokens_computed_in_steps_it_did_not_see() -> None:
    """A minimized trace drops the steps that computed positions 2 to 5; the request's count
    still says they are computed, so a correct manager caches their blocks and a later hit on
    them is no false alarm (it was: the session read them back as never written)."""
    config = RequestConfig(num_blocks=15, block_size=2, groups=(KVGroup(), WINDOW))
    session = RequestSafetySession(ReferenceRequestKVManager(config), config)
    session.call(calls.allocate_slots(Request("r1", (3, 1, 4, 1), 4), 2))
    grown = Request("r1", (3, 1, 4, 1, 0, 0, 0), 4, num_computed_tokens=6)
    session.call(calls.allocate_slots(grown, 1))
    answer = session.call(calls.get_computed_blocks(Request("r6", (3, 1, 4, 1, 0, 0, 0, 0), 8)))
    assert not isinstance(answer, PagedKVError)
    blocks, hit = answer
    assert hit == 6 and len(blocks[0]) == 3


def test_the_safety_session_reads_a_block_cached_from_lookahead_slots_as_unwritten() -> None:
    """Lookahead slots counted as computed: the block is cached before its KV is written, and
    the KV check alone (events not read) catches the hit on it."""
    config = RequestConfig(num_blocks=9, block_size=4, groups=(KVGroup(), WINDOW))
    session = RequestSafetySession(request_broken.RequestCachesLookahead(config), config)
    session.draining = False  # a target whose events nobody reads
    request = Request("r2", (3, 1, 4, 1, 0, 0), 6)
    session.call(calls.allocate_slots(request, 2, 0, None, 2))  # positions 2 and 3: lookahead
    with pytest.raises(Divergence, match="slot 2 holds nothing") as caught:
        session.call(calls.get_computed_blocks(request))
    assert caught.value.kind == "kv"


# --- pagedkv check --level request ---------------------------------------------------------------


def test_the_reference_passes(tmp_path: Path) -> None:
    result = api.check("reference", "request", steps=900, seed=0, trace_out=tmp_path / "t.jsonl")
    assert result.passed, result.message
    assert result.calls > 100 and result.layouts == ("full", "window", "hybrid")


def test_the_independent_manager_is_a_named_target() -> None:
    """``--target independent`` at the request level is the independent request manager."""
    result = api.check("independent", "request", steps=300, seed=0)
    assert result.passed, result.message


def test_a_hit_without_the_cap_fails_with_a_trace_replay_reproduces(tmp_path: Path) -> None:
    out = tmp_path / "nocap.jsonl"
    result = api.check(f"{HERE}:no_hit_cap", "request", steps=4000, seed=0, trace_out=out)
    assert not result.passed and result.trace_path == out
    assert "get_computed_blocks" in result.message, result.message
    verdict = api.replay(out, f"{HERE}:no_hit_cap")
    assert not verdict.ok and verdict.kind == "result", verdict
    assert api.replay(out, "reference").ok
    code, shown, err = run_cli("replay", str(out), "--target", f"{HERE}:no_hit_cap")
    assert code == 1 and "FAIL" in shown, shown + err


def test_another_free_order_fails_the_pagedkv_profile_but_not_the_safety_tier(
    tmp_path: Path,
) -> None:
    target = f"{HERE}:head_first"
    out = tmp_path / "order.jsonl"
    result = api.check(target, "request", steps=8000, seed=0, trace_out=out)
    assert not result.passed and result.trace is not None
    # The other free order shows as another block taken (``choice``, ``table``) or, where that
    # block is a cached one, first as another key in the evicting call's ``BlockRemoved``.
    assert result.finding is not None
    assert result.finding.parts[0][0] in ("choice", "table", "events")
    assert not api.replay(out, target).ok
    safe = api.check(target, "request", steps=900, seed=0, profile="safety")
    assert safe.passed, safe.message


def test_an_exec_program_is_checked_through_the_stdio_protocol(tmp_path: Path) -> None:
    program = "exec:" + " ".join(PEER)
    result = api.check(program, "request", steps=300, seed=1, trace_out=tmp_path / "t.jsonl")
    assert result.passed, result.message
    nocap = tmp_path / "nocap.jsonl"
    assert not api.check(
        f"{HERE}:no_hit_cap", "request", steps=4000, seed=0, trace_out=nocap
    ).passed
    assert api.replay(nocap, program).ok  # the reference behind the program agrees
    loaded = trace.read(nocap)
    assert loaded.level == "request" and loaded.config.groups


@pytest.mark.parametrize(
    ("name", "line"),
    [
        ("FreeCountIsNumpy", "num_free_blocks(): the target returned numpy.int64, not int"),
        (
            "FreeCountAgreesWrongly",
            "num_free_blocks(): the target returned"
            " pagedkv.model_tests.tests.false_pass_targets.AgreeableInt, not int",
        ),
    ],
)
def test_an_answer_that_only_compares_like_the_value_fails(
    name: str, line: str, tmp_path: Path
) -> None:
    if name == "FreeCountIsNumpy":
        pytest.importorskip("numpy")
    out = str(tmp_path / "out.jsonl")
    argv = ["check", "--level", "request", "--target", f"{HERE}:{name}", "--seed", "0"]
    code, shown, err = run_cli(*argv, "--steps", "300", "--trace-out", out)
    assert code == 1 and err == "", shown + err
    assert line in shown and "kind: type" in shown, shown


def test_groups_narrow_the_layouts_and_a_wrong_one_is_one_line(tmp_path: Path) -> None:
    out = str(tmp_path / "out.jsonl")
    argv = ["check", "--level", "request", "--target", "reference", "--seed", "2"]
    code, shown, err = run_cli(*argv, "--steps", "300", "--groups", "window", "--trace-out", out)
    assert code == 0 and "groups window," in shown, shown + err
    code, shown, err = run_cli(*argv, "--groups", "full,sliding")
    assert code == 2 and "unknown group layout sliding" in err, err


def test_a_known_file_names_a_group_layout() -> None:
    entry = {"name": "d", "operation": "free", "kind": "table", "config": {"groups": "hybrid"}}
    known = parse({"level": "request", "difference": [entry]}, "request")
    difference = known.differences[0]
    assert difference.matches("free", "table", "", HYBRID)
    assert not difference.matches("free", "table", "", RequestConfig(8, 2))
    wrong = {**entry, "config": {"groups": "mixed"}}
    with pytest.raises(KnownError, match="a group layout"):
        parse({"difference": [wrong]}, "request")


def test_record_then_replay_a_request_corpus(tmp_path: Path) -> None:
    corpus = record_level("request", tmp_path, runs=8, seed=0)
    assert corpus.complete, corpus.summary()
    loaded = [trace.read(path) for path in corpus.files]
    assert {op for one in loaded for op in one.operations()} == set(wire.OPS["request"])
    assert set().union(*(one.errors() for one in loaded)) == set(wire.ERRORS["request"])
    for one in loaded:
        assert trace.replay(one, RequestManager).ok


def test_the_pytest_fixture_checks_the_request_level(tmp_path: Path) -> None:
    from pagedkv.model_tests.oracle.pytest_plugin import OracleFailure, run_oracle

    assert run_oracle("reference", level="request", steps=300, seed=0).passed
    with pytest.raises(OracleFailure, match="request level"):
        run_oracle(
            planted.no_hit_cap, level="request", steps=4000, seed=0, trace_out=tmp_path / "t.jsonl"
        )
