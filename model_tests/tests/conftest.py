"""Loads the project's Hypothesis profile before any test is collected."""

from __future__ import annotations

import pytest

from pagedkv.model_tests.machines import profiles

try:
    profiles.load()
except profiles.ProfileError as error:
    raise pytest.UsageError(str(error)) from None
