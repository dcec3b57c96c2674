"""Shared helpers for the URB codec tests: the seed fixtures (extracted by extract_fixtures.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).with_name("fixtures")
SEED_FILES = sorted(p.name for p in FIXTURES.glob("*.bin"))


def load(name: str) -> bytes:
    """The bytes of one seed fixture, by file name with or without ``.bin``."""
    if not name.endswith(".bin"):
        name += ".bin"
    return (FIXTURES / name).read_bytes()


@pytest.fixture(params=SEED_FILES)
def seed_message(request: pytest.FixtureRequest) -> bytes:
    return load(request.param)
