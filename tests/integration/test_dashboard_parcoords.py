"""The study page's parallel coordinates and trial filter in a real Chromium against a real
two-worker server (SQLite and PostgreSQL): brushing an axis (through Plotly.restyle, as a
brush does, and with the mouse) filters the trial table, the history, the Pareto view and the
CSV download, exactly as the API filters; the table's own filter inputs set the same filter;
the table sorts by duration and worker. Screenshots go to test-artifacts/dashboard/."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.browser import WatchedPage
from tests.integration.conftest import ON_POSTGRESQL, Server

pytestmark = [pytest.mark.integration, ON_POSTGRESQL]

CHOICES = ["relu", "tanh", "=1+1"]  # the last one a spreadsheet would run as a formula
PARAMETERS = [
    {"type": "float", "name": "x", "low": -5.0, "high": 5.0},
    {"type": "float", "name": "lr", "low": 1e-4, "high": 1.0, "log": True},
    {"type": "int", "name": "n", "low": 1, "high": 8},
    {"type": "categorical", "name": "act", "choices": CHOICES},
]
OBJECTIVES = [{"name": "loss", "goal": "minimize"}, {"name": "acc", "goal": "maximize"}]
TRIALS = 40
#: Trial 38's failure, a formula for a spreadsheet that opened the CSV.
REASON = '=HYPERLINK("http://example.invalid")'
#: The parallel coordinates' axes, in order: the parameters, then the objectives.
AXES = ["params.x", "params.lr", "params.n", "params.act", "values.loss", "values.acc"]
#: How many lines the parallel coordinates draw.
DRAWN = "document.getElementById('parcoords').dataset.points"


def _params(i: int) -> dict[str, Any]:
    return {
        "x": (i * 7 % TRIALS) / 4 - 5.0,
        "lr": 10 ** (-4 + (i % 9) / 2),
        "n": 1 + i % 8,
        "act": CHOICES[i % 3],
    }


def _told(i: int) -> dict[str, Any]:
    p = _params(i)
    if i < 38:
        return {"values": {"loss": p["x"] ** 2, "acc": float(p["n"])}}
    return {"state": "failed", "reason": REASON}


@pytest.fixture
def api(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


@pytest.fixture
def sid(api: httpx.Client) -> int:
    """40 trials asked by workers w-a and w-b in turn: 0..37 completed (loss x * x, acc n),
    38 failed, 39 running; each reported a loss at step 1 before its end."""
    r = api.post(
        "/v1/studies",
        json={"name": "brush", "parameters": PARAMETERS, "objectives": OBJECTIVES},
    )
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    for i in range(TRIALS):
        assert api.post(f"/v1/studies/{sid}/trials", json={"params": _params(i)}).status_code == 201
    for i in range(TRIALS):
        r = api.post(f"/v1/studies/{sid}/ask", json={"worker_id": ("w-a", "w-b")[i % 2]})
        assert r.json()["trials"][0]["number"] == i, r.text
        report = {"step": 1, "values": {"loss": 1.0}}
        assert api.post(f"/v1/studies/{sid}/trials/{i}/report", json=report).status_code == 201
        if i < TRIALS - 1:
            r = api.post(f"/v1/studies/{sid}/trials/{i}/tell", json=_told(i))
            assert r.status_code == 200, r.text
    return sid


def _open(watched: WatchedPage, server: Server, sid: int) -> None:
    page = watched.page
    page.goto(f"{server.url}/dashboard/studies/{sid}")
    page.wait_for_selector("body[data-revision]")
    page.wait_for_selector("#parcoords .main-svg")
    page.wait_for_selector("#history .main-svg")


def _api_numbers(api: httpx.Client, sid: int, query: str, **params: object) -> list[int]:
    r = api.get(f"/v1/studies/{sid}/trials", params={"filter": query, "limit": 1000, **params})
    assert r.status_code == 200, r.text
    return [t["number"] for t in r.json()["data"]]


def _shown_filter(watched: WatchedPage) -> str:
    return watched.page.locator("#filter-summary").get_attribute("data-filter") or ""


def _table_numbers(watched: WatchedPage) -> list[int]:
    return watched.page.locator("#trials tbody tr").evaluate_all(
        "rows => rows.map(r => Number(r.dataset.number))"
    )


def _wait_for_table(watched: WatchedPage, numbers: list[int]) -> None:
    watched.page.wait_for_function(
        "numbers => JSON.stringify([...document.querySelectorAll('#trials tbody tr')]"
        ".map(r => Number(r.dataset.number))) === JSON.stringify(numbers)",
        arg=numbers,
    )


def _brush(watched: WatchedPage, axis: str, ranges: object) -> None:
    """Brushes one axis as a user's drag does: Plotly.restyle fires plotly_restyle."""
    watched.page.evaluate(
        "([i, ranges]) => Plotly.restyle(document.getElementById('parcoords'),"
        " {[`dimensions[${i}].constraintrange`]: [ranges]})",
        [AXES.index(axis), ranges],
    )


