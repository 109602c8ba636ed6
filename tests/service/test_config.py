"""WL_* settings: defaults, and a refusal that names the variable for a bad value."""

import os
from pathlib import Path

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


def test_dotenv_is_read_from_the_working_directory_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The working directory's .env is read; one in a folder above it is not."""
    monkeypatch.delenv("WL_LEASE_SECONDS", raising=False)
    monkeypatch.delenv("WL_STALL_SECONDS", raising=False)
    (tmp_path / ".env").write_text("WL_LEASE_SECONDS=321\n")  # planted above the checkout
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    monkeypatch.chdir(checkout)
    assert load_settings().lease_seconds == 900
    (checkout / ".env").write_text("WL_STALL_SECONDS=77\n")
    try:
        assert load_settings().stall_seconds == 77
    finally:
        os.environ.pop("WL_STALL_SECONDS", None)  # load_dotenv sets it process-wide


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
