"""SGLang 0.5.23's ``RadixCache`` behind ``SglangRadixManager`` (``model_tests/peers/``) under
the safety tier, and a planted adapter bug the tier must catch; under the ``sglang`` profile,
whose choices vLLM's would fail (``specs/peers.md``, "SGLang").

Skipped when ``.peers/`` lacks SGLang's files, failed under ``CI=true`` (as ``test_peers.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pagedkv.model_tests.oracle.check import CheckResult, run_check
from pagedkv.model_tests.oracle.known import load as load_known
from pagedkv.model_tests.peers import sources
from pagedkv.model_tests.peers.run import KNOWN, SGLANG_PROFILE, pages_of
from pagedkv.model_tests.peers.sglang_radix import SglangRadixManager
from pagedkv.model_tests.tests.test_peers import needs
from pagedkv.specs.policy import SAFETY, profile
from pagedkv.specs.request_types import RequestConfig

SAFETY_TIER = profile(f"{SAFETY}:{SGLANG_PROFILE}", {})


class UnlockedMatch(SglangRadixManager):
    """Planted bug: admission locks the root, not the matched node, so the hit's pages stay
    evictable while the request reads them."""

    def __init__(self, config: RequestConfig, *, paged: bool = False) -> None:
        super().__init__(config, paged=paged)
        tree: Any = self._tree
        lock = tree.lock
        tree.lock = lambda node: lock(tree.root_node)


def paged(factory: Callable[..., SglangRadixManager]) -> Callable[[RequestConfig], Any]:
    """``factory`` over SGLang's paged allocator."""
    return lambda config: factory(config, paged=True)


def safety_check(
    factory: Callable[[RequestConfig], Any], steps: int, *, sizes: tuple[int, ...] = (1,)
) -> CheckResult:
    """``factory`` alone under the safety tier, full attention, seed 0, the machine drawing
    pages of ``sizes`` tokens only (``(16,)``: ``make peers``'s ``sglang-0.5.23-radix-16``),
    stepping past the peer's known differences (A1 shows at once on a page that holds a
    multimodal placeholder)."""
    return run_check(
        factory,
        "request",
        steps=steps,
        seed=0,
        trace_out=None,
        profile=SAFETY_TIER,
        layouts=("full",),
        adapt_case=pages_of(*sizes),
        known=load_known(KNOWN / "sglang-0.5.23-radix.toml", "request"),
    )


@needs(sources.SGLANG)
def test_sglang_radix_passes_the_safety_tier() -> None:
    result = safety_check(SglangRadixManager, 150)
    assert result.passed, result.message


@needs(sources.SGLANG)
def test_an_unlocked_match_fails_the_safety_tier() -> None:
    result = safety_check(UnlockedMatch, 2000)
    assert not result.passed
    assert result.message


@needs(sources.SGLANG)
def test_pages_of_16_pass_the_safety_tier_and_an_unlocked_match_fails_it() -> None:
    passed = safety_check(paged(SglangRadixManager), 300, sizes=(16,))
    assert passed.passed, passed.message
    failed = safety_check(paged(UnlockedMatch), 2000, sizes=(16,))
    assert not failed.passed
    assert "the tables hold" in failed.message, failed.message


def profile_check(
    factory: Callable[[RequestConfig], Any],
    overrides: dict[str, str],
    seed: int,
    sizes: tuple[int, ...] = (1,),
) -> CheckResult:
    """``factory`` held to the ``sglang`` profile (with ``overrides``), full attention, pages
    of ``sizes`` tokens, 500 calls, stepping past the peer's known differences (``make
    peers``'s run)."""
    return run_check(
        factory,
        "request",
        steps=500,
        seed=seed,
        trace_out=None,
        profile=profile(SGLANG_PROFILE, overrides),
        layouts=("full",),
        adapt_case=pages_of(*sizes),
        known=load_known(KNOWN / "sglang-0.5.23-radix.toml", "request"),
    )


@needs(sources.SGLANG)
def test_sglang_radix_matches_its_profile_and_not_vllms_timing() -> None:
    """The ``sglang`` profile's cache timing (``at_checkpoint``) is SGLang's: the page-size-1
    peer passes the profile on seed 0 and fails it with vLLM's timing in its place."""
    assert (passed := profile_check(SglangRadixManager, {}, 0)).passed, passed.message
    assert not profile_check(SglangRadixManager, {"request_cache_timing": "at_schedule"}, 0).passed


@needs(sources.SGLANG)
def test_sglang_radix_matches_its_profile_and_not_vllms_duplicates() -> None:
    """SGLang frees a request's duplicate pages at insert (``request_duplicates``): the
    page-size-1 peer passes the profile on seed 1 and fails it where the duplicate is kept, as
    vLLM keeps it."""
    assert (passed := profile_check(SglangRadixManager, {}, 1)).passed, passed.message
    assert not profile_check(SglangRadixManager, {"request_duplicates": "keep"}, 1).passed
