"""The HTTP layer the model providers share: one JSON POST with timeouts and bounded retries.

Connections. A model given a client of its own (`client=`) uses it; one built from a model
string shares its event loop's kept-alive client while a supervisor is open (`http_pool.py`),
and outside one has a client of its own for each turn, closed after it.

Retried: HTTP 408, 409, 429, 5xx (529 "overloaded" included) and transport failures
(connection refused or reset, timeouts, a server hanging up mid-reply). Every other status
fails at once. Between attempts the wait is exponential with jitter, or what the server's
`Retry-After` (or `retry-after-ms`) asks for, capped. Every failure becomes
`RemoteError(MODEL_ERROR, ...)` with a message naming the provider, the status and the API's
own error message, with the API key cut out wherever it appears.
"""

from __future__ import annotations

import email.utils
import functools
import http.cookiejar
import itertools
import json
import os
import re
import ssl
import time
from collections.abc import Mapping
from typing import Any, Self
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx

from tether.parent.models.h11_client import H11Client, Reply
from tether.parent.models.http_pool import pooled_client
from tether.parent.models.retry import RetryPolicy
from tether.protocol import ErrorCode, RemoteError
from tether.protocol.messages import ModelCompleteParams, ModelCompleteResult

RETRY_STATUSES: frozenset[int] = frozenset({408, 409, 429})
"""Retried besides every 5xx."""

MAX_ERROR_CHARS = 500


DEFAULT_TIMEOUT = 600.0
"""Seconds to wait for a reply (read, write, pool); model turns can be slow."""
CONNECT_TIMEOUT = 10.0


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """One verifying context for every client (httpx's defaults: certifi, or `SSL_CERT_FILE` /
    `SSL_CERT_DIR`); building one per turn would load the CA bundle each time."""
    return httpx.create_ssl_context()


def display_url(url: str) -> str:
    """The URL without user info, query or fragment: safe to put in an error message."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def redact(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    return text


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asks us to wait, from `retry-after-ms` or `Retry-After` (`headers`
    looked up by lower-cased names)."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def api_error_message(body: bytes) -> str:
    """The API's own words from an error body (`{"error": {"message": ...}}` and the like)."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        text = body.decode("utf-8", "replace").strip()
        return text[:MAX_ERROR_CHARS] or "(empty body)"
    err: Any = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(err, dict):
        message = err.get("message") or err.get("detail") or ""
        kind = err.get("type") or err.get("code") or ""
        if isinstance(message, str) and message:
            text = f"{kind}: {message}" if isinstance(kind, str) and kind else message
            return text[:MAX_ERROR_CHARS]
    if isinstance(err, str) and err:
        return err[:MAX_ERROR_CHARS]
    return json.dumps(data)[:MAX_ERROR_CHARS]


def model_error(message: str) -> RemoteError:
    return RemoteError(ErrorCode.MODEL_ERROR, message)


def _retryable(status: int) -> bool:
    return status in RETRY_STATUSES or status >= 500


def _describe_transport_error(exc: httpx.TransportError, timeout: float) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"no reply within {timeout:g}s ({type(exc).__name__})"
    if isinstance(exc, httpx.ConnectError):
        return "cannot connect"
    return f"connection failed ({type(exc).__name__})"


