"""The client's base-URL list and CA bundle: parsing, failover order, trust settings."""

from __future__ import annotations

import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trustme

from work_ledger.client import AsyncClient, Client
from work_ledger.client import _calls as calls
from work_ledger.client._endpoints import Endpoints, parse_urls, tls_verify
from work_ledger.client._sending import Sending
from work_ledger.client.errors import ClientMisconfigured, Unreachable


@dataclass
class _Policy:
    endpoints: Endpoints = field(default_factory=lambda: Endpoints("http://a:1,http://b:2"))
    timeout: float = 30.0
    retries: int = 1
    backoff: float = 0.2


def test_parse_urls_reads_a_comma_separated_list() -> None:
    """Spaces, empty items and trailing slashes are dropped; order is kept."""
    expected = ("https://a.example:4001", "http://127.0.0.1:4002")
    assert expected == parse_urls(" https://a.example:4001/ ,, http://127.0.0.1:4002")
    assert expected == parse_urls(list(expected))


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("", "no server URL given"),
        ("http://a:1,ftp://b", "must start with http:// or https://"),
        ("http://a:1,127.0.0.1:4001", "must start with http:// or https://"),
        ("http://", "names no host"),
        ("http://a:99999", "out of range"),
    ],
)
def test_parse_urls_refuses_what_is_not_a_base_url(raw: str, why: str) -> None:
    """A bad item is a ClientMisconfigured naming it and the expected form, not a traceback."""
    with pytest.raises(ClientMisconfigured, match=why) as refused:
        parse_urls(raw)
    assert "separated by commas" in refused.value.detail or not raw


def test_sending_moves_to_the_next_url_at_once_with_the_same_key() -> None:
    """A connection error moves the write to the next URL, no pause, same Idempotency-Key."""
    sending = Sending(calls.heartbeat("att-1", None, "k-9"), _Policy())
    assert sending.request["url"] == "http://a:1/attempts/att-1/heartbeat"
    sending.failed(ConnectionError("refused"))
    assert sending.delay() == 0.0
    assert sending.request["url"] == "http://b:2/attempts/att-1/heartbeat"
    assert sending.request["headers"] == {"Idempotency-Key": "k-9"}


def test_sending_backs_off_once_every_url_failed() -> None:
    """After a full round of failures it backs off, then raises Unreachable naming every URL."""
    sending = Sending(calls.health("/healthz"), _Policy())
    assert not sending.answered(503, b"")
    assert sending.delay() == 0.0
    sending.failed(ConnectionError("refused"))
    assert 0.1 <= sending.delay() <= 0.2
    sending.failed(ConnectionError("refused"))
    assert sending.delay() == 0.0
    with pytest.raises(Unreachable, match=r"http://a:1, http://b:2 .* after 4 tries"):
        sending.failed(ConnectionError("refused"))


def test_sending_waits_out_an_in_flight_key_on_the_same_url() -> None:
    """A key in flight lives in the shared database: the retry backs off, it does not move."""
    sending = Sending(calls.health("/healthz"), _Policy())
    assert not sending.answered(409, b'{"code": "idempotency_key_in_flight"}')
    assert sending.delay() > 0
    assert sending.request["url"] == "http://a:1/healthz"


def test_endpoints_move_once_when_calls_fail_together() -> None:
    """Many calls failing on the same URL at once move the client one step, not several."""
    endpoints = Endpoints("http://a:1,http://b:2,http://c:3")
    threads = [threading.Thread(target=endpoints.failed, args=("http://a:1",)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert endpoints.current == "http://b:2"
    assert endpoints.failed("http://b:2") == "http://c:3"
    assert endpoints.failed("http://c:3") == "http://a:1"


@pytest.fixture
def ca_file(tmp_path: Path) -> Path:
    path = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(path))
    return path


def test_tls_verify_reads_wl_ca_bundle_before_ssl_cert_file(
    ca_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """WL_CA_BUNDLE wins over SSL_CERT_FILE; an explicit ca_bundle wins over both."""
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "missing.pem"))
    monkeypatch.setenv("WL_CA_BUNDLE", str(ca_file))
    assert isinstance(tls_verify(None), ssl.SSLContext)
    monkeypatch.delenv("WL_CA_BUNDLE")
    with pytest.raises(ClientMisconfigured, match=r"SSL_CERT_FILE names .*missing\.pem"):
        tls_verify(None)
    assert isinstance(tls_verify(ca_file), ssl.SSLContext)
    monkeypatch.delenv("SSL_CERT_FILE")
    assert tls_verify(None) is True


def test_tls_verify_loads_no_ca_for_plain_http_only(
    ca_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only plain http URLs: a context that checks certificates and trusts no CA (fails
    closed); one https URL, or a CA bundle named, and the CAs are loaded as always."""
    monkeypatch.delenv("WL_CA_BUNDLE", raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    plain = tls_verify(None, ["http://127.0.0.1:4001", "http://localhost:4002"])
    assert isinstance(plain, ssl.SSLContext)
    assert plain.verify_mode == ssl.CERT_REQUIRED
    assert plain.check_hostname
    assert plain.cert_store_stats()["x509_ca"] == 0
    assert tls_verify(None, ["http://127.0.0.1:4001", "https://ledger-b:4001"]) is True
    named = tls_verify(ca_file, ["http://127.0.0.1:4001"])
    assert isinstance(named, ssl.SSLContext)
    assert named.cert_store_stats()["x509_ca"] == 1


def test_tls_verify_refuses_a_file_that_is_not_pem(tmp_path: Path) -> None:
    """A CA bundle that is not PEM is named in a ClientMisconfigured."""
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(ClientMisconfigured, match="not a readable PEM file"):
        tls_verify(junk)


def test_client_refuses_to_send_a_token_in_clear_to_another_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """http:// off loopback with a token: refused, unless WL_ALLOW_PLAIN_HTTP=1 says so."""
    monkeypatch.delenv("WL_TOKEN", raising=False)
    monkeypatch.delenv("WL_ALLOW_PLAIN_HTTP", raising=False)
    remote = "https://a.example:4001,http://b.example:4001"
    with pytest.raises(ClientMisconfigured, match=r"http://b\.example:4001 is plain http"):
        Client(remote, "wl_00000000_token")
    with pytest.raises(ClientMisconfigured, match="WL_ALLOW_PLAIN_HTTP=1"):
        AsyncClient(remote, "wl_00000000_token")
    Client("https://a.example,http://127.0.0.1:1,http://localhost:2,http://[::1]:3", "wl_x").close()
    Client(remote).close()  # no token, nothing to leak
    monkeypatch.setenv("WL_ALLOW_PLAIN_HTTP", "1")
    Client(remote, "wl_00000000_token").close()
