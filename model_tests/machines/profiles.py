"""The project's Hypothesis profiles: ``dev`` (default), ``ci``, ``fuzz`` and ``mutate``.

Hypothesis loads a built-in ``ci`` profile by itself when ``CI=true``; registering our own under
that name and loading it explicitly keeps the budget ours and stated. ``deadline=None`` everywhere:
a stateful step's time depends on the pool, and a deadline only adds flaky failures.
Select one with ``PAGEDKV_PROFILE=dev|ci|fuzz|mutate``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

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
# ``make mutate``: one run of the killers per mutant, so a fixed seed and a modest budget
settings.register_profile(
    "mutate", COMMON, max_examples=60, stateful_step_count=60, derandomize=True, database=None
)


def active_profile() -> str:
    explicit = os.environ.get("PAGEDKV_PROFILE")
    if explicit:
        return explicit
    return "ci" if os.environ.get("CI", "").lower() in {"1", "true", "yes"} else "dev"


def load() -> str:
    name = active_profile()
    settings.load_profile(name)
    return name
