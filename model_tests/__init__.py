"""Hypothesis stateful machines that hold implementations to the reference, step by step."""
