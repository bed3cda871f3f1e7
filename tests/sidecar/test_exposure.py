"""A sidecar safe to expose: TLS on both receivers and to the next hop (with mTLS), a bearer
token on the receivers, and a warning when it listens beyond loopback unprotected.

Certificates are made by the `openssl` command in a tmp dir; the clients are the OTel SDK's
own OTLP exporters (and raw gRPC / urllib calls where the exact status is asserted).
"""

from __future__ import annotations

import re
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.sdk.trace.export import SpanExportResult

from attest_otel.errors import PolicyError
from attest_otel.sidecar.config import load_service_config
from attest_otel.sidecar.receivers import TokenCheck, exposure_warning
from tests.sidecar.downstream import Downstream
from tests.sidecar.helpers import Sidecar, agent_run, free_port, plain_request, provider

pytestmark = pytest.mark.timeout(60)

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
TOKEN = "s3cret-Token_0123456789"


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def _ca(d: Path, name: str) -> None:
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.pem",
        "-days",
        "2",
        "-subj",
        f"/CN={name}",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        cwd=d,
    )


def _leaf(d: Path, name: str, ca: str, ext: str) -> None:
    _openssl(
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.csr",
        "-subj",
        f"/CN={name}",
        cwd=d,
    )
    # Python's default context checks strictly (VERIFY_X509_STRICT): key identifiers needed.
    (d / f"{name}.ext").write_text(
        ext + "basicConstraints=critical,CA:FALSE\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid,issuer\n"
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        f"{name}.csr",
        "-CA",
        f"{ca}.pem",
        "-CAkey",
        f"{ca}.key",
        "-CAcreateserial",
        "-out",
        f"{name}.pem",
        "-days",
        "2",
        "-extfile",
        f"{name}.ext",
        cwd=d,
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    _ca(d, "ca")
    _ca(d, "other-ca")
    _leaf(
        d,
        "server",
        "ca",
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )
    _leaf(d, "client", "ca", "extendedKeyUsage=clientAuth\n")
    return Pki(
        d / "ca.pem",
        d / "server.pem",
        d / "server.key",
        d / "client.pem",
        d / "client.key",
        d / "other-ca.pem",
    )


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


def _rejected(sidecar_metrics: str, reason: str) -> float:
    m = re.search(
        r'attest_sidecar_requests_rejected_total\{[^}]*reason="' + reason + r'"[^}]*\} ([0-9.e+]+)',
        sidecar_metrics,
    )
    return float(m.group(1)) if m else 0.0


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text: str = r.read().decode()
    return text


def _raw_export(channel: grpc.Channel, metadata: Any = None) -> grpc.StatusCode:
    call = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
    try:
        call(b"", timeout=5, metadata=metadata)
    except grpc.RpcError as e:
        code: grpc.StatusCode = e.code()
        return code
    return grpc.StatusCode.OK


def _http_post(
    url: str, context: ssl.SSLContext | None, headers: dict[str, str] | None = None
) -> int:
    request = urllib.request.Request(
        f"{url}/v1/traces",
        data=b"",
        method="POST",
        headers={"Content-Type": "application/x-protobuf", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as r:
            status: int = r.status
            return status
    except urllib.error.HTTPError as e:
        return e.code


@pytest.fixture
def tls_sidecar(
    sidecar: Sidecar, pki: Pki, token_file: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Sidecar, int]]:
    # requests lets these variables override a session's own `verify` (the HTTP exporter's
    # certificate_file), so a machine that sets them would test the wrong CA.
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    prom = free_port()
    sidecar.ca_file = pki.ca
    sidecar.extra_args = [
        "--prometheus",
        f"127.0.0.1:{prom}",
        "--tls-cert-file",
        str(pki.server_cert),
        "--tls-key-file",
        str(pki.server_key),
        "--auth-token-file",
        str(token_file),
    ]
    sidecar.start()
    yield sidecar, prom


def test_tls_and_token_sdk_exporters_get_through_others_are_refused_and_counted(
    tls_sidecar: tuple[Sidecar, int], downstream: Downstream, pki: Pki
) -> None:
    sidecar, prom = tls_sidecar
    creds = grpc.ssl_channel_credentials(root_certificates=pki.ca.read_bytes())
    auth = {"authorization": f"Bearer {TOKEN}"}

    # The right token over TLS: every span arrives, by gRPC and by HTTP.
    grpc_tp = provider(
        GrpcSpanExporter(
            endpoint=sidecar.grpc_endpoint, insecure=False, credentials=creds, headers=auth
        )
    )
    http_tp = provider(
        HttpSpanExporter(
            endpoint=f"{sidecar.http_url}/v1/traces", certificate_file=str(pki.ca), headers=auth
        )
    )
    ids: set[str] = set()
    for tp in (grpc_tp, http_tp):
        tracer = tp.get_tracer("tests.sidecar.exposure")
        ids.update(agent_run(tracer)[1])
        ids.update(plain_request(tracer)[1])
        assert tp.force_flush()
    assert downstream.wait_spans(ids), sidecar.log()
    grpc_tp.shutdown()
    http_tp.shutdown()

    # A wrong or missing token: UNAUTHENTICATED / 401, nothing forwarded.
    wrong_grpc = GrpcSpanExporter(
        endpoint=sidecar.grpc_endpoint,
        insecure=False,
        credentials=creds,
        headers={"authorization": "Bearer nope"},
    )
    wrong_http = HttpSpanExporter(
        endpoint=f"{sidecar.http_url}/v1/traces", certificate_file=str(pki.ca)
    )
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    made = TracerProvider()
    made.add_span_processor(SimpleSpanProcessor(memory))
    with made.get_tracer("t").start_as_current_span("refused"):
        pass
    for exporter in (wrong_grpc, wrong_http):
        assert exporter.export(memory.get_finished_spans()) == SpanExportResult.FAILURE
        exporter.shutdown()
    with grpc.secure_channel(sidecar.grpc_endpoint, creds) as channel:
        assert _raw_export(channel) == grpc.StatusCode.UNAUTHENTICATED
        assert (
            _raw_export(channel, (("authorization", f"Bearer {TOKEN}x"),))
            == grpc.StatusCode.UNAUTHENTICATED
        )
        assert _raw_export(channel, (("authorization", TOKEN),)) == grpc.StatusCode.UNAUTHENTICATED
        assert _raw_export(channel, (("authorization", f"Bearer {TOKEN}"),)) == grpc.StatusCode.OK
    context = sidecar.ssl_context()
    assert _http_post(sidecar.http_url, context) == 401
    assert _http_post(sidecar.http_url, context, {"Authorization": "Bearer nope"}) == 401
    assert _http_post(sidecar.http_url, context, {"Authorization": f"Bearer {TOKEN}"}) == 200

    # Plaintext clients get nowhere.
    with grpc.insecure_channel(sidecar.grpc_endpoint) as channel:
        assert (
            _raw_export(channel, (("authorization", f"Bearer {TOKEN}"),))
            == grpc.StatusCode.UNAVAILABLE
        )
    with pytest.raises((urllib.error.URLError, OSError)):
        _http_post(
            f"http://127.0.0.1:{sidecar.http_port}", None, {"Authorization": f"Bearer {TOKEN}"}
        )
    # ...nor does a client that does not trust the sidecar's CA.
    untrusting = ssl.create_default_context(cafile=str(pki.other_ca))
    with pytest.raises(urllib.error.URLError):
        _http_post(sidecar.http_url, untrusting, {"Authorization": f"Bearer {TOKEN}"})

    metrics = _metrics(prom)
    # 2 SDK exporters + 3 raw gRPC + 2 raw HTTP refusals.
    assert _rejected(metrics, "unauthenticated") >= 7, metrics
    assert _rejected(metrics, "tls_handshake") >= 1, metrics
    # Every refusal is said with its sender, once per sender and reason per 10 s: seven
    # refused requests from two kinds of sender are two lines, not seven.
    warnings = [line for line in sidecar.log().splitlines() if "level=warning" in line]
    assert warnings, sidecar.log()
    assert all("(unauthenticated)" in w and "sender=" in w for w in warnings), warnings
    assert len(warnings) <= 2, warnings
    assert sidecar.terminate() == 0


def test_mtls_receivers_and_mtls_forwarding(tmp_path: Path, pki: Pki, token_file: Path) -> None:
    server_creds = grpc.ssl_server_credentials(
        [(pki.server_key.read_bytes(), pki.server_cert.read_bytes())],
        root_certificates=pki.ca.read_bytes(),
        require_client_auth=True,
    )
    downstream = Downstream(credentials=server_creds).start()
    sidecar = Sidecar(tmp_path, f"localhost:{downstream.port}")
    sidecar.ca_file = pki.ca
    sidecar.client_cert = (pki.client_cert, pki.client_key)
    sidecar.extra_args = [
        "--tls-cert-file",
        str(pki.server_cert),
        "--tls-key-file",
        str(pki.server_key),
        "--tls-client-ca-file",
        str(pki.ca),
        "--forward-ca-file",
        str(pki.ca),
        "--forward-cert-file",
        str(pki.client_cert),
        "--forward-key-file",
        str(pki.client_key),
    ]
    try:
        sidecar.start()
        with_cert = grpc.ssl_channel_credentials(
            root_certificates=pki.ca.read_bytes(),
            private_key=pki.client_key.read_bytes(),
            certificate_chain=pki.client_cert.read_bytes(),
        )
        tp = provider(
            GrpcSpanExporter(endpoint=sidecar.grpc_endpoint, insecure=False, credentials=with_cert)
        )
        ids = set(agent_run(tp.get_tracer("tests.sidecar.mtls"))[1])
        assert tp.force_flush()
        # Forwarded over mTLS to a downstream that requires our client certificate.
        assert downstream.wait_spans(ids), sidecar.log()
        tp.shutdown()
        no_cert = grpc.ssl_channel_credentials(root_certificates=pki.ca.read_bytes())
        with grpc.secure_channel(sidecar.grpc_endpoint, no_cert) as channel:
            assert _raw_export(channel) == grpc.StatusCode.UNAVAILABLE
        no_cert_http = ssl.create_default_context(cafile=str(pki.ca))
        with pytest.raises((urllib.error.URLError, OSError)):
            _http_post(sidecar.http_url, no_cert_http)
        assert _http_post(sidecar.http_url, sidecar.ssl_context()) == 200
        assert sidecar.terminate() == 0
    finally:
        sidecar.stop_quietly()
        downstream.stop()


def test_binding_beyond_loopback_without_tls_or_token_warns_once(sidecar: Sidecar) -> None:
    sidecar.grpc_port, sidecar.http_port = free_port(), free_port()
    sidecar.extra_args = ["--grpc-endpoint", f"0.0.0.0:{sidecar.grpc_port}"]
    sidecar.start()
    assert sidecar.terminate() == 0
    warnings = [line for line in sidecar.log().splitlines() if "level=warning" in line]
    assert len(warnings) == 1, sidecar.log()
    assert "0.0.0.0" in warnings[0] and "TLS" in warnings[0] and "token" in warnings[0]


def test_exposure_warning_and_token_check_rules() -> None:
    assert exposure_warning(["127.0.0.1:4317", "[::1]:4318"], tls=False, token=False) is None
    assert exposure_warning(["localhost:4317"], tls=False, token=False) is None
    assert exposure_warning(["0.0.0.0:4317"], tls=True, token=True) is None
    only_tls = exposure_warning(["0.0.0.0:4317"], tls=True, token=False)
    assert only_tls is not None and "token" in only_tls and "TLS (" not in only_tls
    assert exposure_warning(["10.1.2.3:4317"], tls=False, token=True) is not None
    check = TokenCheck("abc")
    assert check.check("Bearer abc") and check.check(" Bearer abc ")
    assert not check.check("Bearer abcd") and not check.check(None)
    assert not check.check("bearer abc") and not check.check("Bearer \u00e9")


def test_tls_and_token_config_is_checked_whole(tmp_path: Path, pki: Pki) -> None:
    import yaml

    empty = tmp_path / "empty-token"
    empty.write_text("\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "forward": {
                    "endpoint": "collector:4317",
                    "tls": {"cert_file": str(pki.client_cert)},
                },
                "receivers": {
                    "tls": {
                        "key_file": str(pki.server_key),
                        "client_ca_file": str(tmp_path / "missing.pem"),
                    },
                    "auth_token_file": str(empty),
                },
                "content": {"mode": "redact", "max_chars": 3},
            }
        )
    )
    with pytest.raises(PolicyError) as e:
        load_service_config(cfg, environ={})
    text = str(e.value)
    for expected in (
        "receivers.tls: cert_file and key_file go together",
        "receivers.tls.client_ca_file",
        "missing.pem",
        "receivers.auth_token_file",
        "printable ASCII",
        "forward.tls: cert_file and key_file go together",
        "content.mode",
        "content.max_chars",
    ):
        assert expected in text, text
    good = load_service_config(
        None,
        {
            "forward_endpoint": "collector:4317",
            "tls_cert_file": str(pki.server_cert),
            "tls_key_file": str(pki.server_key),
            "content": "drop",
        },
        environ={},
    )
    assert good.receivers.tls_cert_file == pki.server_cert
    assert good.content.mode == "drop" and good.content.max_chars == 256


