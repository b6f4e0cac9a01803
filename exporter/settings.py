"""Settings of the per-node exporter (``gpulens exporter``): one pydantic model, validated with clear errors."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpulens.core.timeparse import duration_seconds

DEFAULT_KUBELET_SOCKET = "unix:///var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_LISTEN = "0.0.0.0:9400"


class Backend(StrEnum):
    """Where device readings come from. ``auto`` means NVML or a clear failure, never the simulator."""

    SIM = "sim"
    NVML = "nvml"
    AUTO = "auto"


class OtlpProtocol(StrEnum):
    """OTLP transport: ``http`` (protobuf over HTTP, ``/v1/metrics`` and ``/v1/traces``) or ``grpc``."""

    HTTP = "http"
    GRPC = "grpc"


class LogLevel(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


def parse_listen(value: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:9400`` for IPv6, ``:9400`` for all interfaces) -> (host, port)."""
    text = value.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(f"listen address must be HOST:PORT, got {value!r}")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"port out of range in {value!r}")
    host = host.strip("[]") or "0.0.0.0"
    return host, port


def check_otlp_endpoint(value: str, *, grpc: bool = False) -> None:
    """An OTLP endpoint is an ``http://`` or ``https://`` URL with a host (``http://collector:4318``);
    over gRPC a bare ``host:port`` is accepted too. Raises ValueError naming ``--otlp-endpoint``."""
    text = value.strip()
    parts = urlsplit(text if "://" in text or not grpc else "grpc://" + text)
    example = "http://otel-collector:4317 or otel-collector:4317" if grpc else "http://otel-collector:4318"
    if parts.scheme not in ("http", "https", *(("grpc",) if grpc else ())) or not parts.hostname:
        raise ValueError(f"--otlp-endpoint: not a URL: {value!r} (use e.g. {example})")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"--otlp-endpoint: bad port in {value!r}") from None
    if parts.scheme == "grpc" and port is None:
        raise ValueError(f"--otlp-endpoint: not a URL or HOST:PORT: {value!r} (use e.g. {example})")


class ExporterSettings(BaseModel):
    """Everything ``gpulens exporter`` needs; each field has a matching command-line flag."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Backend = Backend.SIM
    listen: str = DEFAULT_LISTEN
    """``HOST:PORT`` to serve ``/metrics`` and ``/healthz`` on (port 0 picks a free port)."""
    scenario: Path | None = None
    """Simulator scenario YAML (``--backend sim``); None = the built-in default scenario."""
    node: str | None = None
    """Node name: for the simulator, which node of the scenario; for NVML, the Kubernetes node name."""
    interval_seconds: float = Field(default=5.0, gt=0)
    kubelet_socket: str = DEFAULT_KUBELET_SOCKET
    kubelet_timeout_seconds: float = Field(default=2.0, gt=0)
    tenancy_config: Path | None = None
    """YAML of tenant-resolution rules (order of pod label, Kueue queue, vCluster, Capsule, namespace)."""
    otlp_endpoint: str | None = None
    """OTLP base URL (``/v1/metrics`` and ``/v1/traces`` are appended for HTTP); None = no OTLP export."""
    otlp_protocol: OtlpProtocol = OtlpProtocol.HTTP
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    basic_auth_file: Path | None = None
    """File of ``user:<bcrypt hash>`` lines (legacy ``user:<sha256 hex>`` still read, with a warning); when
    set, everything but ``/healthz`` needs HTTP basic auth."""
    web_config_file: Path | None = None
    """exporter-toolkit web config YAML (``--web.config.file``): TLS and bcrypt basic-auth users."""
    write_timeout_seconds: float = Field(default=10.0, gt=0)
    """Longest time one answer may take to write; a client that does not read is then disconnected."""
    max_concurrent_requests: int = Field(default=8, ge=1)
    """Requests served at once; beyond it the exporter answers 503 at once instead of queueing."""
    attribute_processes: bool = False
    """Attribute shared GPUs per pod from processes (needs hostPID); off by default."""
    health_max_age_seconds: float | None = Field(default=None, gt=0)
    """``/healthz`` is 503 when the last successful cycle is older; None = 3 x interval (at least 15 s)."""
    log_level: LogLevel = LogLevel.INFO

    @field_validator("interval_seconds", "kubelet_timeout_seconds", "health_max_age_seconds",
                     "write_timeout_seconds", mode="before")
    @classmethod
    def _durations(cls, value: object) -> object:
        if isinstance(value, str):
            return duration_seconds(value)
        return value

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        parse_listen(value)
        return value

    @field_validator("kubelet_socket")
    @classmethod
    def _socket(cls, value: str) -> str:
        if not value.startswith(("unix://", "/")):
            raise ValueError(f"kubelet socket must be unix:///path or /path, got {value!r}")
        return value

    @model_validator(mode="after")
    def _tls_pair(self) -> ExporterSettings:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("--tls-cert-file and --tls-key-file must be given together")
        if self.otlp_endpoint is not None:
            check_otlp_endpoint(self.otlp_endpoint, grpc=self.otlp_protocol is OtlpProtocol.GRPC)
        older = [flag for flag, value in (("--tls-cert-file", self.tls_cert_file), ("--tls-key-file", self.tls_key_file),
                                          ("--basic-auth-file", self.basic_auth_file)) if value is not None]
        if self.web_config_file is not None and older:
            raise ValueError(f"--web.config.file replaces {', '.join(older)}: put TLS and users in the web "
                             "config file and drop the older flags")
        return self

    @property
    def listen_address(self) -> tuple[str, int]:
        """``listen`` parsed into (host, port)."""
        return parse_listen(self.listen)

    @property
    def kubelet_socket_path(self) -> str:
        """Filesystem path of the kubelet socket (``unix://`` stripped)."""
        return self.kubelet_socket.removeprefix("unix://")

    @property
    def effective_health_max_age_seconds(self) -> float:
        if self.health_max_age_seconds is not None:
            return self.health_max_age_seconds
        return max(3.0 * self.interval_seconds, 15.0)
