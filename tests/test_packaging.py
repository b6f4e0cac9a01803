"""The distribution installs one namespace: a wheel's only top-level package is ``gpulens``."""

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
    for module in ("core/errors.py", "cli/__init__.py", "exporter/model.py", "collector/store.py",
                   "analytics/idle.py", "dashboards/streamlit/app.py", "analytics/default_prices.yaml",
                   "exporter/sim/scenarios"):
        assert any(name.startswith(f"gpulens/{module}") for name in names), module