# --- the grade telemetry: TLS and whose headers (issue 16, item 1) ---------------------------


def _emit_one_grade(config: Any) -> None:
    from attest_otel.export.telemetry import build_telemetry
    from attest_otel.grade.grader import grade
    from attest_otel.model import Run, Step, ToolCall
    from attest_otel.sidecar.targets import telemetry_target

    run = Run(
        steps=[Step(tool_call=ToolCall(name="pay", output="Error: declined"))],
        agent="billing",
        trace_id="ab" * 16,
        span_id="cd" * 8,
    )
    telemetry = build_telemetry(
        spans=False, logs=True, metrics=True, prometheus=None, **telemetry_target(config)
    )
    telemetry.emit_grade(run, grade(run, judge=None), grade_span=False)
    report = telemetry.shutdown(timeout_s=10)
    assert not any(s.failed for s in report.signals), report


def test_grade_telemetry_to_the_forward_host_uses_its_tls_and_headers_and_no_other_host_does(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    server_creds = grpc.ssl_server_credentials(
        [(pki.server_key.read_bytes(), pki.server_cert.read_bytes())],
        root_certificates=pki.ca.read_bytes(),
        require_client_auth=True,
    )
    forward_host = Downstream(credentials=server_creds).start()  # mTLS only
    other_host = Downstream().start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=forward-secret")
    try:
        tls_flags = {
            "forward_ca_file": str(pki.ca),
            "forward_cert_file": str(pki.client_cert),
            "forward_key_file": str(pki.client_key),
        }
        # 1. No telemetry endpoint: log events and metrics go to the forward host, over
        # mTLS (the host refuses anything else), with the forward headers.
        config = load_service_config(
            None, {"forward_endpoint": f"localhost:{forward_host.port}", **tls_flags}
        )
        assert config.forward.headers == {"x-api-key": "forward-secret"}
        _emit_one_grade(config)
        assert forward_host.wait_for(
            lambda d: bool(d.requests["logs"]) and bool(d.requests["metrics"])
        )
        for signal in ("logs", "metrics"):
            assert {m.get("x-api-key") for m in forward_host.metadata[signal]} == {"forward-secret"}
        # 2. Another telemetry host: never the forward credentials, in cleartext as asked.
        import os

        os.environ["OTEL_EXPORTER_OTLP_HEADERS"] = "x-api-key=forward-secret"
        config = load_service_config(
            None, {"forward_endpoint": f"localhost:{forward_host.port}", **tls_flags}
        )
        config = _with_telemetry(config, endpoint=f"127.0.0.1:{other_host.port}")
        _emit_one_grade(config)
        assert other_host.wait_for(
            lambda d: bool(d.requests["logs"]) and bool(d.requests["metrics"])
        )
        seen = other_host.metadata["logs"] + other_host.metadata["metrics"]
        assert all("x-api-key" not in m for m in seen), seen
        # 3. ...and its own headers when telemetry.headers says so.
        other_host.requests["logs"].clear()
        other_host.metadata["logs"].clear()
        config = _with_telemetry(
            config, endpoint=f"127.0.0.1:{other_host.port}", headers={"x-telemetry-key": "t1"}
        )
        _emit_one_grade(config)
        assert other_host.wait_for(lambda d: bool(d.requests["logs"]))
        assert [m.get("x-telemetry-key") for m in other_host.metadata["logs"]] == ["t1"]
        assert all("x-api-key" not in m for m in other_host.metadata["logs"])
    finally:
        forward_host.stop()
        other_host.stop()


def _with_telemetry(config: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(config, telemetry=dataclasses.replace(config.telemetry, **changes))


# --- the Grader API's own token; refused requests never go downstream (item 3) ---------------


def test_the_grader_api_takes_its_own_token_and_refused_spans_never_reach_downstream(
    sidecar: Sidecar, downstream: Downstream, token_file: Path, tmp_path: Path
) -> None:
    from attest_otel._proto.attest_otel.v1 import grader_pb2, grader_pb2_grpc, result_pb2

    grader_token = tmp_path / "grader-token"
    grader_token.write_text("read-only-Token_987\n")
    sidecar.config = {"receivers": {"grader_token_file": str(grader_token)}}
    sidecar.extra_args = ["--auth-token-file", str(token_file)]
    sidecar.start()
    ingest = (("authorization", f"Bearer {TOKEN}"),)
    reader = (("authorization", "Bearer read-only-Token_987"),)
    # A refused export first, with a span id of its own...
    refused = GrpcSpanExporter(
        endpoint=sidecar.grpc_endpoint, insecure=True, headers={"authorization": "Bearer wrong"}
    )
    refused_tp = provider(refused)
    _, refused_ids = agent_run(refused_tp.get_tracer("refused"))
    refused_tp.force_flush()
    refused_tp.shutdown()
    # ...then an accepted one: once it is downstream, the refused one would have been too.
    tp = provider(
        GrpcSpanExporter(endpoint=sidecar.grpc_endpoint, insecure=True, headers=dict(ingest))
    )
    tid, ids = agent_run(tp.get_tracer("accepted"))
    tp.force_flush()
    tp.shutdown()
    assert downstream.wait_spans(set(ids)), sidecar.log()
    assert not set(refused_ids) & set(downstream.span_ids())

    with grpc.insecure_channel(sidecar.grpc_endpoint) as channel:
        stub = grader_pb2_grpc.GraderStub(channel)
        run = result_pb2.Run(task="t")
        for metadata in (None, ingest, (("authorization", "Bearer nope"),)):
            with pytest.raises(grpc.RpcError) as e:
                stub.GradeRun(run, timeout=10, metadata=metadata)
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED, metadata
            with pytest.raises(grpc.RpcError) as e:
                stub.GradeTrace(
                    grader_pb2.GradeTraceRequest(trace_id=tid), timeout=10, metadata=metadata
                )
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED, metadata
        assert stub.GradeRun(run, timeout=10, metadata=reader).check == "tool_use"
        # The read token sends no spans.
        assert _raw_export(channel, reader) == grpc.StatusCode.UNAUTHENTICATED
    assert sidecar.terminate() == 0


def test_with_only_an_ingest_token_the_grader_api_is_closed(
    sidecar: Sidecar, token_file: Path
) -> None:
    from attest_otel._proto.attest_otel.v1 import grader_pb2_grpc, result_pb2

    sidecar.extra_args = ["--auth-token-file", str(token_file)]
    sidecar.start()
    with grpc.insecure_channel(sidecar.grpc_endpoint) as channel:
        with pytest.raises(grpc.RpcError) as e:
            grader_pb2_grpc.GraderStub(channel).GradeRun(
                result_pb2.Run(task="t"),
                timeout=10,
                metadata=(("authorization", f"Bearer {TOKEN}"),),
            )
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert sidecar.terminate() == 0


def test_a_prometheus_address_beyond_loopback_warns() -> None:
    from attest_otel.sidecar.receivers import metrics_exposure_warning

    assert metrics_exposure_warning("127.0.0.1:9464") is None
    assert metrics_exposure_warning("[::1]:9464") is None
    assert metrics_exposure_warning(None) is None
    for exposed in ("0.0.0.0:9464", ":9464", "10.0.0.5:9464"):
        text = metrics_exposure_warning(exposed)
        assert text is not None and "non-loopback" in text
