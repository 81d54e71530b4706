"""GET /v1/studies/{id}/history: each point's completion time, the best-so-far in completion
order (``best_by_time``), and the answer cached per study revision."""

from datetime import datetime

from service.lru import LruCache
from tests.conftest import study_body


def _study(http):
    return http.post("/v1/studies", json=study_body()).json()["id"]


def _tell(http, sid, number, **body):
    r = http.post(f"/v1/studies/{sid}/trials/{number}/tell", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_points_carry_their_completion_time_and_the_best_follows_completion_order(http):
    sid = _study(http)
    trials = http.post(f"/v1/studies/{sid}/ask", json={"count": 3}).json()["trials"]
    # Told out of number order: trial 2 first (value 5), then 0 (value 1), then 1 fails.
    told = [
        _tell(http, sid, 2, values={"value": 5.0}),
        _tell(http, sid, 0, values={"value": 1.0}),
        _tell(http, sid, 1, state="failed"),
    ]
    assert [t["number"] for t in trials] == [0, 1, 2]
    body = http.get(f"/v1/studies/{sid}/history").json()
    at = {t["number"]: t["completed_at"] for t in told}
    assert {p["number"]: p["completed_at"] for p in body["points"]} == at
    # By number the best is 1 from trial 0 on; by time it is 5 first, then 1.
    assert body["best"]["value"] == [[0, 1.0]]
    by_time = body["best_by_time"]["value"]
    assert [v for _, v in by_time] == [5.0, 1.0]
    assert [datetime.fromisoformat(t) for t, _ in by_time] == [
        datetime.fromisoformat(at[2]),
        datetime.fromisoformat(at[0]),
    ]


def test_the_answer_is_cached_per_revision_and_a_tell_invalidates_it(http):
    store = http.app.state.store
    sid = _study(http)
    (t,) = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"]
    _tell(http, sid, t["number"], values={"value": 3.0})
    first = http.get(f"/v1/studies/{sid}/history").json()
    cached = len(store.charts)
    calls = []
    compute = store.charts.get

    def counting(key, fn):
        return compute(key, lambda: calls.append(key) or fn())

    store.charts.get = counting
    try:
        assert http.get(f"/v1/studies/{sid}/history").json() == first
        assert calls == [] and len(store.charts) == cached
        # Another max_points is another entry.
        http.get(f"/v1/studies/{sid}/history", params={"max_points": 10})
        assert len(calls) == 1
        (t,) = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"]
        _tell(http, sid, t["number"], values={"value": 2.0})
        after = http.get(f"/v1/studies/{sid}/history").json()
        assert len(calls) == 2
        assert after["finished"] == 2 and after["best"]["value"][-1][1] == 2.0
    finally:
        del store.charts.get


def test_the_chart_cache_drops_the_least_recently_used_entry():
    cache = LruCache(2)
    assert cache.get("a", lambda: 1) == 1 and cache.get("b", lambda: 2) == 2
    assert cache.get("a", lambda: 0) == 1  # a hit makes "a" the most recent
    cache.get("c", lambda: 3)
    assert cache.get("b", lambda: 20) == 20 and cache.get("a", lambda: 10) == 10
    off = LruCache(0)
    assert off.get("a", lambda: 1) == 1 and len(off) == 0


def test_a_cache_bounded_by_bytes_evicts_until_its_entries_fit():
    def held(key: str) -> bytes | None:
        """The entry, if kept (a miss computes nothing and stores nothing)."""

        def missing() -> bytes:
            raise KeyError(key)

        try:
            return cache.get(key, missing)
        except KeyError:
            return None

    cache = LruCache(10, max_bytes=10)
    cache.put("a", b"1234")
    cache.put("b", b"5678")
    cache.put("a", b"12")  # replacing an entry counts its new size only
    cache.put("c", b"abcdef")  # 2 + 4 + 6 > 10: "b", the least recently used, goes
    assert held("b") is None and held("a") == b"12" and held("c") == b"abcdef"
    cache.put("huge", b"x" * 11)  # larger than the bound: not kept, nothing evicted for it
    assert held("huge") is None and held("a") == b"12" and held("c") == b"abcdef"
    cache.put("d", b"xyz")  # 2 + 6 + 3 > 10: "a" goes
    assert held("a") is None and held("c") == b"abcdef" and held("d") == b"xyz"
    cache.put("c", b"y" * 11)  # an oversized new value drops the old one: no stale entry
    assert held("c") is None and held("d") == b"xyz"
    cache.put("e", b"1234567")  # the dropped value's bytes were given back: 3 + 7 fit
    assert held("d") == b"xyz" and held("e") == b"1234567"


def test_a_filtered_history_is_cached_apart_from_the_whole(http):
    sid = _study(http)
    for x, value in [(1.0, 3.0), (-1.0, 1.0)]:
        body = {"params": {"x": x, "y": 0.0}, "values": {"value": value}}
        assert http.post(f"/v1/studies/{sid}/trials", json=body).status_code == 201
    whole = http.get(f"/v1/studies/{sid}/history").json()
    positive = '{"params.x": {"min": 0}}'
    part = http.get(f"/v1/studies/{sid}/history", params={"filter": positive}).json()
    assert whole["finished"] == 2 and part["finished"] == 1
    assert part["best_by_time"]["value"][-1][1] == 3.0
    assert http.get(f"/v1/studies/{sid}/history").json() == whole