def _history_points(api: httpx.Client, sid: int, query: str | None) -> int:
    history = api.get(f"/v1/studies/{sid}/history", params={"filter": query} if query else {})
    return len(history.json()["points"])


def test_brushing_the_parallel_coordinates_filters_every_view(server, api, sid, watched):
    page = watched.page
    _open(watched, server, sid)
    assert page.evaluate(DRAWN) == "38"
    assert page.locator("#history").get_attribute("data-points") == "39"
    assert page.locator("#filter-summary").is_hidden()

    _brush(watched, "params.x", [-1.0, 2.0])
    page.wait_for_selector("#filter-summary:not([hidden])")
    assert json.loads(_shown_filter(watched)) == {"params.x": {"min": -1.0, "max": 2.0}}
    in_range = [i for i in reversed(range(TRIALS)) if -1.0 <= _params(i)["x"] <= 2.0]
    assert _api_numbers(api, sid, _shown_filter(watched), order="desc") == in_range
    _wait_for_table(watched, in_range)  # newest first, as the table sorts
    finished = _history_points(api, sid, _shown_filter(watched))
    assert finished == len([i for i in in_range if i < 39]) < 39
    page.wait_for_function(f"document.getElementById('history').dataset.points === '{finished}'")
    # The intermediate values: the 20 most recent trials that reported, among those kept.
    curves = ",".join(str(i) for i in in_range[:20])
    assert curves != ",".join(str(i) for i in reversed(range(TRIALS - 20, TRIALS)))
    page.wait_for_function(f"document.getElementById('curves').dataset.trials === '{curves}'")
    assert "filtered: 1 condition (params.x)" in page.locator("#filter-summary").inner_text()
    assert page.locator("#page-info").inner_text() == (
        f"trials 1-{len(in_range)} of those that pass the filter"
    )

    # A categorical axis: the choices within the brush; a log axis: brushed in powers of ten.
    _brush(watched, "params.act", [0.9, 2.1])
    _brush(watched, "params.lr", [-3.0, -0.5])
    page.wait_for_function(
        "document.getElementById('filter-summary').dataset.filter.includes('params.lr')"
    )
    shown = json.loads(_shown_filter(watched))
    assert shown["params.act"] == {"in": ["tanh", "=1+1"]}
    assert math.isclose(shown["params.lr"]["min"], 1e-3)
    assert math.isclose(shown["params.lr"]["max"], 10**-0.5)
    expected = [
        i for i in in_range if _params(i)["act"] != "relu" and 1e-3 <= _params(i)["lr"] <= 10**-0.5
    ]
    assert 0 < len(expected) < len(in_range)
    assert _api_numbers(api, sid, _shown_filter(watched), order="desc") == expected
    _wait_for_table(watched, expected)
    pareto = api.get(f"/v1/studies/{sid}/pareto", params={"filter": _shown_filter(watched)}).json()
    front = str(pareto["counts"]["non_dominated"])
    page.wait_for_function(f"document.getElementById('pareto').dataset.nonDominated === '{front}'")
    # The chart itself still draws every trial: it is never fetched with the filter it sets
    # (the slice and contour charts, which read /points too, are).
    assert page.evaluate(DRAWN) == "38"
    watched.screenshot("study-parcoords-brushed")

    # The CSV holds the filtered rows only, in the table's order, formulas defused.
    with page.expect_download() as download:
        page.click("#download-csv")
    rows = list(csv.reader(io.StringIO(download.value.path().read_text(encoding="utf-8"))))
    assert [int(r[0]) for r in rows[1:]] == expected
    act = rows[0].index("params.act")
    assert {r[act] for r in rows[1:]} <= {"tanh", "'=1+1"}
    assert "'=1+1" in {r[act] for r in rows[1:]}

    # Clearing the brush clears its condition; the clear button clears the rest.
    _brush(watched, "params.act", None)
    page.wait_for_function(
        "!document.getElementById('filter-summary').dataset.filter.includes('params.act')"
    )
    page.click("#clear-filter")
    page.wait_for_selector("#filter-summary[hidden]", state="attached")
    _wait_for_table(watched, list(reversed(range(TRIALS))))
    page.wait_for_function("document.getElementById('history').dataset.points === '39'")
    assert page.evaluate(
        "document.getElementById('parcoords').data[0].dimensions.every(d => !d.constraintrange)"
    )

    # A user's drag along the n axis, and a click on the axis off the brush, which clears it.
    page.locator("#parcoords").scroll_into_view_if_needed()
    box = page.locator("#parcoords .axis-brush").nth(AXES.index("params.n")).bounding_box()
    assert box is not None
    middle = box["x"] + box["width"] / 2
    page.mouse.move(middle, box["y"] + box["height"] * 0.2)
    page.mouse.down()
    page.mouse.move(middle, box["y"] + box["height"] * 0.5, steps=10)
    page.mouse.up()
    page.wait_for_selector("#filter-summary:not([hidden])")
    assert set(json.loads(_shown_filter(watched))) == {"params.n"}
    dragged = _api_numbers(api, sid, _shown_filter(watched), order="desc")
    assert 0 < len(dragged) < TRIALS
    _wait_for_table(watched, dragged)
    page.mouse.click(middle, box["y"] + box["height"] * 0.9)
    page.wait_for_selector("#filter-summary[hidden]", state="attached")
    _wait_for_table(watched, list(reversed(range(TRIALS))))

    # The chart follows the study live: the running trial told shows as a 39th line.
    r = api.post(f"/v1/studies/{sid}/trials/39/tell", json={"values": {"loss": 0.5, "acc": 2.0}})
    assert r.status_code == 200, r.text
    page.wait_for_function(f"{DRAWN} === '39'", timeout=3000)
    watched.assert_clean()


