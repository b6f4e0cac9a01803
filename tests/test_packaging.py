"""The distribution installs one namespace (a wheel's only top-level package is ``gpulens``) and knows its commit."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # Stray output folders in the source tree (a default --out, say) must never ride along.
    stray = ROOT / "gpulens-recommendations"
    made_stray = not stray.exists()
    if made_stray:
        stray.mkdir()
        (stray / "__init__.py").write_text("")
    try:
        subprocess.run(
            [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
            check=True, capture_output=True, timeout=300,
        )
    finally:
        if made_stray:
            (stray / "__init__.py").unlink()
            stray.rmdir()
    (found,) = out.glob("gpulens-*.whl")
    return found


def test_the_wheels_only_top_level_package_is_gpulens(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"gpulens"}


def test_the_folders_install_under_the_gpulens_namespace(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in ("core/errors.py", "cli/__init__.py", "core/device_model.py", "exporter/cycle.py", "collector/store.py",
                   "analytics/idle.py", "dashboards/streamlit/app.py", "analytics/default_prices.yaml",
                   "sim/scenarios/bench-h200-mig.yaml", "sim/default_scenario.yaml"):
        assert any(name.startswith(f"gpulens/{module}") for name in names), module



def git_head() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_the_wheel_carries_the_commit_it_was_built_from(wheel: Path) -> None:
    baked = zipfile.ZipFile(wheel).read("gpulens/core/build_commit.txt").decode().strip()
    assert baked.removesuffix("-dirty") == git_head()


def source_copy_without_git(where: Path) -> Path:
    """The files a build reads, copied where no git repository is (as an image build's context)."""
    copy = where / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build_commit.txt")
    for name in ("setup.py", "pyproject.toml", "README.md"):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, copy / name)
    for folder in ("gpulens", "exporter", "collector", "analytics", "dashboards"):
        shutil.copytree(ROOT / folder, copy / folder, symlinks=True, ignore=ignore)
    return copy


def build_py(source: Path, out: Path, commit: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GPULENS_COMMIT"}
    if commit is not None:
        env["GPULENS_COMMIT"] = commit
    return subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(out)], cwd=source,
                          env=env, capture_output=True, text=True, timeout=300, check=False)


def test_a_build_outside_git_bakes_in_the_commit_it_is_given_or_none(tmp_path: Path) -> None:
    source = source_copy_without_git(tmp_path)
    given = build_py(source, tmp_path / "given", "0123456789ab")
    assert given.returncode == 0, given.stderr
    assert (tmp_path / "given" / "gpulens" / "core" / "build_commit.txt").read_text().strip() == "0123456789ab"
    unknown = build_py(source, tmp_path / "unknown", None)
    assert unknown.returncode == 0, unknown.stderr
    assert (tmp_path / "unknown" / "gpulens" / "core" / "errors.py").is_file()
    assert not (tmp_path / "unknown" / "gpulens" / "core" / "build_commit.txt").exists()


def test_a_build_refuses_a_commit_that_is_not_one(tmp_path: Path) -> None:
    refused = build_py(source_copy_without_git(tmp_path), tmp_path / "out", "main; rm -rf /")
    assert refused.returncode != 0
    assert "GPULENS_COMMIT='main; rm -rf /' is not a git commit" in refused.stderr
