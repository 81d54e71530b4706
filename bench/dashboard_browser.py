"""One timed visit of a dashboard's study page in Chromium (Debian's, driven by Playwright, as
tests/integration/browser.py launches it), for bench/dashboard.py.

Times are the page's own clock (``performance.now()``, zero at navigation start), read on the
animation frame where a condition first holds:

- paint: the history chart drawn, i.e. the Plotly plot holds its traces' data and has drawn
  its markers into the DOM;
- load: the page's own "fully loaded" condition holds and the network has been quiet (nothing
  in flight but the live event stream) for half a second; the time is the later of the
  condition and the end of the last response.

Every response's body is counted as sent on the wire (encoded, e.g. gzipped), except the
event stream, which never ends.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 1280, "height": 900}
#: Quiet network for this long ends a load.
QUIET_S = 0.5
#: The longest any one wait may take (optuna-dashboard at 50,000 trials is slow).
TIMEOUT_MS = 300_000

#: ``performance.now()`` once the Plotly chart ``id`` holds data and has drawn markers.
PAINT_JS = """(id) => {
  const gd = document.getElementById(id);
  if (!gd || !Array.isArray(gd.data) || !gd.data.some((t) => t.x && t.x.length)) return false;
  return gd.querySelector(".scatterlayer .point") ? performance.now() : false;
}"""

#: The asktell study page loaded: history chart, facts and the trial table's first page.
ASKTELL_READY_JS = (
    "() => {\n  const drawn = ("
    + PAINT_JS
    + """)("history");
  return drawn && document.body.dataset.revision !== undefined &&
    document.querySelector("#facts > div") && document.querySelector("#trials tbody tr")
    ? performance.now() : false;
}"""
)

LAST_RESPONSE_END_JS = """() => Math.max(0, ...performance.getEntriesByType("resource")
  .map((e) => e.responseEnd))"""


@dataclass
class Visit:
    """One page load: seconds to paint and to full load, and what the page fetched."""

    paint_s: float
    load_s: float
    #: (bytes on the wire, url) of every finished response but the event stream.
    responses: list[tuple[int, str]]
    #: Requests to any other host than the server's (a dashboard that is not offline).
    external: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def largest(self, prefix: str = "") -> tuple[int, str]:
        """The largest response whose path starts with ``prefix``; (0, "") when none."""
        sized = [r for r in self.responses if urlsplit(r[1]).path.startswith(prefix)]
        return max(sized, default=(0, ""))


def launch(playwright: Any) -> Any:
    return playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])


class _Network:
    """The page's requests in flight (but the event stream), and when that last changed."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.in_flight: set[Any] = set()
        self.finished: list[Any] = []
        self.external: list[str] = []
        self.problems: list[str] = []
        self.changed = time.monotonic()

    def watch(self, page: Any) -> None:
        page.on("request", self._started)
        page.on("requestfinished", self._finished)
        page.on("requestfailed", self._failed)
        page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        page.on(
            "console",
            lambda m: m.type == "error" and self.problems.append(f"console: {m.text}"),
        )

    def _started(self, request: Any) -> None:
        if urlsplit(request.url).netloc != self.origin:
            self.external.append(request.url)
        if request.resource_type != "eventsource":
            self.in_flight.add(request)
            self.changed = time.monotonic()

    def _finished(self, request: Any) -> None:
        if request in self.in_flight:
            self.in_flight.discard(request)
            self.finished.append(request)
            self.changed = time.monotonic()

    def _failed(self, request: Any) -> None:
        self.problems.append(f"request failed: {request.url} {request.failure}")
        self._finished(request)

    def wait_quiet(self, page: Any) -> None:
        deadline = time.monotonic() + TIMEOUT_MS / 1000
        while self.in_flight or time.monotonic() - self.changed < QUIET_S:
            if time.monotonic() > deadline:
                raise TimeoutError(f"network not quiet: {[r.url for r in self.in_flight]}")
            page.wait_for_timeout(50)

    def sizes(self) -> list[tuple[int, str]]:
        out = []
        for request in self.finished:
            response = request.response()
            if response is not None:
                out.append((int(request.sizes()["responseBodySize"]), request.url))
        return out


def visit(browser: Any, url: str, plot_id: str, ready_js: str | None = None) -> Visit:
    """Open ``url`` in a fresh browser context (empty cache) and time it; ``ready_js`` is the
    page's "fully loaded" condition beyond the chart ``plot_id`` (none: the chart alone)."""
    context = browser.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        network = _Network(urlsplit(url).netloc)
        network.watch(page)
        page.goto(url, wait_until="commit")
        paint_ms = _first_frame(page, PAINT_JS, plot_id)
        ready_ms = _first_frame(page, ready_js, None) if ready_js else paint_ms
        network.wait_quiet(page)
        last_end_ms = float(page.evaluate(LAST_RESPONSE_END_JS))
        return Visit(
            paint_s=paint_ms / 1000,
            load_s=max(ready_ms, last_end_ms) / 1000,
            responses=network.sizes(),
            external=network.external,
            problems=network.problems,
        )
    finally:
        context.close()


def _first_frame(page: Any, js: str, arg: Any) -> float:
    handle = page.wait_for_function(js, arg=arg, polling="raf", timeout=TIMEOUT_MS)
    return float(handle.json_value())


@dataclass
class Visits:
    """A study page opened ``1 + reps`` times on a fresh server: the first visit finds the
    server cold; the figures are the medians of the others."""

    first: Visit
    rest: list[Visit]

    @property
    def paint_s(self) -> float:
        return statistics.median(v.paint_s for v in self.rest)

    @property
    def load_s(self) -> float:
        return statistics.median(v.load_s for v in self.rest)

    def all(self) -> list[Visit]:
        return [self.first, *self.rest]

    def largest(self, prefix: str = "") -> tuple[int, str]:
        return max(v.largest(prefix) for v in self.all())

    def external(self) -> list[str]:
        return sorted({u for v in self.all() for u in v.external})

    def problems(self) -> list[str]:
        return sorted({p for v in self.all() for p in v.problems})


def visits(browser: Any, url: str, plot_id: str, ready_js: str | None, reps: int) -> Visits:
    opened = [visit(browser, url, plot_id, ready_js) for _ in range(1 + reps)]
    return Visits(opened[0], opened[1:])
