"""ExporterSettings: every flag validated with a clear message, durations and addresses parsed."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from exporter.settings import Backend, ExporterSettings, parse_listen


def test_defaults_match_the_documented_ones() -> None:
    s = ExporterSettings()
    assert (s.backend, s.interval_seconds, s.max_concurrent_requests, s.attribute_processes) == (
        Backend.SIM, 5.0, 8, False)
    assert s.kubelet_socket_path == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert s.listen_address == ("0.0.0.0", 9400)
    assert s.effective_health_max_age_seconds == 15.0


@pytest.mark.parametrize(("text", "seconds"), [("5", 5.0), ("5s", 5.0), ("500ms", 0.5), ("1m", 60.0),
                                               ("1.5h", 5400.0), (2, 2.0)])
def test_durations_accept_common_units(text: str | int, seconds: float) -> None:
    assert ExporterSettings(interval_seconds=text).interval_seconds == seconds


@pytest.mark.parametrize(("text", "address"), [("127.0.0.1:9400", ("127.0.0.1", 9400)), (":9400", ("0.0.0.0", 9400)),
                                               ("[::1]:0", ("::1", 0)), ("node-a:1", ("node-a", 1))])
def test_listen_addresses(text: str, address: tuple[str, int]) -> None:
    assert parse_listen(text) == address


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"interval_seconds": "soon"}, "not a duration"),
        ({"interval_seconds": "0s"}, "greater than 0"),
        ({"listen": "9400"}, "HOST:PORT"),
        ({"listen": "h:70000"}, "out of range"),
        ({"tls_cert_file": "c.pem"}, "given together"),
        ({"kubelet_socket": "tcp://1.2.3.4"}, "unix:///path"),
        ({"max_concurrent_requests": 0}, "greater than or equal to 1"),
        ({"backend": "gpu"}, "'sim', 'nvml' or 'auto'"),
        ({"colour": "blue"}, "Extra inputs are not permitted"),
    ],
)
def test_bad_settings_are_rejected_with_the_reason(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ExporterSettings.model_validate(fields)


def test_health_age_follows_the_interval_unless_set() -> None:
    assert ExporterSettings(interval_seconds=30).effective_health_max_age_seconds == 90.0
    assert ExporterSettings.model_validate({"health_max_age_seconds": "2m"}).effective_health_max_age_seconds == 120.0


@pytest.mark.parametrize(
    ("protocol", "endpoint", "ok"),
    [("http", "http://collector:4318", True), ("http", "https://collector.example/otlp", True),
     ("http", "notaurl", False), ("http", "collector:4318", False), ("http", "ftp://collector", False),
     ("grpc", "collector:4317", True), ("grpc", "http://collector:4317", True), ("grpc", "notaurl", False)],
)
def test_the_otlp_endpoint_is_checked_at_start(protocol: str, endpoint: str, ok: bool) -> None:
    """A bad --otlp-endpoint is refused when the exporter starts, not logged every cycle."""
    if ok:
        assert ExporterSettings(otlp_protocol=protocol, otlp_endpoint=endpoint).otlp_endpoint == endpoint
    else:
        with pytest.raises(ValidationError, match="--otlp-endpoint"):
            ExporterSettings(otlp_protocol=protocol, otlp_endpoint=endpoint)
