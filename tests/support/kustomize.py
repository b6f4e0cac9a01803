"""The kustomizations gpulens ships, rendered by the real ``kubectl kustomize``, and the commands they run.

Rendered: ``deploy/base``, every overlay under ``deploy/overlays``, and the example overlay of
docs/install.md (written next to a copy of ``deploy/``, as a user would). kubectl 1.20 (Debian's
kubernetes-client) embeds kustomize v2, which knows neither ``labels`` nor ``patches``: an older
kustomize skips these tests loudly, or fails them under ``CI=true``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from tests.support.prometheus import missing

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
GUIDE = ROOT / "docs" / "install.md"
GUIDE_OVERLAY_MARKER = "# deploy/overlays/my-cluster/kustomization.yaml\n"
IMAGE_NAME = "ghcr.io/gpulens/gpulens"  # the name in deploy/base that overlays replace
MIN_KUSTOMIZE = (4, 1)  # `labels` (kustomize 4.1)


@cache
def kubectl() -> str:
    """Path of a kubectl whose kustomize renders our kustomizations (skips or fails otherwise)."""
    path = shutil.which("kubectl")
    if path is None:
        missing("kubectl not on PATH (Debian: apt-get install kubernetes-client; scripts/dev test does it when root)")
    out = subprocess.run([path, "version", "--client"], capture_output=True, text=True, timeout=60).stdout
    found = re.search(r"Kustomize Version: v(\d+)\.(\d+)", out)
    if found is None or (int(found[1]), int(found[2])) < MIN_KUSTOMIZE:
        missing(f"{path} embeds no kustomize >= {'.'.join(map(str, MIN_KUSTOMIZE))} ({out.strip()!r}): "
                "install kubectl >= 1.21 (pkgs.k8s.io)")
    return path


def render(directory: Path) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize directory`` renders."""
    result = subprocess.run([kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"kubectl kustomize {directory}: {result.stderr}"
    return [obj for obj in yaml.safe_load_all(result.stdout) if obj]


def guide_overlay() -> str:
    """The text of the example overlay in docs/install.md."""
    guide = GUIDE.read_text(encoding="utf-8")
    block = guide[guide.index(GUIDE_OVERLAY_MARKER):]
    return block[: block.index("```")]


def write_guide_overlay(where: Path) -> Path:
    """A copy of ``deploy/`` under ``where`` with the guide's overlay at deploy/overlays/my-cluster."""
    shutil.copytree(DEPLOY, where / "deploy", ignore=shutil.ignore_patterns("*.py", "tests"))
    overlay = where / "deploy" / "overlays" / "my-cluster"
    overlay.mkdir(parents=True)
    (overlay / "kustomization.yaml").write_text(guide_overlay(), encoding="utf-8")
    return overlay


RELEASE_OVERLAY = DEPLOY / "overlays" / "release"  # what `make release-manifests` writes by default (ignored by git)


def shipped_kustomizations() -> list[Path]:
    """deploy/base and every overlay under deploy/overlays but a written release overlay."""
    overlays = (p.parent for p in (DEPLOY / "overlays").glob("*/kustomization.yaml"))
    return [DEPLOY / "base", *sorted(p for p in overlays if p != RELEASE_OVERLAY)]


def pod_spec(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The pod template's spec of a workload, None for other kinds."""
    if obj["kind"] == "CronJob":
        spec: dict[str, Any] = obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        return spec
    if obj["kind"] in {"DaemonSet", "Deployment", "StatefulSet", "Job"}:
        spec = obj["spec"]["template"]["spec"]
        return spec
    return None


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """Init containers, then containers, of a workload."""
    spec = pod_spec(obj)
    if spec is None:
        return []
    return [*spec.get("initContainers", []), *spec["containers"]]


@dataclass(frozen=True)
class GpulensCommand:
    """A container that runs the image's entry point, ``gpulens``, with its ``args``."""

    where: str  # kind/name:container
    image: str
    args: tuple[str, ...]


def gpulens_commands(objects: list[dict[str, Any]], image_name: str = IMAGE_NAME) -> Iterator[GpulensCommand]:
    """Every container of ``objects`` that runs image ``image_name`` through its entry point (no ``command``)."""
    for obj in objects:
        for container in containers(obj):
            if container["image"].rpartition(":")[0] != image_name or "command" in container:
                continue
            yield GpulensCommand(f"{obj['kind']}/{obj['metadata']['name']}:{container['name']}",
                                 container["image"], tuple(container.get("args", ())))
