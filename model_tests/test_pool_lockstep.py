"""The block pool machine, run against the optimized pool (exact mode)."""

from __future__ import annotations

from model_tests.pool_machine import lockstep_case
from reference.pool_adapter import ReferenceBlockPool

TestReferenceAgainstItself = lockstep_case(ReferenceBlockPool).TestCase
