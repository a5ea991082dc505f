"""Holding implementations to the reference: the lockstep layer, the machines, the oracle, and an
independently written manager the oracle is tested against (``independent``)."""
