"""WL_* settings: defaults, and a refusal that names the variable for a bad value."""

import pytest

from work_ledger.config import DEFAULT_POOL_SIZE, DEFAULT_STATEMENT_TIMEOUT, load_settings


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


def test_statement_timeout_defaults_to_thirty_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WL_STATEMENT_TIMEOUT", raising=False)
    assert load_settings().statement_timeout == DEFAULT_STATEMENT_TIMEOUT == 30.0


def test_statement_timeout_takes_fractions_of_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WL_STATEMENT_TIMEOUT", "0.5")
    assert load_settings().statement_timeout == 0.5


@pytest.mark.parametrize("value", ["0", "-1", "soon", "inf", "nan"])
def test_statement_timeout_must_be_a_positive_number_of_seconds(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("WL_STATEMENT_TIMEOUT", value)
    with pytest.raises(SystemExit, match="WL_STATEMENT_TIMEOUT"):
        load_settings()
