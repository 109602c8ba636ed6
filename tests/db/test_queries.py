"""The named-SQL loader."""

import pytest

from work_ledger.db.queries import QUERIES, parse_named_sql


def test_parse_named_sql_splits_on_headers() -> None:
    """Each `-- name:` header starts a statement that runs to the next header."""
    text = "-- name: one\nSELECT 1;\n\n-- name: two\n-- a comment\nSELECT 2;\n"
    assert parse_named_sql(text) == {"one": "SELECT 1", "two": "-- a comment\nSELECT 2"}


def test_parse_named_sql_refuses_a_name_twice() -> None:
    """A statement defined twice is an error, not a silent override."""
    with pytest.raises(RuntimeError, match="defined twice"):
        parse_named_sql("-- name: one\nSELECT 1;\n-- name: one\nSELECT 2;\n")


@pytest.mark.parametrize("name", ["claim_next_unit", "claim_unit"])
def test_claim_is_one_statement(name: str) -> None:
    """Each claim statement is a single statement: one round trip."""
    claim = QUERIES[name]
    assert claim.count(";") == 0
    assert "FOR NO KEY UPDATE SKIP LOCKED" in claim
