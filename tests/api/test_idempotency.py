from tests.conftest import study_body


def test_same_key_same_body_replays_the_stored_response(http):
    sid = http.post("/v1/studies", json=study_body()).json()["id"]
    headers = {"Idempotency-Key": "abc"}
    first = http.post(f"/v1/studies/{sid}/ask", json={"count": 2}, headers=headers)
    second = http.post(f"/v1/studies/{sid}/ask", json={"count": 2}, headers=headers)
    assert second.status_code == 200 and second.content == first.content
    assert http.get(f"/v1/studies/{sid}").json()["trial_counts"] == {"running": 2}


def test_same_key_with_another_body_is_409(http):
    sid = http.post("/v1/studies", json=study_body()).json()["id"]
    headers = {"Idempotency-Key": "abc"}
    http.post(f"/v1/studies/{sid}/ask", json={"count": 2}, headers=headers)
    r = http.post(f"/v1/studies/{sid}/ask", json={"count": 3}, headers=headers)
    assert r.status_code == 409 and r.json()["code"] == "idempotency_key_reused"
    r = http.post(
        f"/v1/studies/{sid}/trials/0/tell", json={"values": {"value": 1}}, headers=headers
    )
    assert r.status_code == 409


def test_a_replayed_tell_is_not_a_conflict(http):
    sid = http.post("/v1/studies", json=study_body()).json()["id"]
    (t,) = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"]
    url = f"/v1/studies/{sid}/trials/{t['number']}/tell"
    headers = {"Idempotency-Key": "tell-1"}
    first = http.post(url, json={"values": {"value": 2.0}}, headers=headers)
    again = http.post(url, json={"values": {"value": 2.0}}, headers=headers)
    assert first.status_code == again.status_code == 200
    assert again.content == first.content


def test_create_study_with_a_key_is_replayed_with_201(http):
    headers = {"Idempotency-Key": "create-1"}
    first = http.post("/v1/studies", json=study_body(), headers=headers)
    again = http.post("/v1/studies", json=study_body(), headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.json()["id"] == first.json()["id"]


def test_an_error_is_not_stored_under_the_key(http):
    headers = {"Idempotency-Key": "k"}
    sid = http.post("/v1/studies", json=study_body()).json()["id"]
    http.patch(f"/v1/studies/{sid}", json={"state": "paused"})
    assert http.post(f"/v1/studies/{sid}/ask", json={}, headers=headers).status_code == 409
    http.patch(f"/v1/studies/{sid}", json={"state": "active"})
    assert http.post(f"/v1/studies/{sid}/ask", json={}, headers=headers).status_code == 200


def test_the_query_string_is_part_of_the_request(http):
    sid = http.post("/v1/studies", json=study_body()).json()["id"]
    exported = http.get(f"/v1/studies/{sid}/export").json()
    headers = {"Idempotency-Key": "imp"}
    r = http.post("/v1/studies/import", json=exported, params={"name": "b"}, headers=headers)
    assert r.status_code == 201
    r = http.post("/v1/studies/import", json=exported, params={"name": "c"}, headers=headers)
    assert r.status_code == 409 and r.json()["code"] == "idempotency_key_reused"
