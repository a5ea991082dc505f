"""Defaults of ``pagedkv bench`` that its command line shows: here, apart from the benchmark's
modules, so that building the command line loads none of them (start-up)."""

REFERENCE_CALLS = 20_000
"""The reference replays only the stream's first calls by default: it is a textbook, about a
hundred times slower than the optimized manager on this workload."""
