"""The distribution installs the card's folders as they are in the tree, and knows its commit."""

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OWN_PACKAGES = ("exporter", "collector", "analytics", "dashboards")


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


def test_the_wheels_top_level_packages_are_gpulens_and_the_cards_folders(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"gpulens", *OWN_PACKAGES}


def test_every_module_installs_at_the_path_it_has_in_the_tree(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in ("gpulens/core/errors.py", "gpulens/cli/__init__.py", "gpulens/core/device_model.py",
                   "exporter/cycle.py", "collector/store.py", "analytics/idle.py", "dashboards/streamlit/app.py",
                   "analytics/default_prices.yaml", "analytics/instance_gpus.yaml",
                   "gpulens/sim/scenarios/bench-h200-mig.yaml", "gpulens/sim/default_scenario.yaml"):
        assert module in names, module
    tree = {str(path.relative_to(ROOT)) for folder in ("gpulens", *OWN_PACKAGES)
            for path in (ROOT / folder).rglob("*.py") if "__pycache__" not in path.parts}
    assert tree <= names, sorted(tree - names)[:5]


def test_the_tree_has_no_links_so_each_module_has_one_path() -> None:
    links = [str(path.relative_to(ROOT)) for folder in ("gpulens", *OWN_PACKAGES)
             for path in (ROOT / folder).rglob("*") if path.is_symlink()]
    assert links == []



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
    for name in ("pyproject.toml", "README.md", "scripts/build_backend/gpulens_build_backend.py"):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, copy / name)
    for folder in ("gpulens", *OWN_PACKAGES):
        shutil.copytree(ROOT / folder, copy / folder, ignore=ignore)
    return copy


def build_wheel(source: Path, out: Path, commit: str | None) -> subprocess.CompletedProcess[str]:
    """The wheel built from ``source`` into ``out`` by the project's build backend, as pip would call it."""
    env = {k: v for k, v in os.environ.items() if k != "GPULENS_COMMIT"}
    if commit is not None:
        env["GPULENS_COMMIT"] = commit
    return subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), "."],
                          cwd=source, env=env, capture_output=True, text=True, timeout=300, check=False)


def wheel_files(out: Path) -> set[str]:
    (found,) = out.glob("gpulens-*.whl")
    return set(zipfile.ZipFile(found).namelist())


def test_a_build_outside_git_bakes_in_the_commit_it_is_given_or_none(tmp_path: Path) -> None:
    source = source_copy_without_git(tmp_path)
    given = build_wheel(source, tmp_path / "given", "0123456789ab")
    assert given.returncode == 0, given.stderr
    (found,) = (tmp_path / "given").glob("gpulens-*.whl")
    assert zipfile.ZipFile(found).read("gpulens/core/build_commit.txt").decode().strip() == "0123456789ab"
    assert not (source / "gpulens" / "core" / "build_commit.txt").exists()  # the source tree as it was
    unknown = build_wheel(source, tmp_path / "unknown", None)
    assert unknown.returncode == 0, unknown.stderr
    assert "gpulens/core/errors.py" in wheel_files(tmp_path / "unknown")
    assert "gpulens/core/build_commit.txt" not in wheel_files(tmp_path / "unknown")


def test_a_build_refuses_a_commit_that_is_not_one(tmp_path: Path) -> None:
    refused = build_wheel(source_copy_without_git(tmp_path), tmp_path / "out", "main; rm -rf /")
    assert refused.returncode != 0
    assert "GPULENS_COMMIT='main; rm -rf /' is not a git commit" in refused.stderr


def test_a_package_of_another_distribution_under_one_of_our_names_is_one_line_error(tmp_path: Path) -> None:
    impostor = tmp_path / "analytics"
    impostor.mkdir()
    (impostor / "__init__.py").write_text('"""Another distribution\'s analytics package."""\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-m", "gpulens", "--version"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"gpulens: error: the package(s) analytics ({impostor / '__init__.py'}) are not gpulens's: another "
        "installed distribution provides a package of the same name; install gpulens in a virtual environment "
        "of its own"]


def test_our_own_packages_pass_the_check() -> None:
    from gpulens.core.own_packages import foreign_packages

    assert foreign_packages() == []


def test_the_build_backend_pyproject_names_is_tracked_so_a_fresh_clone_can_build() -> None:
    build_system = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["build-system"]
    (folder,) = build_system["backend-path"]
    backend = Path(folder, build_system["build-backend"] + ".py")
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--error-unmatch", str(backend)],
                             capture_output=True, text=True, check=False)
    assert tracked.returncode == 0, f"{backend} is not in git (ignored?): {tracked.stderr.strip()}"