class HttpxClient:
    """A user's `httpx.AsyncClient` (or one made for a proxied environment) posting as
    `H11Client` does, so `post_json` has one way to send and one place that maps failures."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    @property
    def is_closed(self) -> bool:
        return self.client.is_closed

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            await self.client.aclose()

    async def post(
        self,
        url: str,
        *,
        content: bytes,
        headers: Mapping[str, str],
        io_timeout: float | None,
        connect_timeout: float | None,
    ) -> Reply:
        response = await self.client.post(
            url,
            content=content,
            headers=headers,
            timeout=httpx.Timeout(io_timeout, connect=connect_timeout),
        )
        return Reply(response.status_code, response.headers, response.content)


ModelHttpClient = H11Client | HttpxClient


async def post_json(
    *,
    provider: str,
    url: str,
    headers: Mapping[str, str],
    body: dict[str, Any],
    request_timeout: float,
    retry: RetryPolicy,
    secrets: tuple[str, ...],
    client: httpx.AsyncClient | None = None,
) -> Any:
    """POST `body` as JSON and return the decoded JSON reply, retrying what may pass.

    Raises `RemoteError(MODEL_ERROR)` for anything that does not end in a 2xx JSON reply.
    """
    where = display_url(url)
    content = json.dumps(body, ensure_ascii=False).encode()
    send_headers = {"content-type": "application/json", "accept": "application/json"}
    send_headers.update(headers)
    connect_timeout = min(CONNECT_TIMEOUT, request_timeout)

    async def attempt(c: ModelHttpClient) -> Any:
        last = ""
        for n in range(retry.max_attempts):
            wait: float | None = None
            try:
                reply = await c.post(
                    url,
                    content=content,
                    headers=send_headers,
                    io_timeout=request_timeout,
                    connect_timeout=connect_timeout,
                )
            except httpx.UnsupportedProtocol:
                raise model_error(f"{provider}: cannot send to {where}") from None
            except httpx.LocalProtocolError:
                # A header no server may be sent (a key with a line break): never retried,
                # never quoted.
                raise model_error(
                    f"{provider}: the request to {where} cannot be sent (a malformed header)"
                ) from None
            except httpx.TransportError as exc:
                last = _describe_transport_error(exc, request_timeout)
            except httpx.DecodingError as exc:  # too large, or not decodable: never retried
                raise model_error(
                    f"{provider}: the answer from {where} is refused: {exc}"
                ) from None
            except (httpx.RequestError, httpx.InvalidURL) as exc:
                raise model_error(
                    f"{provider}: the request to {where} failed ({type(exc).__name__})"
                ) from None
            else:
                if reply.is_success:
                    try:
                        return json.loads(reply.content)
                    except ValueError:
                        raise model_error(
                            f"{provider}: the reply from {where} (HTTP {reply.status}) is not JSON"
                        ) from None
                detail = redact(api_error_message(reply.content), secrets)
                last = f"HTTP {reply.status}: {detail}"
                if not _retryable(reply.status):
                    raise model_error(f"{provider}: {where} answered {last}")
                asked = parse_retry_after(reply.headers)
                if asked is not None:
                    wait = min(asked, retry.max_retry_after)
            if n + 1 < retry.max_attempts:
                await anyio.sleep(retry.backoff(n) if wait is None else wait)
        tries = "1 attempt" if retry.max_attempts == 1 else f"{retry.max_attempts} attempts"
        raise model_error(f"{provider}: {where} failed after {tries}; last: {last}")

    if client is not None:
        return await attempt(HttpxClient(client))
    shared = pooled_client(_client)
    if shared is not None:
        return await attempt(shared)
    own = _client(0, 0.0)  # keeps no connection past its turn
    try:
        return await attempt(own)
    finally:
        await own.aclose()


def _client(max_idle: int, idle_seconds: float) -> ModelHttpClient:
    """A client as every turn's: the one verifying context, and no cookies kept: the shared
    client (`http_pool`) serves every run of its event loop, and a cookie one server set would
    otherwise go back with another run's turns (model APIs need none).

    It is `H11Client` (a fraction of httpx's cost a request) unless the environment names a
    proxy: then httpx's, which knows proxies and `NO_PROXY`, with no cookie jar that keeps any.
    """
    if not proxied(os.environ):
        return H11Client(ssl_context=_ssl_context(), max_idle=max_idle, idle_seconds=idle_seconds)
    return HttpxClient(
        httpx.AsyncClient(
            verify=_ssl_context(),
            limits=httpx.Limits(
                max_connections=None,
                max_keepalive_connections=max_idle,
                keepalive_expiry=idle_seconds,
            ),
            cookies=http.cookiejar.CookieJar(
                http.cookiejar.DefaultCookiePolicy(allowed_domains=[])
            ),
        )
    )


def proxied(env: Mapping[str, str]) -> bool:
    """Whether `env` names a proxy (`HTTPS_PROXY`, `all_proxy`, ...: any `*_proxy` but
    `no_proxy`, in either case), as httpx would read it."""
    return any(
        value and name.lower().endswith("_proxy") and name.lower() != "no_proxy"
        for name, value in env.items()
    )


def check_base_url(provider: str, url: str) -> str:
    """The base URL without a trailing slash; `ValueError` unless it is an http(s) URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"the {provider} base URL must be an http:// or https:// URL, not {display_url(url)!r}"
        )
    return url.rstrip("/")


def split_model_spec(scheme: str, rest: str) -> tuple[str, str | None]:
    """`MODEL` or `MODEL@BASE_URL` → (model, base URL or None). Raises ValueError."""
    match = re.fullmatch(r"(.*?)@(https?://.+)", rest, flags=re.DOTALL)
    model, base = (match.group(1), match.group(2)) if match else (rest, None)
    if not model.strip():
        raise ValueError(
            f"the {scheme} model needs a name: {scheme}:MODEL or {scheme}:MODEL@BASE_URL"
        )
    return model, base


def usage_count(usage: Any, key: str) -> int:
    """A token count from an API's usage object; anything but a non-negative int counts 0."""
    value = usage.get(key) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and value >= 0 else 0


class HttpModel:
    """What the HTTP providers share: configuration, the model string, and one POST per turn.

    A subclass names its scheme and environment variables, builds the request body and the
    headers, and parses the reply.
    """

    SCHEME: str
    DEFAULT_BASE_URL: str
    BASE_URL_ENV: str
    API_KEY_ENV: str
    DEFAULT_MAX_TOKENS: int | None = None
    PATH: str
    """Appended to the base URL."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        if not model:
            raise ValueError(f"the {self.SCHEME} model needs a name: {self.SCHEME}:MODEL")
        self.model = model
        self.base_url = check_base_url(self.SCHEME, base_url or self.DEFAULT_BASE_URL)
        self._api_key = api_key or None
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.max_tokens = max_tokens if max_tokens is not None else self.DEFAULT_MAX_TOKENS
        self.temperature = temperature
        self._client = client
        self._ids = itertools.count(1)

    @classmethod
    def from_spec(cls, rest: str, env: Mapping[str, str] | None = None) -> Self:
        """Build from the part after `SCHEME:` (`MODEL` or `MODEL@BASE_URL`)."""
        environ = os.environ if env is None else env
        model, base = split_model_spec(cls.SCHEME, rest)
        return cls(
            model,
            base_url=base or environ.get(cls.BASE_URL_ENV) or cls.DEFAULT_BASE_URL,
            api_key=environ.get(cls.API_KEY_ENV),
        )

    def __repr__(self) -> str:
        # Never the key.
        return f"{type(self).__name__}({self.model!r}, base_url={self.base_url!r})"

    def request_body(self, params: ModelCompleteParams) -> dict[str, Any]:
        raise NotImplementedError

    def headers(self) -> dict[str, str]:
        raise NotImplementedError

    def parse_reply(self, reply: Any) -> ModelCompleteResult:
        raise NotImplementedError

    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        reply = await post_json(
            provider=self.SCHEME,
            url=f"{self.base_url}{self.PATH}",
            headers=self.headers(),
            body=self.request_body(params),
            request_timeout=self.timeout,
            retry=self.retry,
            secrets=(self._api_key,) if self._api_key else (),
            client=self._client,
        )
        return self.parse_reply(reply)
