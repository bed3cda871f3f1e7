"""The one HTTP client the trace sources share: bounded in time and size, errors in one line.

Built on `httpx2` (the maintained successor of httpx, already installed as the `anthropic`
SDK's transport) rather than urllib, for three things a user behind a corporate network
needs and urllib does not give together: the system trust store (via truststore), the
standard proxy variables, and precise connect/read/TLS errors to translate.

Four promises on top of httpx2's per-operation timeouts: the whole request, body included,
ends within about `timeout_s` (a server dribbling one byte a second cannot hold us); so
does parsing it (`HttpClient.parse`): the parse runs on a thread of its own and is waited
for until the request's deadline, no longer. A parser in C (`json.loads`) holds the
interpreter until it returns, so the wait cannot end inside it: a body that could not even
be parsed in the time left at `PARSE_BYTES_PER_S` is refused before parsing starts. A body larger
than `max_body_bytes` is refused rather than buffered; and redirects are followed only
within the same origin (scheme, host, port), since the request carries the user's headers
(an API key, a tenant id) and httpx2 would take them to any host. Every
failure leaves as a `SourceError` whose message names the backend and URL: a CLI user sees
one line.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import urljoin, urlsplit

import httpx2

from attest_otel.errors import SourceError, UsageError
from attest_otel.sources.base import first_line
from attest_otel.yamlfile.read import header_problem

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_TIMEOUT_S",
    "HttpClient",
    "HttpOptions",
    "Response",
    "http_error",
    "parse_headers",
    "unexpected_body",
]

_log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_BODY_BYTES = 256 * 1024 * 1024
"""Same bound as the decoder's gzip limit: a trace bigger than this is not one we grade."""
PARSE_BYTES_PER_S = 5 * 1024 * 1024
"""What the sources parse per second at worst (JSON to spans; measured in
docs/hostile-input-network.md): a body needs len/this seconds of the time budget left."""
T = TypeVar("T")
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_MAX_REDIRECTS = 5


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or (443 if scheme == "https" else 80)


