"""WL_* settings: defaults, and a refusal that names the variable for a bad value."""

import pytest

from work_ledger.config import DEFAULT_POOL_SIZE, load_settings


def test_pool_size_defaults_to_a_few_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WL_POOL_SIZE", raising=False)
    assert load_settings().pool_size == DEFAULT_POOL_SIZE


def test_pool_size_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WL_POOL_SIZE", "12")
    assert load_settings().pool_size == 12


@pytest.mark.parametrize("value", ["0", "-3", "four"])
def test_pool_size_must_be_a_positive_whole_number(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("WL_POOL_SIZE", value)
    with pytest.raises(SystemExit, match="WL_POOL_SIZE"):
        load_settings()
