"""Real browser: the Streamlit app served by `streamlit run` and the HTML report, in headless Chromium.

Skips loudly without Chromium, fails under CI=true. Set GPULENS_SCREENSHOT_DIR to keep the PNGs
(that is how docs/screenshots/ is made).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from gpulens.analytics.report import write_report
from tests.support.exporter import stop_process
from tests.support.prometheus import free_port, in_ci
from tests.support.report_store import build_store
from tests.support.streamlit_app import wait_healthy

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path:
        return path
    reason = "'chromium' not found on PATH: install it (Debian: apt-get install chromium) to run browser tests"
    if in_ci():
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(f"SKIPPED LOUDLY: {reason}")


def _browse(url: str, tmp: Path, *, screenshot: Path | None = None, size: str = "1400,900") -> str:
    """Load ``url`` in headless Chromium; return the DOM after load, and save a screenshot if asked."""
    chromium = _chromium()
    common = [*CHROMIUM_FLAGS, f"--window-size={size}", "--virtual-time-budget=60000"]
    if screenshot is not None:
        subprocess.run(
            [chromium, *common, f"--user-data-dir={tmp / 'shot'}", f"--screenshot={screenshot}", url],
            capture_output=True, timeout=120, check=True,
        )
    dom = subprocess.run(
        [chromium, *common, f"--user-data-dir={tmp / 'dom'}", "--dump-dom", url],
        capture_output=True, text=True, timeout=120, check=True,
    )
    return dom.stdout


def _png_problem(path: Path) -> str | None:
    """Why the screenshot looks blank or unfinished, or None when it is a real page."""
    if path.stat().st_size < 20_000:
        return f"{path} is suspiciously small ({path.stat().st_size} bytes)"
    image = Image.open(path).convert("RGB")
    colours = image.getcolors(1 << 24) or []
    if len(colours) < 200:
        return f"{path} has only {len(colours)} colours (blank page or loading skeleton?)"
    dominant = max(count for count, _ in colours) / (image.width * image.height)
    if dominant > 0.9:
        return f"{path} is {dominant:.0%} one colour"
    return None


def _load_until(url: str, tmp: Path, marker: str, *, screenshot: Path | None = None, attempts: int = 8) -> str:
    """Load ``url`` until the DOM shows ``marker`` (and the screenshot is a real page).

    Virtual time runs ahead of the app's websocket, so a load can end before Streamlit has drawn
    the page; the first load also warms the server's imports and caches. A busy machine can keep the
    server from answering for a while, so each retry waits a little longer (real time) before it loads
    again. Returns the last DOM.
    """
    dom = ""
    problem: str | None = "not loaded"
    for attempt in range(attempts):
        if attempt:
            time.sleep(min(2.0 * attempt, 8.0))
        run_dir = tmp / f"run{attempt}"
        dom = _browse(url, run_dir, screenshot=screenshot)
        problem = None if marker in dom else f"{marker!r} not in the page"
        if problem is None and screenshot is not None:
            problem = _png_problem(screenshot)
        if problem is None:
            return dom
    pytest.fail(f"{url}: {problem} after {attempts} loads; page tail: {dom[-1500:]}")


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
    _chromium()
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
    dom = _browse(index.as_uri(), tmp_path, screenshot=shot, size="1400,2400")
    assert dom.count("<svg") >= 5
    assert "Idle capacity by tenant" in dom
    assert _png_problem(shot) is None, _png_problem(shot)
    _keep(shot, "report.png")
