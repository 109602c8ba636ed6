"""The pure parts of auth and idempotency: token shape, HMAC, sub-agents, request hashes."""

from __future__ import annotations

import pytest

from work_ledger.api.app import is_loopback
from work_ledger.api.auth import acting_agent
from work_ledger.errors import Forbidden, InvalidInput
from work_ledger.service.idempotency import check_key, request_hash
from work_ledger.service.tokens import Principal, Role, load_secret

AGENT = Principal("0123abcd", Role.AGENT, "agent-1")


def test_acting_agent_is_principal_or_its_sub_agent() -> None:
    """No header or the principal itself: the principal; principal/suffix: the sub-agent."""
    assert acting_agent(AGENT, None) == "agent-1"
    assert acting_agent(AGENT, "agent-1") == "agent-1"
    assert acting_agent(AGENT, "agent-1/w.3") == "agent-1/w.3"


@pytest.mark.parametrize(
    "named", ["agent-2", "agent-1/", "agent-1/a/b", "agent-10/x", "", "x" * 300]
)
def test_acting_agent_never_widens(named: str) -> None:
    """Another principal, an empty or nested suffix: forbidden."""
    with pytest.raises(Forbidden):
        acting_agent(AGENT, named)


def test_request_hash_ignores_json_formatting_not_content() -> None:
    """Key order and whitespace do not matter; values, path and method do."""
    one = request_hash("POST", "/units/claim", "", b'{"a": 1, "b": 2}')
    assert one == request_hash("POST", "/units/claim", "", b'{"b":2,"a":1}')
    assert one != request_hash("POST", "/units/claim", "", b'{"a": 1, "b": 3}')
    assert one != request_hash("POST", "/units/x/claim", "", b'{"a": 1, "b": 2}')
    assert request_hash("POST", "/p", "", b"not json") != request_hash("POST", "/p", "", b"not jso")


@pytest.mark.parametrize("key", ["", "k" * 256, "caf\u00e9", "tab\there"])
def test_bad_idempotency_keys_are_refused(key: str) -> None:
    """Keys are 1..255 printable ASCII characters."""
    with pytest.raises(InvalidInput):
        check_key(key)


def test_loopback_hosts() -> None:
    """Loopback names and addresses are recognised; anything else is public."""
    assert [is_loopback(h) for h in ("127.0.0.1", "::1", "[::1]", "localhost", "127.1.2.3")] == [
        True
    ] * 5
    assert [is_loopback(h) for h in ("0.0.0.0", "10.0.0.1", "::", "example.com")] == [False] * 4


def test_secret_file_is_created_once_0600(tmp_path: object) -> None:
    """Without WL_SECRET a random secret is created 0600 and then reused."""
    from pathlib import Path

    home = Path(str(tmp_path))
    first = load_secret(None, home)
    assert first == load_secret(None, home)
    assert (home / "secret").stat().st_mode & 0o777 == 0o600
    assert load_secret("explicit", home) == b"explicit"
