from tests.conftest import FLOAT_X, study_body


def test_create_returns_201_then_get_or_create_returns_the_same_study(http):
    first = http.post("/v1/studies", json=study_body())
    assert first.status_code == 201
    again = http.post("/v1/studies", json=study_body())
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["seed"] == first.json()["seed"]


def test_same_name_with_another_config_is_a_conflict(http):
    http.post("/v1/studies", json=study_body())
    r = http.post("/v1/studies", json=study_body(parameters=[FLOAT_X]))
    assert r.status_code == 409
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["code"] == "study_exists"


def test_get_reports_counts_best_engine_and_revision(http):
    sid = http.post("/v1/studies", json=study_body()).json()["id"]
    trials = http.post(f"/v1/studies/{sid}/ask", json={"count": 3}).json()["trials"]
    for value, t in zip([3.0, 1.0, 2.0], trials, strict=True):
        http.post(f"/v1/studies/{sid}/trials/{t['number']}/tell", json={"values": {"value": value}})
    http.post(f"/v1/studies/{sid}/ask", json={"count": 1})
    study = http.get(f"/v1/studies/{sid}").json()
    assert study["trial_counts"] == {"completed": 3, "running": 1}
    assert study["best_values"] == {"value": 1.0}
    assert study["engine"] == {"name": "random", "options": {}}
    assert study["revision"] == 5
    assert study["engine_state_version"] == 2


def test_list_pages_with_a_cursor(http):
    ids = [http.post("/v1/studies", json=study_body(f"s{i}")).json()["id"] for i in range(5)]
    seen, cursor = [], None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = http.get("/v1/studies", params=params).json()
        seen += [s["id"] for s in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ids


def test_patch_changes_state_and_merges_metadata(http):
    sid = http.post("/v1/studies", json=study_body(metadata={"a": 1, "b": 2})).json()["id"]
    r = http.patch(f"/v1/studies/{sid}", json={"state": "paused", "metadata": {"b": None, "c": 3}})
    assert r.status_code == 200
    assert r.json()["state"] == "paused"
    assert r.json()["metadata"] == {"a": 1, "c": 3}
    r = http.post(f"/v1/studies/{sid}/ask", json={})
    assert r.status_code == 409 and r.json()["code"] == "study_not_active"
    http.patch(f"/v1/studies/{sid}", json={"state": "active"})
    assert http.post(f"/v1/studies/{sid}/ask", json={}).status_code == 200


def test_delete_is_soft_and_frees_the_name(http):
    sid = http.post("/v1/studies", json=study_body()).json()["id"]
    assert http.delete(f"/v1/studies/{sid}").status_code == 204
    assert http.delete(f"/v1/studies/{sid}").status_code == 204  # a retried DELETE succeeds
    assert http.delete("/v1/studies/4242").json()["code"] == "not_found"
    assert http.get(f"/v1/studies/{sid}").json()["code"] == "not_found"
    assert http.get("/v1/studies").json()["data"] == []
    again = http.post("/v1/studies", json=study_body())
    assert again.status_code == 201 and again.json()["id"] != sid


def test_seed_makes_two_studies_ask_the_same_points(http):
    a = http.post("/v1/studies", json=study_body("a", seed=42)).json()["id"]
    b = http.post("/v1/studies", json=study_body("b", seed=42)).json()["id"]
    pa = [
        t["params"] for t in http.post(f"/v1/studies/{a}/ask", json={"count": 4}).json()["trials"]
    ]
    pb = [
        t["params"] for t in http.post(f"/v1/studies/{b}/ask", json={"count": 4}).json()["trials"]
    ]
    assert pa == pb


def test_openapi_has_stable_operation_ids(http):
    ops = {
        op["operationId"]
        for path in http.get("/openapi.json").json()["paths"].values()
        for op in path.values()
    }
    assert {"studies-create_study", "trials-ask", "trials-tell"} <= ops
