"""GET /v1/studies with filters (state, engine, part of the name) and orders, and its cursor
paging in every order."""

import pytest

from tests.conftest import study_body

NAMES = ["alpha", "Beta", "gamma-1", "ALPHA-2", "delta"]


def _create(http, name, **fields):
    r = http.post("/v1/studies", json=study_body(name, **fields))
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _all(http, **params):
    """Every page of the list, as (id, name) pairs, two at a time."""
    seen, cursor = [], None
    while True:
        at = {"cursor": cursor} if cursor else {}
        page = http.get("/v1/studies", params={"limit": 2, **params, **at}).json()
        seen += [(s["id"], s["name"]) for s in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return seen


@pytest.fixture
def ids(http):
    """Five studies: ``delta`` uses the gp engine and is paused; ``gamma-1`` has 3 trials,
    ``Beta`` 1, the others none."""
    made = {name: _create(http, name) for name in NAMES[:4]}
    made["delta"] = _create(http, "delta", engine={"name": "gp"})
    http.patch(f"/v1/studies/{made['delta']}", json={"state": "paused"})
    http.post(f"/v1/studies/{made['gamma-1']}/ask", json={"count": 3})
    http.post(f"/v1/studies/{made['Beta']}/ask", json={"count": 1})
    return made


def test_filters_by_state_engine_and_part_of_the_name(http, ids):
    assert [n for _, n in _all(http, q="alpha")] == ["alpha", "ALPHA-2"]
    assert [n for _, n in _all(http, q="A-")] == ["gamma-1", "ALPHA-2"]
    assert [n for _, n in _all(http, engine="gp")] == ["delta"]
    assert [n for _, n in _all(http, state="paused")] == ["delta"]
    assert len(_all(http, state=["active", "paused"])) == 5
    assert _all(http, state="completed") == []
    # LIKE's wildcards are matched as themselves.
    assert _all(http, q="%") == [] and _all(http, q="_") == []
    assert [n for _, n in _all(http, q="a", engine="random", state="active")] == [
        "alpha",
        "Beta",
        "gamma-1",
        "ALPHA-2",
    ]


@pytest.mark.parametrize(
    ("sort", "order", "expected"),
    [
        ("id", "asc", NAMES),
        ("id", "desc", NAMES[::-1]),
        ("name", "asc", ["alpha", "ALPHA-2", "Beta", "delta", "gamma-1"]),
        ("name", "desc", ["gamma-1", "delta", "Beta", "ALPHA-2", "alpha"]),
        ("trials", "desc", ["gamma-1", "Beta", "delta", "ALPHA-2", "alpha"]),
        ("trials", "asc", ["alpha", "ALPHA-2", "delta", "Beta", "gamma-1"]),
        ("created_at", "asc", NAMES),
    ],
)
def test_every_order_pages_through_every_study_once(http, ids, sort, order, expected):
    seen = _all(http, sort=sort, order=order)
    assert [n for _, n in seen] == expected
    assert len({i for i, _ in seen}) == len(NAMES)


def test_updated_at_orders_by_last_change(http, ids):
    http.patch(f"/v1/studies/{ids['alpha']}", json={"metadata": {"touched": True}})
    assert _all(http, sort="updated_at", order="desc")[0][1] == "alpha"


def test_a_filtered_order_pages_with_an_offset_cursor(http, ids):
    page = http.get("/v1/studies", params={"sort": "name", "limit": 2, "q": "a"}).json()
    assert page["next_cursor"] == "2"
    rest = http.get("/v1/studies", params={"sort": "name", "q": "a", "cursor": "2"}).json()
    assert [s["name"] for s in page["data"] + rest["data"]] == [
        "alpha",
        "ALPHA-2",
        "Beta",
        "delta",
        "gamma-1",
    ]
    assert rest["next_cursor"] is None


def test_a_bad_sort_state_or_cursor_is_refused(http):
    r = http.get("/v1/studies", params={"sort": "best"})
    assert r.status_code == 422 and r.json()["code"] == "validation_error"
    assert http.get("/v1/studies", params={"state": "gone"}).status_code == 422
    r = http.get("/v1/studies", params={"cursor": "x"})
    assert r.status_code == 422 and r.json()["code"] == "invalid_cursor"


def test_engines_lists_the_names_a_study_may_use(http):
    names = http.get("/v1/engines").json()
    assert names == sorted(names) and {"random", "gp"} <= set(names)
