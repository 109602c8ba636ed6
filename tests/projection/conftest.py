"""Fixtures of the projection tests."""

from __future__ import annotations

import pytest

from work_ledger.projection import Projector
from work_ledger.service import Ledger


@pytest.fixture
def projector(ledger: Ledger) -> Projector:
    return Projector(ledger)
