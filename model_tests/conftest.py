"""Loads the project's Hypothesis profile before any test is collected."""

from __future__ import annotations

from model_tests import profiles

profiles.load()
