"""The block space manager machine, run against the optimized manager (exact mode)."""

from __future__ import annotations

from model_tests.manager_machine import manager_lockstep_case
from reference.manager_adapter import ReferenceBlockSpaceManager

TestManagerReferenceAgainstItself = manager_lockstep_case(ReferenceBlockSpaceManager).TestCase
