"""``--target reference`` follows the profile (``specs/oracle.md``, the targets): the spec as the
named profile reads it passes that profile, while a target of pagedkv's policy alone is still
held to it and fails."""

from __future__ import annotations

import pytest

from pagedkv import cli
from pagedkv.model_tests.oracle.api import check
from pagedkv.model_tests.oracle.codec import Level

STEPS = 1500


@pytest.mark.parametrize(
    ("profile", "level"),
    [
        ("vllm-v0", "manager"),
        ("nano-vllm", "manager"),
        ("vllm-v1", "request"),
        ("sglang", "request"),
    ],
)
def test_the_reference_alias_passes_every_profile(profile: str, level: Level) -> None:
    result = check("reference", level, profile=profile, steps=STEPS, seed=0)
    assert result.passed, result.message


@pytest.mark.parametrize(("profile", "level"), [("vllm-v0", "manager"), ("sglang", "request")])
def test_pagedkvs_own_policy_is_still_held_to_another_profile(profile: str, level: Level) -> None:
    """The alias does not loosen the check: the optimized twin implements pagedkv's policy
    only, and under another profile it fails."""
    result = check("optimized", level, profile=profile, steps=STEPS, seed=0)
    assert not result.passed


def test_the_alias_takes_the_policy_overrides(capsys: pytest.CaptureFixture[str]) -> None:
    """``--policy`` changes the reference the target is built as too: the check still passes."""
    code = cli.main(
        [
            *("check", "--target", "reference", "--profile", "pagedkv"),
            *("--policy", "request_eviction=leaf_lru", "--level", "request"),
            *("--seed", "0", "--steps", str(STEPS)),
        ]
    )
    assert code == 0, capsys.readouterr().out
