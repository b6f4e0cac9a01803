"""The image of the Dockerfile, built with `make image` (buildah) and run as the manifests run it.

Built on a Debian base made with mmdebstrap (no registry needed; pip inside the build reaches PyPI).
Every container runs read-only, as UID 65532 unless it says otherwise, with /data and /tmp writable.
"""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.exporter import http_get, stop_process, wait_healthy
from tests.support.image import IMAGE, Buildah, base_image, make_image, read_only_container, require_tools
from tests.support.kustomize import gpulens_commands, render, shipped_kustomizations, write_guide_overlay
from tests.support.prometheus import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # a first build installs the dependencies from PyPI

ROOT = Path(__file__).resolve().parents[1]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
TAGGED = f"{IMAGE}:{VERSION}"


def source_commit() -> str:
    """HEAD, with -dirty for uncommitted changes to tracked files, as `make image` bakes it in."""
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    clean = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", "HEAD", "--"], check=False).returncode == 0
    return head if clean else f"{head}-dirty"


@pytest.fixture(scope="module")
def buildah() -> Buildah:
    return require_tools()


@dataclass(frozen=True)
class Built:
    image: str
    commit: str  # of the tree when it was built


@pytest.fixture(scope="module")
def built(buildah: Buildah) -> Built:
    base = base_image(buildah)
    commit = source_commit()
    made = make_image(buildah, base)
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-3000:]
    return Built(TAGGED, commit)


@pytest.fixture
def volumes(tmp_path: Path) -> dict[str, Path]:
    return {"/data": tmp_path / "data", "/tmp": tmp_path / "tmp"}


def test_make_image_tags_the_package_version_and_labels_version_commit_and_source(buildah: Buildah, built: Built) -> None:
    config = buildah.image_config(built.image)["config"]
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == VERSION
    assert labels["org.opencontainers.image.revision"] == built.commit
    assert labels["org.opencontainers.image.source"].startswith("https://")
    assert config["Entrypoint"] == ["gpulens"]
    assert config["User"] == "65532:65532"


def test_the_image_prints_the_version_and_the_commit_it_was_built_from(
        buildah: Buildah, built: Built, volumes: dict[str, Path]) -> None:
    with read_only_container(buildah, built.image, volumes) as container:
        ran = container.run("--version")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == f"gpulens {VERSION} (commit {built.commit})"


def test_the_image_runs_as_the_non_root_user_on_a_read_only_root(
        buildah: Buildah, built: Built, volumes: dict[str, Path]) -> None:
    with read_only_container(buildah, built.image, volumes) as container:
        ran = container.run("sh", "-c", "id -u; touch /data/ok; touch /opt/gpulens/x", entrypoint=False)
    assert ran.stdout.split()[0] == "65532"
    assert (volumes["/data"] / "ok").stat().st_uid == 65532
    assert "Read-only file system" in ran.stderr and ran.returncode != 0


def test_the_image_holds_no_compiler_pip_build_tree_or_cache(
        buildah: Buildah, built: Built, volumes: dict[str, Path]) -> None:
    with read_only_container(buildah, built.image, volumes) as container:
        rootfs = container.rootfs
        for compiler in ("gcc", "cc", "c++", "x86_64-linux-gnu-gcc", "clang"):
            assert not (rootfs / "usr" / "bin" / compiler).exists(), compiler
        for leftover in ("src", "wheels", "opt/build", "root/.cache", "home/gpulens/.cache", "tmp/requirements.txt"):
            assert not (rootfs / leftover).exists(), leftover
        assert not list((rootfs / "opt" / "gpulens").glob("lib/python3*/site-packages/pip"))
        ran = container.run("python3", "-c", "import gpulens.core.version as v, importlib.util as u; "
                            "print(v.__file__, u.find_spec('pip'))", entrypoint=False)
    assert ran.returncode == 0, ran.stderr
    where, pip = ran.stdout.split()
    assert where.startswith("/opt/gpulens-app/gpulens/") and pip == "None"


@pytest.fixture
def exporter_url(buildah: Buildah, built: Built, volumes: dict[str, Path]) -> Iterator[str]:
    """The simulated exporter running in the image on loopback, healthy (its first cycle done)."""
    url = f"http://127.0.0.1:{free_port()}"
    with read_only_container(buildah, built.image, volumes) as container:
        argv = container.argv(["exporter", "--backend=sim", f"--listen={url.removeprefix('http://')}", "--interval=1s"])
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            wait_healthy(proc, url)
            yield url
        finally:
            stop_process(proc)


def test_the_simulated_exporter_in_the_image_answers_metrics_on_loopback(exporter_url: str) -> None:
    status, _, body = http_get(f"{exporter_url}/metrics")
    text = body.decode()
    assert status == 200
    assert 'gpulens_exporter_build_info{backend="sim"' in text
    assert re.search(r'gpulens_device_gpu_equivalents\{[^}]*node="[^"]+"', text)
    assert re.search(r'gpulens_allocation_gpu_equivalents\{[^}]*tenant="[^"]+"', text)


def test_gpulens_demo_writes_its_report_into_the_volume_as_the_non_root_user(
        buildah: Buildah, built: Built, volumes: dict[str, Path]) -> None:
    with read_only_container(buildah, built.image, volumes) as container:
        ran = container.run("demo", "--out=/data/demo", "--days=0.1", "--step=5m", timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    report = volumes["/data"] / "demo" / "report" / "index.html"
    assert report.stat().st_size > 10_000 and report.stat().st_uid == 65532
    assert (volumes["/data"] / "demo" / "gpulens.duckdb").is_file()


def test_every_command_line_of_the_manifests_parses_in_the_image(
        buildah: Buildah, built: Built, volumes: dict[str, Path], tmp_path: Path) -> None:
    """The image's own gpulens reads each container's args with --help appended: a renamed flag fails here."""
    lines = {command.args for path in shipped_kustomizations() for command in gpulens_commands(render(path))}
    lines |= {command.args for command in gpulens_commands(render(write_guide_overlay(tmp_path)),
                                                            "registry.example.com/platform/gpulens")}
    assert len(lines) >= 8
    with read_only_container(buildah, built.image, volumes) as container:
        ran = container.run("python3", "-c", PARSE_EACH, json.dumps(sorted(lines)), entrypoint=False)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert json.loads(ran.stdout) == {}, "command lines the image's gpulens refuses"


# Run in the image, with its own gpulens: each line with --help appended, in one process (one import).
PARSE_EACH = """
import json, sys
from typer.testing import CliRunner
from gpulens.cli import app
refused = {}
for args in json.loads(sys.argv[1]):
    result = CliRunner().invoke(app, [*args, "--help"])
    if result.exit_code != 0:
        refused[" ".join(args)] = result.output[-500:]
print(json.dumps(refused))
"""
