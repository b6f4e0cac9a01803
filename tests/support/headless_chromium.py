"""Headless Chromium driven over the DevTools protocol, waiting in real time for what a page must show.

``--dump-dom`` with ``--virtual-time-budget`` fast-forwards the page's timers: on a busy machine the
Streamlit front end's websocket waits run out in virtual time before the server has answered, and the
dump shows only the loading skeleton. Here the page runs in real time and the test waits, with a
deadline, until the DOM holds what it looks for.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import websocket

from tests.support.prometheus import in_ci

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--remote-debugging-port=0", "--remote-allow-origins=*", "--hide-scrollbars",
)

STILL_DRAWING = ('data-testid="stStatusWidget"', 'data-testid="stSkeleton"', 'data-testid="stAppSkeleton"')


def chromium_path() -> str:
    """Chromium's path; skip loudly without it, fail under CI=true."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path:
        return path
    reason = "'chromium' not found on PATH: install it (Debian: apt-get install chromium) to run browser tests"
    if in_ci():
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(f"SKIPPED LOUDLY: {reason}")


class Page:
    """One browser tab spoken to over its DevTools websocket."""

    def __init__(self, ws: websocket.WebSocket) -> None:
        self._ws = ws
        self._next_id = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and return its result, skipping the events that arrive meanwhile."""
        self._next_id += 1
        self._ws.send(json.dumps({"id": self._next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv())
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def html(self) -> str:
        result = self.call("Runtime.evaluate", expression="document.documentElement.outerHTML", returnByValue=True)
        return str(result.get("result", {}).get("value", ""))

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def wait_for(self, done: Callable[[str], bool], timeout_s: float) -> tuple[bool, str]:
        """Poll until the DOM settles with ``done(html)``; return whether it did by the deadline, and the DOM.

        Settled: the same DOM twice in a row, half a second apart, with no Streamlit script still
        running (its status widget) and no loading skeleton left.
        """
        deadline = time.monotonic() + timeout_s
        previous = None
        while True:
            dom = self.html()
            if dom == previous and done(dom) and not any(busy in dom for busy in STILL_DRAWING):
                return True, dom
            if time.monotonic() > deadline:
                return False, dom
            previous = dom
            time.sleep(0.5)


def _devtools_port(log: Path, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("DevTools listening on ws://"):
                return int(line.split("ws://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    pytest.fail(f"Chromium did not open its DevTools port: {log.read_text(errors='replace')[-2000:]}")


@contextmanager
def chromium_page(profile: Path, *, size: tuple[int, int] = (1400, 900)) -> Iterator[Page]:
    """A fresh headless Chromium (own profile folder) with one blank tab of ``size`` pixels."""
    profile.mkdir(parents=True, exist_ok=True)
    log = profile / "chromium.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [chromium_path(), *CHROMIUM_FLAGS, f"--user-data-dir={profile / 'data'}",
             f"--window-size={size[0]},{size[1]}", "about:blank"],
            stdout=sink, stderr=sink,
        )
    try:
        port = _devtools_port(log, proc)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as resp:
            targets = json.load(resp)
        tab = next(t for t in targets if t.get("type") == "page")
        ws = websocket.create_connection(tab["webSocketDebuggerUrl"], timeout=60, suppress_origin=True)
        try:
            page = Page(ws)
            page.call("Page.enable")
            page.call("Emulation.setDeviceMetricsOverride", width=size[0], height=size[1],
                      deviceScaleFactor=1, mobile=False)
            yield page
        finally:
            ws.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def png_problem(path: Path) -> str | None:
    """Why the screenshot looks blank or unfinished, or None when it is a real page."""
    from PIL import Image

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


def load_until(
    url: str, tmp: Path, done: Callable[[str], bool], *, what: str, screenshot: Path | None = None,
    size: tuple[int, int] = (1400, 900), timeout_s: float = 120.0,
) -> str:
    """Open ``url`` and wait in real time until ``done(dom)`` (and a screenshot that is a real page).

    The first load of a served app also warms the server's imports and caches, so a page that is not
    drawn by half the deadline is loaded once more. Fails with ``what`` and the page's tail; returns the DOM.
    """
    with chromium_page(tmp / "chromium", size=size) as page:
        page.open(url)
        met, dom = page.wait_for(done, timeout_s / 2)
        if not met:
            page.open(url)
            met, dom = page.wait_for(done, timeout_s / 2)
        if not met:
            pytest.fail(f"{url}: {what} not in the page within {timeout_s:g} s; page tail: {dom[-1500:]}")
        if screenshot is None:
            return dom
        page.screenshot(screenshot)
        problem = png_problem(screenshot)
        if problem is not None:
            pytest.fail(problem)
        return dom
