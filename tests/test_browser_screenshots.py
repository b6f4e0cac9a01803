"""Real browser: the Streamlit app served by `streamlit run` and the HTML report, in headless Chromium.

Skips loudly without Chromium, fails under CI=true. Set GPULENS_SCREENSHOT_DIR to keep the PNGs
(that is how docs/screenshots/ is made).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dashboards.report import write_report
from tests.support.exporter import stop_process
from tests.support.headless_chromium import chromium_path, load_until
from tests.support.prometheus import free_port
from tests.support.report_store import build_store
from tests.support.streamlit_app import wait_healthy

pytestmark = [pytest.mark.browser, pytest.mark.slow]

def _load_until(url: str, tmp: Path, marker: str, *, screenshot: Path | None = None) -> str:
    """Load ``url`` until the DOM shows ``marker`` (and the screenshot is a real page); return the DOM."""
    return load_until(url, tmp, lambda dom: marker in dom, what=repr(marker), screenshot=screenshot)


def _keep(path: Path, name: str) -> None:
    target = os.environ.get("GPULENS_SCREENSHOT_DIR")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(target) / name)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("store") / "gpulens.duckdb")


@pytest.fixture(scope="module")
def app_url(store: Path) -> Iterator[str]:
    chromium_path()
    port = free_port()
    proc = subprocess.Popen(  # the real command line, which becomes `streamlit run`
        [sys.executable, "-m", "gpulens.cli", "dashboard", "--db", str(store), "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc)
        yield base
    finally:
        stop_process(proc)


def test_the_running_app_renders_the_fleet_page_in_a_real_browser(app_url: str, tmp_path: Path) -> None:
    shot = tmp_path / "app.png"
    dom = _load_until(app_url, tmp_path, "Capacity states over time", screenshot=shot)
    assert "Traceback" not in dom
    _keep(shot, "streamlit-fleet.png")


@pytest.mark.parametrize(("path", "marker"), [
    ("tenants", "Chargeback by account and cost state"),
    ("risk", "Terms and reasons"),
    ("recommendations", "Evidence"),
    ("health", "Drain list"),
])
def test_every_other_page_renders_in_a_real_browser(app_url: str, tmp_path: Path, path: str, marker: str) -> None:
    dom = _load_until(f"{app_url}/{path}", tmp_path, marker)
    assert "Traceback" not in dom


def test_the_report_opens_with_charts_in_a_real_browser(store: Path, tmp_path: Path) -> None:
    index = write_report(store, tmp_path / "report")
    shot = tmp_path / "report.png"
    dom = load_until(
        index.as_uri(), tmp_path, lambda dom: dom.count("<svg") >= 5 and "Idle capacity by tenant" in dom,
        what="five charts and 'Idle capacity by tenant'", screenshot=shot, size=(1400, 2400),
    )
    assert dom.count("<svg") >= 5
    _keep(shot, "report.png")
