"""Loads the project's Hypothesis profile before any test is collected."""

from __future__ import annotations

from model_tests.machines import profiles

profiles.load()
