"""The project's Hypothesis profiles: ``dev`` (default), ``ci``, ``fuzz`` and ``mutate``.

Hypothesis loads a built-in ``ci`` profile by itself when ``CI=true``; registering our own under
that name and loading it explicitly keeps the budget ours and stated. ``deadline=None`` everywhere:
a stateful step's time depends on the pool, and a deadline only adds flaky failures.
Select one with ``PAGEDKV_PROFILE=dev|ci|fuzz|mutate``.

**Order independence.** Under the derandomized ``ci`` profile each test's seed comes from the test
itself, yet a machine's coverage still changed with the tests collected or run before it. The
cause: since 6.131 Hypothesis sometimes (5 % of draws) returns a constant taken from the source of
every *local* module loaded in the process, a pool that only grows, so what one test draws
depends on which modules other tests (or a target under check) happened to import first.
``pin_generation`` empties that pool for the process (a Hypothesis internal:
``hypothesis_internals.py``), so that the same seed draws the same runs whatever ran before
(``model_tests/tests/test_profiles.py``). Hypothesis's own fixed constants stay.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

from pagedkv.model_tests.machines.hypothesis_internals import empty_local_constants

COMMON = settings(
    deadline=None,
    # the explain phase re-runs a stateful failure hundreds of times to annotate it; the shrunk
    # step list is what we read
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

settings.register_profile("dev", COMMON, max_examples=300, stateful_step_count=80)
settings.register_profile(
    "ci", COMMON, max_examples=300, stateful_step_count=80, derandomize=True, database=None
)
settings.register_profile("fuzz", COMMON, max_examples=20_000, stateful_step_count=200)
PROFILES = ("dev", "ci", "fuzz", "mutate")


class ProfileError(ValueError):
    """An unknown ``PAGEDKV_PROFILE`` (the message is one line)."""


# ``make mutate``: one run of the killers per mutant, so a fixed seed and a modest budget
settings.register_profile(
    "mutate", COMMON, max_examples=60, stateful_step_count=60, derandomize=True, database=None
)


def active_profile() -> str:
    explicit = os.environ.get("PAGEDKV_PROFILE")
    if explicit:
        if explicit not in PROFILES:
            raise ProfileError(
                f"PAGEDKV_PROFILE={explicit!r}: expected one of {', '.join(PROFILES)}"
            )
        return explicit
    return "ci" if os.environ.get("CI", "").lower() in {"1", "true", "yes"} else "dev"


def pin_generation() -> None:
    """What Hypothesis draws depends on the seed and the strategies alone, not on which local
    modules are loaded (see the module's docstring). For the whole process: call it only in a
    process pagedkv owns (its tests, its command line). It reaches into Hypothesis
    (``hypothesis_internals.py``)."""
    empty_local_constants()


def load() -> str:
    name = active_profile()
    settings.load_profile(name)
    pin_generation()
    return name
