"""Chromium driven by Playwright for the dashboard tests: Debian's ``chromium`` package,
launched by its path (``make install`` installs it; Playwright's own browser downloads are not
used), and a page that records every console error, uncaught exception and failed request (but the
GETs that navigating away cuts)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
#: Screenshots of every page the tests open (gitignored).
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "dashboard"


@dataclass
class WatchedPage:
    """A browser page and what went wrong on it."""

    page: object
    problems: list[str] = field(default_factory=list)

    def assert_clean(self) -> None:
        assert not self.problems, "the page reported problems:\n" + "\n".join(self.problems)

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
        return path


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Chromium, for one test module: Playwright's sync API keeps an event loop running in
    the main thread while it is started, and a later module's ``asyncio.run`` (the async
    client's tests) would fail on it."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the playwright package is missing: run `make install` (the [dev] extra)")
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run `make install` (apt-get install chromium)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def watched(browser: object) -> Iterator[WatchedPage]:
    """A fresh page (1280x900) recording console errors, page errors and failed requests.

    The page ignores the Content-Security-Policy: Playwright's ``wait_for_function`` and
    string ``evaluate`` run their JavaScript through eval, which the pages' policy forbids.
    ``csp_watched`` keeps the policy."""
    yield from _watched_page(browser, bypass_csp=True)


@pytest.fixture
def csp_watched(browser: object) -> Iterator[WatchedPage]:
    """Like ``watched``, but the pages' Content-Security-Policy holds: a violation is a console
    error. Wait with selectors only (no ``wait_for_function``)."""
    yield from _watched_page(browser, bypass_csp=False)


def _cut_by_navigation(request: object) -> bool:
    """A GET that leaving or reloading the page aborted while in flight (its event stream, or
    chart data it was fetching): expected, since the dashboard never aborts a request itself."""
    return request.method == "GET" and request.failure == "net::ERR_ABORTED"  # type: ignore[attr-defined]


def _watched_page(browser: object, bypass_csp: bool) -> Iterator[WatchedPage]:
    context = browser.new_context(  # type: ignore[attr-defined]
        viewport={"width": 1280, "height": 900}, bypass_csp=bypass_csp
    )
    page = context.new_page()
    watched = WatchedPage(page)
    page.on(
        "console",
        lambda m: (
            m.type == "error"
            and watched.problems.append(f"console: {m.text} at {m.location.get('url')}")
        ),
    )
    page.on("pageerror", lambda e: watched.problems.append(f"page error: {e}"))
    page.on(
        "requestfailed",
        lambda r: (
            not _cut_by_navigation(r)
            and watched.problems.append(f"request failed: {r.method} {r.url} {r.failure}")
        ),
    )
    page.on(
        "response",
        lambda r: r.status >= 400 and watched.problems.append(f"HTTP {r.status}: {r.url}"),
    )
    yield watched
    context.close()
