"""Loads the project's Hypothesis profile before any test is collected, and keeps the command's
progress lines off the stderr that tests read (``PAGEDKV_PROGRESS=0``; the tests of the lines
set their own)."""

from __future__ import annotations

import os

import pytest

from pagedkv.model_tests.machines import profiles

os.environ.setdefault("PAGEDKV_PROGRESS", "0")

try:
    profiles.load()
except profiles.ProfileError as error:
    raise pytest.UsageError(str(error)) from None
