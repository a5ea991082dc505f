"""Loads the project's Hypothesis profile before any test is collected, keeps the command's
progress lines off the stderr that tests read (``PAGEDKV_PROGRESS=0``; the tests of the lines
set their own), and holds every trace the tests write or read to ``specs/trace.schema.json``
(``trace_schema_checks.py``)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from pagedkv.model_tests.machines import profiles
from pagedkv.model_tests.oracle import trace
from pagedkv.model_tests.tests.trace_schema_checks import checked_dumps, checked_parse

os.environ.setdefault("PAGEDKV_PROGRESS", "0")

try:
    profiles.load()
except profiles.ProfileError as error:
    raise pytest.UsageError(str(error)) from None


@pytest.fixture(scope="session", autouse=True)
def traces_meet_their_schema() -> Iterator[None]:
    """Every trace written (``trace.dumps``) or accepted by the reader (``trace.parse``) in a
    test also passes the schema: a session fixture, so Hypothesis's tests take it too."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trace, "dumps", checked_dumps(trace.dumps))
        patch.setattr(trace, "parse", checked_parse(trace.parse))
        yield