def parse_headers(values: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """`--header` values, `K=V` (or `K: V`, as curl writes them) -> (name, value) pairs.

    Repeats are kept in order: some gateways want a header twice, and the last
    `Authorization` wins only if the user wrote it last.
    """
    out: list[tuple[str, str]] = []
    for raw in values:
        eq, colon = raw.find("="), raw.find(":")
        cut = min(i for i in (eq, colon) if i != -1) if eq != -1 or colon != -1 else -1
        name = raw[:cut].strip() if cut > 0 else ""
        if not name or any(c.isspace() for c in name):
            raise UsageError(
                f"--header {raw!r}: expected NAME=VALUE, e.g. 'Authorization=Bearer <token>'"
            )
        value = raw[cut + 1 :].strip()
        problem = header_problem(name, value)
        if problem:
            raise UsageError(f"--header {name}: {problem}")
        out.append((name, value))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class HttpOptions:
    """How to reach a backend: headers for auth, TLS material, and the time budget."""

    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = DEFAULT_TIMEOUT_S
    """Whole request, body included (connect, TLS, headers and every read)."""
    ca_file: str | None = None
    """PEM bundle to trust instead of the system store (a private CA)."""
    client_cert: str | None = None
    """PEM client certificate for mutual TLS (the key may be in the same file)."""
    client_key: str | None = None
    insecure: bool = False
    """Skip certificate verification (a test box with a self-signed certificate)."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise UsageError(f"--timeout must be positive, got {self.timeout_s:g}")
        if self.client_key and not self.client_cert:
            raise UsageError("--client-key needs --client-cert")
        if self.insecure and self.ca_file:
            raise UsageError("--insecure and --ca-file contradict each other: choose one")

    def has_header(self, name: str) -> bool:
        lowered = name.lower()
        return any(k.lower() == lowered for k, _ in self.headers)

    def ssl_context(self) -> ssl.SSLContext | bool:
        """What httpx2 takes as `verify`: False, True (its default trust store) or a context."""
        if self.insecure:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif self.ca_file:
            try:
                ctx = ssl.create_default_context(cafile=self.ca_file)
            except (OSError, ssl.SSLError) as e:
                raise UsageError(
                    f"--ca-file {self.ca_file}: cannot load: {_ssl_reason(e)}"
                ) from None
        elif self.client_cert:
            ctx = httpx2.create_ssl_context(verify=True)
        else:
            return True
        if self.client_cert:
            try:
                ctx.load_cert_chain(self.client_cert, self.client_key)
            except (OSError, ssl.SSLError) as e:
                raise UsageError(
                    f"--client-cert {self.client_cert}: cannot load: {_ssl_reason(e)}"
                ) from None
        return ctx


def _ssl_reason(e: BaseException) -> str:
    if isinstance(e, ssl.SSLError):
        return e.reason or str(e)
    if isinstance(e, OSError):
        return e.strerror or str(e)
    return str(e)


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    url: str
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    """Lowercase names."""
    deadline: float = float("inf")
    """When the request's --timeout ends (monotonic); `HttpClient.parse` holds the parse
    of the body to it."""

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    @property
    def is_json(self) -> bool:
        media = self.content_type.split(";", 1)[0].strip().lower()
        if media:
            return media == "application/json" or media.endswith("+json")
        return self.body.lstrip()[:1] in (b"{", b"[")

    def snippet(self) -> str:
        return first_line(self.body) or "(empty body)"


class HttpClient:
    """GET with one time budget per request; `backend` ("jaeger", ...) names it in errors."""

    def __init__(self, backend: str, options: HttpOptions | None = None) -> None:
        self.backend = backend
        self.options = options or HttpOptions()
        self._client: httpx2.Client | None = None

    def _get_client(self) -> httpx2.Client:
        if self._client is None:
            self._client = httpx2.Client(
                headers=list(self.options.headers),
                timeout=httpx2.Timeout(self.options.timeout_s),
                verify=self.options.ssl_context(),
                follow_redirects=False,
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def get(
        self,
        url: str,
        *,
        accept: str | None = None,
        params: Mapping[str, str | int | list[str]] | None = None,
    ) -> Response:
        """The response, whatever its status; transport failures raise SourceError."""
        deadline = time.monotonic() + self.options.timeout_s
        for _ in range(_MAX_REDIRECTS + 1):
            response = self._get_once(url, accept, params, deadline)
            location = response.headers.get("location")
            if response.status not in _REDIRECTS or not location:
                return response
            target = urljoin(response.url, location)
            if _origin(target) != _origin(response.url):
                raise SourceError(
                    f"{self.backend} at {url}: redirected to another origin ({target}); not "
                    "followed, since the request's headers would go there (use that URL)"
                )
            url, params = target, None
        raise SourceError(f"{self.backend} at {url}: more than {_MAX_REDIRECTS} redirects")

    def _get_once(
        self,
        url: str,
        accept: str | None,
        params: Mapping[str, str | int | list[str]] | None,
        deadline: float,
    ) -> Response:
        client = self._get_client()
        timeout_s = self.options.timeout_s
        headers = {"Accept": accept} if accept else None
        where = f"{self.backend} at {url}"
        try:
            with client.stream("GET", url, headers=headers, params=params) as r:
                chunks: list[bytes] = []
                size = 0
                for chunk in r.iter_bytes():
                    size += len(chunk)
                    if size > self.options.max_body_bytes:
                        raise SourceError(
                            f"{where}: the response is larger than "
                            f"{self.options.max_body_bytes} bytes; refusing to read it all"
                        )
                    chunks.append(chunk)
                    if time.monotonic() > deadline:
                        raise SourceError(
                            f"{where}: the response did not finish within {timeout_s:g}s "
                            "(--timeout)"
                        )
                left = deadline - time.monotonic()
                if r.status_code == 200 and size > PARSE_BYTES_PER_S * max(left, 0.0):
                    raise SourceError(
                        f"{where}: the response is {size / 1048576:.0f} MiB, too large to "
                        f"parse in the {max(left, 0.0):.1f}s left of --timeout "
                        f"{timeout_s:g} (about {PARSE_BYTES_PER_S // 1048576} MiB/s); "
                        "raise --timeout or ask for less"
                    )
                return Response(
                    status=r.status_code,
                    url=str(r.url),
                    body=b"".join(chunks),
                    headers={k.lower(): v for k, v in r.headers.items()},
                    deadline=deadline,
                )
        except httpx2.TimeoutException as e:
            phase = "connect" if isinstance(e, httpx2.ConnectTimeout) else "answer"
            raise SourceError(f"{where}: no {phase} within {timeout_s:g}s (--timeout)") from None
        except httpx2.ConnectError as e:
            raise SourceError(f"cannot connect to {where}: {_connect_reason(e)}") from None
        except httpx2.RemoteProtocolError as e:
            raise SourceError(
                f"{where}: the server closed the connection mid-response "
                f"(truncated body: {first_line(str(e), 100)})"
            ) from None
        except httpx2.DecodingError as e:
            raise SourceError(f"{where}: cannot decompress the response: {e}") from None
        except httpx2.UnsupportedProtocol:
            raise UsageError(f"{self.backend} URL {url!r}: expected http:// or https://") from None
        except httpx2.InvalidURL as e:
            raise UsageError(f"{self.backend} URL {url!r} is not valid: {e}") from None
        except httpx2.HTTPError as e:
            text = first_line(str(e))
            if "CERTIFICATE_REQUIRED" in text.upper():
                raise SourceError(
                    f"{where}: TLS failed: the server wants a client certificate "
                    "(--client-cert, --client-key)"
                ) from None
            raise SourceError(f"{where}: {type(e).__name__}: {text}") from None

    def parse(self, r: Response, parse: Callable[[], T]) -> T:
        """`parse()`, which reads `r`'s body, within what is left of the request's
        --timeout; past it a `SourceError` says so, and the parse is left to end on its own
        (the CLI exits on the error). What `parse` raises is raised here."""
        done = threading.Event()
        box: list[Any] = []
        failed: list[BaseException] = []

        def target() -> None:
            try:
                box.append(parse())
            except BaseException as e:  # re-raised in the caller's thread
                failed.append(e)
            finally:
                done.set()

        threading.Thread(target=target, name="attest-otel-parse", daemon=True).start()
        if not done.wait(max(0.0, r.deadline - time.monotonic())):
            timeout_s = self.options.timeout_s
            raise SourceError(
                f"{self.backend} at {r.url}: reading the response "
                f"({len(r.body) / 1048576:.1f} MiB) did not finish within --timeout "
                f"{timeout_s:g}s, parsing included; raise --timeout or ask for less"
            )
        if failed:
            raise failed[0]
        value: T = box[0]
        return value


def _connect_reason(e: BaseException) -> str:
    text = str(e)
    cause = e.__context__ or e.__cause__
    while cause is not None and not text:
        text = str(cause)
        cause = cause.__context__ or cause.__cause__
    lowered = text.lower()
    if "refused" in lowered:
        return "connection refused (is it running, and is this the query port?)"
    if "certificate" in lowered or "ssl" in lowered or "tls" in lowered:
        return f"TLS failed: {first_line(text, 120)} (see --ca-file, --insecure)"
    if "name or service not known" in lowered or "nodename nor servname" in lowered:
        return f"unknown host ({first_line(text, 80)})"
    return first_line(text, 160) or type(e).__name__


def http_error(backend: str, location: str, r: Response, credentials: str) -> SourceError:
    """A backend's non-200 answer as one line; a refusal says how to pass `credentials`."""
    if r.status in (401, 403):
        return SourceError(
            f"{backend} at {location} refused access (HTTP {r.status}): pass credentials with "
            f"--header, e.g. {credentials}"
        )
    return SourceError(f"{backend} at {location} answered HTTP {r.status}: {r.snippet()}")


def unexpected_body(backend: str, location: str, r: Response, problem: str) -> SourceError:
    """A 200 answer that is not what the API promises, named with its URL."""
    return SourceError(f"unexpected body from {backend} at {location} ({r.url}): {problem}")
