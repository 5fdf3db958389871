"""A real browser for the console's tests: Debian's chromium, headless, driven through
its chromedriver by selenium (explicit paths: selenium-manager never downloads
anything), a recorder server that sees every request a page would make to it, and the
screenshots kept as test artifacts.

Without chromium or chromedriver the browser tests fail in CI (CI=true: `make test`
installs both, `make browser`) and are skipped elsewhere, saying what to install."""

from __future__ import annotations

import os
import shutil
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.chrome.webdriver import WebDriver

CHROMIUM = "/usr/bin/chromium"  # Debian's (apt: chromium, chromium-driver)
CHROMEDRIVER = "/usr/bin/chromedriver"
WIDTH, HEIGHT = 1280, 900
PAGE_LOAD_TIMEOUT_S = 20
REPO = Path(__file__).resolve().parents[2]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def chromium() -> WebDriver:
    """A headless chromium whose pages are WIDTH x HEIGHT. An alert a page opens stays
    open (unhandled prompts are ignored), so a test can see it."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if shutil.which(p) is None]
    if missing:
        why = (f"{' and '.join(missing)} not found: `make browser` installs Debian's "
               "chromium and chromium-driver")
        if in_ci():
            pytest.fail(why)  # CI installs them: their absence is a broken setup
        pytest.skip(why)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                f"--window-size={WIDTH},{HEIGHT}", "--no-first-run",
                "--disable-background-networking", "--disable-component-update",
                "--disable-extensions", "--disable-sync", "--hide-scrollbars"):
        options.add_argument(arg)
    options.unhandled_prompt_behavior = "ignore"
    # The console's messages, CSP violations among them ("security"), for get_log.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        driver.set_page_load_timeout(PAGE_LOAD_TIMEOUT_S)
        # --window-size includes the window's frame: the page itself gets exactly this.
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False})
    except BaseException:
        driver.quit()
        raise
    return driver


def security_messages(driver: WebDriver) -> list[str]:
    """The browser's security messages since the last call (a page's script or image
    blocked by the Content-Security-Policy): none means nothing on the page even tried."""
    entries: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
    return [str(e.get("message")) for e in entries if e.get("source") == "security"]


class Recorder:
    """An HTTP server on a free loopback port recording every request's method and path:
    where a hostile payload's fetch() or image would land if a page ran or loaded it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: list[str] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def _record(self) -> None:
                with recorder._lock:
                    recorder._seen.append(f"{self.command} {self.path}")
                self.send_response(204)
                self.send_header("Access-Control-Allow-Origin", "*")
                self.end_headers()

            do_GET = do_POST = do_OPTIONS = do_HEAD = _record  # noqa: N815

            def log_message(self, *_: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="recorder", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def seen(self) -> list[str]:
        """What reached it, but the favicon the browser asks every origin it shows for."""
        with self._lock:
            return [r for r in self._seen if r != "GET /favicon.ico"]

    def quiet_for(self, seconds: float, since: int) -> list[str]:
        """The requests after the first `since` that arrive within `seconds` (polled: a
        request that never comes can only be waited for, not waited until)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            late = self.seen()[since:]
            if late:
                return late
            time.sleep(0.05)
        return self.seen()[since:]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def artifacts_dir() -> Path:
    """Where the console's screenshots are kept: $PAYSTREAM_TEST_ARTIFACTS/console, by
    default .test-artifacts/console in the repository (ignored by git)."""
    root = Path(os.environ.get("PAYSTREAM_TEST_ARTIFACTS", str(REPO / ".test-artifacts")))
    folder = root / "console"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def png_size(path: Path) -> tuple[int, int]:
    """A PNG's width and height, read from its IHDR chunk; AssertionError if not a PNG."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", f"{path}: not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return int(width), int(height)


class Screenshots:
    """PNGs of the pages a test shows, named by what they show."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.written: list[Path] = []

    def take(self, driver: WebDriver, name: str) -> Path:
        path = self.folder / f"{name}.png"
        assert driver.save_screenshot(str(path)), f"no screenshot of {name}"
        assert png_size(path) == (WIDTH, HEIGHT), (path, png_size(path))
        self.written.append(path)
        return path
