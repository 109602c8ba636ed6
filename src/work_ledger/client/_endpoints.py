"""Where the client sends: one or more base URLs to fail over between, and the CAs it trusts.

`WL_URL` (or `url=`) may list several base URLs separated by commas, one per `serve`
replica. The client sticks to the one that last answered and moves to the next on a
connection error or a 503; every retry of a write repeats its Idempotency-Key, so the
replica that takes the retry returns the first outcome instead of acting twice.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
import threading
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from work_ledger.client.errors import ClientMisconfigured

CA_BUNDLE_VARIABLES = ("WL_CA_BUNDLE", "SSL_CERT_FILE")
# Transports that never touch the network (tests, in-process apps).
_IN_PROCESS = (httpx.ASGITransport, httpx.MockTransport)
_EXAMPLE = "e.g. WL_URL=https://ledger-a:4001,https://ledger-b:4001"


def parse_urls(urls: str | Sequence[str]) -> tuple[str, ...]:
    """The base URLs of a comma-separated list (or a sequence), each checked."""
    parts = urls.split(",") if isinstance(urls, str) else list(urls)
    found = tuple(part.strip().rstrip("/") for part in parts if part.strip())
    if not found:
        raise ClientMisconfigured(
            "no server URL given: WL_URL (or url=) is empty; name one or more base URLs, "
            + _EXAMPLE
        )
    for url in found:
        _check(url)
    return found


def _check(url: str) -> None:
    problem = None
    try:
        split = urlsplit(url)
        split.port  # noqa: B018  (raises ValueError on a port that is not a number in range)
        httpx.URL(url)
    except (ValueError, httpx.InvalidURL) as exc:
        problem = str(exc)
    else:
        if split.scheme not in ("http", "https"):
            problem = "it must start with http:// or https://"
        elif not split.hostname:
            problem = "it names no host"
    if problem is not None:
        raise ClientMisconfigured(
            f"{url!r} is not a server base URL ({problem}); WL_URL (or url=) takes one or more "
            f"http(s) base URLs separated by commas, {_EXAMPLE}"
        )


def tls_verify(
    ca_bundle: str | os.PathLike[str] | None, urls: Sequence[str] = ()
) -> ssl.SSLContext | bool:
    """What to check server certificates against: `ca_bundle`, else WL_CA_BUNDLE, else
    SSL_CERT_FILE, else the public CAs (certifi), unless every one of `urls` is plain http."""
    named, source = ca_bundle, "ca_bundle="
    for variable in CA_BUNDLE_VARIABLES:
        if named is None and os.environ.get(variable):
            named, source = os.environ[variable], variable
    if named is None:
        if urls and not any(url.startswith("https:") for url in urls):
            # Plain http never handshakes: spare loading the public CAs (a third of the
            # client's set-up). The context still checks certificates but trusts no CA, so
            # an https connection made with it anyway fails closed.
            return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        return True
    path = Path(named)
    try:
        return ssl.create_default_context(cafile=str(path))
    except (OSError, ssl.SSLError) as exc:
        raise ClientMisconfigured(
            f"{source} names {str(path)!r}, which is not a readable PEM file of CA certificates "
            f"({exc}); point it at the CA bundle that signed the server's certificate"
        ) from exc


def refuse_token_in_clear(urls: Sequence[str], transport: object) -> None:
    """A token sent over plain http to another host crosses the network readable by anyone on
    the path: refused unless WL_ALLOW_PLAIN_HTTP=1 says the network is trusted."""
    if os.environ.get("WL_ALLOW_PLAIN_HTTP") == "1" or isinstance(transport, _IN_PROCESS):
        return
    for url in urls:
        split = urlsplit(url)
        if split.scheme == "http" and not _is_loopback(split.hostname or ""):
            raise ClientMisconfigured(
                f"{url} is plain http to another host: the bearer token would cross the "
                "network in clear. Use https:// (the server's --tls-cert), or, behind a "
                "network you trust (the server runs with --allow-plain-http), set "
                "WL_ALLOW_PLAIN_HTTP=1"
            )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Endpoints:
    """The base URLs in order and the one in use; shared by every call of a client."""

    def __init__(self, urls: str | Sequence[str]) -> None:
        self.urls = parse_urls(urls)
        self._current = 0
        self._lock = threading.Lock()

    @property
    def current(self) -> str:
        return self.urls[self._current]

    def __len__(self) -> int:
        return len(self.urls)

    def __str__(self) -> str:
        return ", ".join(self.urls)

    def failed(self, url: str) -> str:
        """`url` did not answer: move past it (unless another call already did); the next."""
        with self._lock:
            if self.urls[self._current] == url:
                self._current = (self._current + 1) % len(self.urls)
            return self.urls[self._current]