def test_the_table_filter_inputs_and_the_duration_and_worker_sorts(server, api, sid, watched):
    page = watched.page
    _open(watched, server, sid)
    page.click(".trial-filters summary")
    page.fill("#trial-filters [name='worker_id']", "w-b")
    page.press("#trial-filters [name='worker_id']", "Enter")
    page.check("#trial-filters input[name='state'][value='completed']")
    page.fill("#trial-filters [name='values.loss.max']", "4")
    page.press("#trial-filters [name='values.loss.max']", "Enter")
    page.wait_for_function(
        "document.getElementById('filter-summary').dataset.filter.includes('values.loss')"
    )
    assert json.loads(_shown_filter(watched)) == {
        "worker_id": {"in": ["w-b"]},
        "state": {"in": ["completed"]},
        "values.loss": {"max": 4},
    }
    expected = [i for i in reversed(range(38)) if i % 2 == 1 and _params(i)["x"] ** 2 <= 4]
    assert _api_numbers(api, sid, _shown_filter(watched), order="desc") == expected
    _wait_for_table(watched, expected)
    # The parallel coordinates draw the loss range as a brush on the loss axis.
    page.wait_for_function(
        "document.getElementById('parcoords').data[0].dimensions"
        f"[{AXES.index('values.loss')}].constraintrange !== undefined"
    )
    watched.screenshot("study-table-filters")

    page.click("#clear-filter")
    _wait_for_table(watched, list(reversed(range(TRIALS))))
    assert page.locator("#trial-filters [name='worker_id']").input_value() == ""
    assert not page.locator("#trial-filters input[name='state'][value='completed']").is_checked()
    page.check("#trial-filters input[name='state'][value='failed']")
    _wait_for_table(watched, [38])
    with page.expect_download() as download:
        page.click("#download-csv")
    rows = list(csv.reader(io.StringIO(download.value.path().read_text(encoding="utf-8"))))
    reason = rows[0].index("reason")
    assert [(r[0], r[reason]) for r in rows[1:]] == [("38", "'" + REASON)]
    page.click("#clear-filter")
    _wait_for_table(watched, list(reversed(range(TRIALS))))
    page.click("#trials th[data-key='duration']")
    page.wait_for_selector("#trials th.sorted-asc[data-key='duration']")
    by_duration = _api_numbers(api, sid, "{}", sort="duration")
    assert by_duration[-1] == 39  # running: no duration, last
    _wait_for_table(watched, by_duration)
    durations = page.locator("#trials tbody tr td:nth-child(10)").all_inner_texts()
    assert all(d.endswith(" s") for d in durations[:-1]) and durations[-1] == ""
    page.click("#trials th[data-key='worker_id']")
    page.wait_for_selector("#trials th.sorted-asc[data-key='worker_id']")
    _wait_for_table(watched, _api_numbers(api, sid, "{}", sort="worker_id"))
    watched.assert_clean()
