"""The shared HTTP client and `--from` parsing: headers, TLS (private CA, mutual TLS,
--insecure), size bound, ids and source names, each failure one line."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from attest_otel.errors import SourceError, UsageError
from attest_otel.sources import (
    HttpOptions,
    normalize_trace_id,
    parse_headers,
    parse_source,
)
from attest_otel.sources.http import HttpClient
from attest_otel.sources.store_source import StoreSource
from tests.sources.fake_http import FakeBackend, Reply


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param(
            ["Authorization=Bearer a=b"],
            (("Authorization", "Bearer a=b"),),
            id="the first equals sign splits name from value",
        ),
        pytest.param(
            ["X-Scope-OrgID: tenant-1"],
            (("X-Scope-OrgID", "tenant-1"),),
            id="curl's colon form is accepted",
        ),
        pytest.param(["A=1", "A=2"], (("A", "1"), ("A", "2")), id="repeated headers are all kept"),
        pytest.param(["X-Empty="], (("X-Empty", ""),), id="an empty value is allowed"),
    ],
)
def test_header_values_parse_into_name_value_pairs(
    values: list[str], expected: tuple[tuple[str, str], ...]
) -> None:
    assert parse_headers(values) == expected


@pytest.mark.parametrize("bad", ["novalue", "=x", "two words=x"])
def test_a_header_without_a_name_is_a_usage_error(bad: str) -> None:
    with pytest.raises(UsageError, match="expected NAME=VALUE"):
        parse_headers([bad])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "0AF7651916CD43DD8448EB211C80319C",
            "0af7651916cd43dd8448eb211c80319c",
            id="upper case is lowered",
        ),
        pytest.param(
            "8448eb211c80319c", "00000000000000008448eb211c80319c", id="a 64-bit id is left-padded"
        ),
        pytest.param(
            " 0x8448eb211c80319c ",
            "00000000000000008448eb211c80319c",
            id="blanks and a 0x prefix are dropped",
        ),
    ],
)
def test_trace_ids_are_normalised_to_32_lowercase_hex_digits(text: str, expected: str) -> None:
    assert normalize_trace_id(text) == expected


@pytest.mark.parametrize("bad", ["", "xyz", "0" * 32, "1" * 33])
def test_a_trace_id_that_is_not_one_is_a_usage_error(bad: str) -> None:
    with pytest.raises(UsageError, match="trace ID"):
        normalize_trace_id(bad)


@pytest.mark.parametrize(
    ("text", "kind", "location"),
    [
        pytest.param("jaeger:http://j:16686", "jaeger", "http://j:16686", id="jaeger with a URL"),
        pytest.param(
            "tempo:localhost:3200",
            "tempo",
            "http://localhost:3200",
            id="a bare host and port means plain http",
        ),
        pytest.param(
            "phoenix:https://px.example/base#proj",
            "phoenix",
            "https://px.example/base#proj",
            id="phoenix keeps its project fragment",
        ),
        pytest.param("file:traces.jsonl", "file", "traces.jsonl", id="file takes a path"),
        pytest.param("store:/tmp/s.db", "store", "/tmp/s.db", id="store takes a path"),
    ],
)
def test_from_values_name_a_kind_and_where(text: str, kind: str, location: str) -> None:
    source = parse_source(text)
    assert (source.kind, source.location) == (kind, location)


def test_store_without_a_path_is_the_sidecars_default_store(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    source = parse_source("store:")
    assert isinstance(source, StoreSource)
    assert source.path == tmp_path / "attest-otel" / "store.db"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "zipkin:http://z",
            "expected one of store:, jaeger:, tempo:, phoenix:, file:",
            id="an unknown kind lists the known ones",
        ),
        pytest.param("http://jaeger:16686", "expected one of", id="a bare URL needs a kind"),
        pytest.param("jaeger:", "needs a URL", id="a kind without a URL"),
        pytest.param("tempo:ftp://t", "http:// or https://", id="a URL that is not http"),
        pytest.param("file:", "needs a path", id="file without a path"),
    ],
)
def test_bad_from_values_are_usage_errors(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_source(text)


def test_a_body_over_the_size_bound_is_refused(backend: FakeBackend) -> None:
    backend.routes["/big"] = Reply(body=b"x" * 5000)
    with (
        HttpClient("tempo", HttpOptions(max_body_bytes=1000)) as client,
        pytest.raises(SourceError, match="larger than 1000 bytes"),
    ):
        client.get(f"{backend.url}/big")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param({"timeout_s": 0}, "--timeout must be positive", id="a zero timeout"),
        pytest.param(
            {"client_key": "k.pem"},
            "--client-key needs --client-cert",
            id="a key without a certificate",
        ),
        pytest.param(
            {"insecure": True, "ca_file": "ca.pem"},
            "contradict",
            id="insecure and a CA file together",
        ),
    ],
)
def test_contradictory_http_options_are_usage_errors(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        HttpOptions(**options)  # type: ignore[arg-type]


# -- TLS ------------------------------------------------------------------------------------


@dataclass
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    if shutil.which("openssl") is None:
        pytest.fail("the openssl command is needed to make test certificates")
    d = tmp_path_factory.mktemp("pki")
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        cwd=d,
    )
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    for who in ("server", "client"):
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN={who}",
            "-keyout",
            f"{who}.key",
            "-out",
            f"{who}.csr",
            cwd=d,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{who}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            f"{who}.pem",
            cwd=d,
        )
    return Pki(d / "ca.pem", d / "server.pem", d / "server.key", d / "client.pem", d / "client.key")


def _tls_backend(pki: Pki, *, require_client_cert: bool) -> FakeBackend:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki.server_cert, pki.server_key)
    if require_client_cert:
        ctx.load_verify_locations(pki.ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    server = FakeBackend({"/ok": Reply(body=b"{}")}, tls=ctx)
    return server.start()


@pytest.fixture
def tls_backend(pki: Pki) -> Iterator[FakeBackend]:
    server = _tls_backend(pki, require_client_cert=False)
    yield server
    server.stop()


@pytest.fixture
def mtls_backend(pki: Pki) -> Iterator[FakeBackend]:
    server = _tls_backend(pki, require_client_cert=True)
    yield server
    server.stop()


def _get(url: str, **options: object) -> int:
    with HttpClient("jaeger", HttpOptions(timeout_s=5, **options)) as client:  # type: ignore[arg-type]
        return client.get(url).status


def test_a_certificate_from_an_unknown_ca_fails_in_one_line_pointing_at_the_tls_flags(
    tls_backend: FakeBackend,
) -> None:
    with pytest.raises(SourceError, match=r"TLS failed: .*\(see --ca-file, --insecure\)$"):
        _get(f"{tls_backend.url}/ok")


def test_the_private_ca_given_with_ca_file_is_trusted(tls_backend: FakeBackend, pki: Pki) -> None:
    assert _get(f"{tls_backend.url}/ok", ca_file=str(pki.ca)) == 200


def test_insecure_skips_verification(tls_backend: FakeBackend) -> None:
    assert _get(f"{tls_backend.url}/ok", insecure=True) == 200


def test_mutual_tls_sends_the_client_certificate(mtls_backend: FakeBackend, pki: Pki) -> None:
    assert (
        _get(
            f"{mtls_backend.url}/ok",
            ca_file=str(pki.ca),
            client_cert=str(pki.client_cert),
            client_key=str(pki.client_key),
        )
        == 200
    )


def test_a_server_wanting_a_client_certificate_refuses_one_line_without_it(
    mtls_backend: FakeBackend, pki: Pki
) -> None:
    with pytest.raises(SourceError, match=r"wants a client certificate \(--client-cert"):
        _get(f"{mtls_backend.url}/ok", ca_file=str(pki.ca))


def test_an_unreadable_ca_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"--ca-file .*cannot load"):
        HttpOptions(ca_file=str(tmp_path / "missing.pem")).ssl_context()


def test_a_body_too_large_to_parse_in_the_time_left_is_refused_before_parsing(
    backend: FakeBackend,
) -> None:
    """Issue 26, item 9: a 200 MiB answer was read within --timeout 10, then parsed for 36 s
    outside it. Parsing cannot be interrupted, so a body that cannot be parsed in the time
    left is refused before it starts, with what to do."""
    backend.routes["/huge"] = Reply(body=b"[" + b"0," * (12 * 1024 * 1024) + b"0]")
    started = time.monotonic()
    with (
        HttpClient("jaeger", HttpOptions(timeout_s=2.0)) as client,
        pytest.raises(
            SourceError, match=r"too large to parse in the .* --timeout 2 .*raise --timeout"
        ),
    ):
        client.get(f"{backend.url}/huge")
    assert time.monotonic() - started < 2.0
    backend.routes["/small"] = Reply(body=b"[" + b"0," * 1000 + b"0]")
    with HttpClient("jaeger", HttpOptions(timeout_s=2.0)) as client:
        assert client.get(f"{backend.url}/small").status == 200
