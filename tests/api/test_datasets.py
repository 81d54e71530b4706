"""/v1/datasets: uploads as text/csv and multipart, reads, delete, and every bad upload with
its code, after which nothing is stored."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, insert

from service.app import create_app
from service.db.models import Job
from service.settings import Settings
from tests.conftest import study_body

CSV = "x,color,y\n" + "".join(f"{i},{'rgb'[i % 3]},{'ab'[i % 2]}\n" for i in range(20))
QUERY = "/v1/datasets?name=demo&target=y&task=classification"
CSV_HEADERS = {"content-type": "text/csv"}
BUILTINS = ["iris", "wine", "breast_cancer", "digits", "diabetes"]


def upload(http: TestClient, content: str | bytes = CSV, url: str = QUERY, **kw):
    kw.setdefault("headers", CSV_HEADERS)
    return http.post(url, content=content, **kw)


def names(http: TestClient) -> list[str]:
    r = http.get("/v1/datasets")
    assert r.status_code == 200
    return [d["name"] for d in r.json()]


def test_upload_as_text_csv_then_get_list_csv_and_delete(http):
    r = upload(http)
    assert r.status_code == 201, r.text
    body = r.json()
    assert {k: body[k] for k in ("name", "target", "task", "n_rows", "classes", "builtin")} == {
        "name": "demo",
        "target": "y",
        "task": "classification",
        "n_rows": 20,
        "classes": ["a", "b"],
        "builtin": False,
    }
    assert body["n_bytes"] == len(CSV.encode())
    assert body["columns"] == [
        {"name": "x", "kind": "numeric", "missing": 0, "categories": None},
        {"name": "color", "kind": "categorical", "missing": 0, "categories": 3},
    ]
    assert names(http) == ["demo", *BUILTINS]
    for ref in (body["id"], "demo"):
        assert http.get(f"/v1/datasets/{ref}").json() == body
        csv = http.get(f"/v1/datasets/{ref}/csv")
        assert csv.content == CSV.encode() and csv.headers["content-type"].startswith("text/csv")
    assert http.delete(f"/v1/datasets/{body['id']}").status_code == 204
    assert names(http) == BUILTINS
    assert http.get("/v1/datasets/demo").json()["code"] == "dataset_not_found"


def test_upload_as_multipart_with_form_fields(http):
    form = {"name": "reg", "target": "x", "task": "regression"}
    r = http.post("/v1/datasets", files={"file": ("d.csv", CSV.encode(), "text/csv")}, data=form)
    assert r.status_code == 201, r.text
    assert (r.json()["task"], r.json()["classes"], r.json()["n_rows"]) == ("regression", None, 20)
    # Query parameters name the dataset as well, and win over the form's fields.
    r = http.post(
        "/v1/datasets?name=q&target=y&task=classification",
        files={"file": ("d.csv", CSV.encode())},
        data={"name": "ignored"},
    )
    assert (r.status_code, r.json()["name"]) == (201, "q")
    assert http.get("/v1/datasets/reg/csv").content == CSV.encode()


def test_builtin_datasets_are_listed_and_read_by_name(http):
    listed = {d["name"]: d for d in http.get("/v1/datasets").json()}
    assert [listed[n]["builtin"] for n in BUILTINS] == [True] * 5
    iris = http.get("/v1/datasets/iris").json()
    assert (iris["id"], iris["n_rows"], iris["task"]) == (None, 150, "classification")
    assert iris["classes"] == ["setosa", "versicolor", "virginica"]
    assert http.get("/v1/datasets/diabetes").json()["task"] == "regression"
    assert http.get("/v1/datasets/iris/csv").json()["code"] == "dataset_not_found"
    assert http.delete("/v1/datasets/iris").json()["code"] == "dataset_not_found"


RAGGED = "a,y\n1,x\n2,y,3\n"


@pytest.mark.parametrize(
    ("url", "content", "headers", "code"),
    [
        (QUERY, "", CSV_HEADERS, "dataset_empty"),
        (QUERY, "x,y\n", CSV_HEADERS, "dataset_empty"),
        (QUERY, b"x,y\n\xff,1\n", CSV_HEADERS, "dataset_unreadable"),
        (QUERY, RAGGED, CSV_HEADERS, "dataset_ragged"),
        (QUERY.replace("target=y", "target=z"), CSV, CSV_HEADERS, "dataset_no_target"),
        (
            QUERY.replace("classification", "regression"),
            CSV,
            CSV_HEADERS,
            "dataset_target_not_numeric",
        ),
        (QUERY, "x,y\n" + "1,a\n" * 9, CSV_HEADERS, "dataset_single_class"),
        (QUERY, CSV, {"content-type": "application/json"}, "unsupported_media_type"),
        (QUERY, CSV, {"content-type": "text/plain"}, "unsupported_media_type"),
        (QUERY, CSV, {"content-type": "multipart/form-data"}, "dataset_unreadable"),
        (QUERY.replace("classification", "clustering"), CSV, CSV_HEADERS, "validation_error"),
        ("/v1/datasets?target=y&task=classification", CSV, CSV_HEADERS, "validation_error"),
        (QUERY.replace("name=demo", "name=123"), CSV, CSV_HEADERS, "validation_error"),
        (QUERY.replace("name=demo", "name=%20"), CSV, CSV_HEADERS, "validation_error"),
        (QUERY.replace("name=demo", "name=a%2Fb"), CSV, CSV_HEADERS, "validation_error"),
        (QUERY.replace("name=demo", "name=iris"), CSV, CSV_HEADERS, "dataset_exists"),
    ],
)
def test_every_bad_upload_has_its_code_and_stores_nothing(http, url, content, headers, code):
    upload(
        http,
        "x,y\n" + "".join(f"{i},{i % 2}\n" for i in range(6)),
        url=QUERY.replace("demo", "kept"),
    )
    before = names(http)
    r = http.post(url, content=content, headers=headers)
    assert r.json()["code"] == code, r.text
    assert r.status_code == {"unsupported_media_type": 415, "dataset_exists": 409}.get(code, 422)
    assert r.headers["content-type"] == "application/problem+json"
    assert names(http) == before


def test_a_form_without_a_file_is_unreadable(http):
    r = http.post(
        "/v1/datasets?name=a&target=y&task=regression",
        data={"x": "1"},
        files={"other": ("a", b"1")},
    )
    assert (r.status_code, r.json()["code"]) == (422, "dataset_unreadable")
    assert "'file'" in r.json()["detail"]
    assert names(http) == BUILTINS


def test_names_are_unique(http):
    assert upload(http).status_code == 201
    r = upload(http)
    assert (r.status_code, r.json()["code"]) == (409, "dataset_exists")
    assert names(http) == ["demo", *BUILTINS]


# '³' and Arabic-Indic '٣': digits to str.isdigit, not to int().
@pytest.mark.parametrize("ref", ["%C2%B3", "%D9%A3"])
def test_a_non_ascii_digit_is_a_name_not_an_id(http, ref):
    for method in ("GET", "DELETE"):
        r = http.request(method, f"/v1/datasets/{ref}")
        assert (r.status_code, r.json()["code"]) == (404, "dataset_not_found"), r.text
    assert http.get(f"/v1/datasets/{ref}/csv").status_code == 404


@pytest.fixture
def small(sqlite_url: str) -> Iterator[TestClient]:
    settings = Settings(database_url=sqlite_url, max_dataset_rows=10, max_dataset_bytes=400)
    with TestClient(create_app(settings)) as http:
        yield http


def test_too_many_rows_or_bytes_is_413(small):
    rows = "x,y\n" + "".join(f"{i},{i % 2}\n" for i in range(11))
    r = upload(small, rows)
    assert (r.status_code, r.json()["code"]) == (413, "dataset_too_large")
    assert "10 data rows" in r.json()["detail"]
    r = upload(small, "x,y\n" + "1,a\n2,b\n" * 100)
    assert (r.status_code, r.json()["code"]) == (413, "dataset_too_large")
    r = small.post(QUERY, files={"file": ("d.csv", ("x,y\n" + "1,a\n" * 200).encode())})
    assert (r.status_code, r.json()["code"]) == (413, "dataset_too_large")
    assert names(small) == BUILTINS
    assert upload(small, rows[: rows.index("10,")]).status_code == 201  # 10 rows fit


def _job(http: TestClient, sqlite_url: str, dataset_id: int, state: str) -> None:
    """A job row in ``state`` on the dataset (the jobs API is another module's)."""
    study_id = http.post("/v1/studies", json=study_body(f"job-{state}")).json()["id"]
    engine = create_engine(sqlite_url)
    now = datetime.now(UTC)
    with engine.begin() as conn:
        conn.execute(
            insert(Job.__table__).values(
                tenant_id=1,
                name=state,
                config={},
                study_id=study_id,
                dataset_id=dataset_id,
                state=state,
                cancel_requested=False,
                takeovers=0,
                created_at=now,
                updated_at=now,
            )
        )
    engine.dispose()


def test_a_dataset_a_queued_or_running_job_uses_cannot_be_deleted(http, sqlite_url):
    dataset_id = upload(http).json()["id"]
    _job(http, sqlite_url, dataset_id, "running")
    r = http.delete(f"/v1/datasets/{dataset_id}")
    assert (r.status_code, r.json()["code"]) == (409, "dataset_in_use")
    assert "'running'" in r.json()["detail"]
    assert names(http) == ["demo", *BUILTINS]


def test_a_dataset_only_ended_jobs_used_is_deleted(http, sqlite_url):
    dataset_id = upload(http).json()["id"]
    _job(http, sqlite_url, dataset_id, "succeeded")
    assert http.delete("/v1/datasets/demo").status_code == 204
    assert names(http) == BUILTINS
    assert http.delete("/v1/datasets/demo").json()["code"] == "dataset_not_found"


def test_the_openapi_document_declares_both_body_types_and_the_errors(http):
    operation = http.app.openapi()["paths"]["/v1/datasets"]["post"]
    assert set(operation["requestBody"]["content"]) == {"text/csv", "multipart/form-data"}
    form = operation["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert form["required"] == ["file"] and set(form["properties"]) == {
        "file",
        "name",
        "target",
        "task",
    }
    declared = " ".join(r["description"] for r in operation["responses"].values())
    for code in ("dataset_too_large", "unsupported_media_type", "dataset_ragged", "dataset_exists"):
        assert f"`{code}`" in declared
    csv = http.app.openapi()["paths"]["/v1/datasets/{dataset}/csv"]["get"]["responses"]["200"]
    assert list(csv["content"]) == ["text/csv"]


def test_an_upload_sent_again_with_its_idempotency_key_is_answered_once(http):
    first = upload(http, headers={**CSV_HEADERS, "Idempotency-Key": "k1"})
    again = http.post(QUERY, content=CSV, headers={**CSV_HEADERS, "Idempotency-Key": "k1"})
    assert first.status_code == again.status_code == 201 and again.json() == first.json()
    assert names(http) == ["demo", *BUILTINS]


def _multipart(parts: list[tuple[str, str]], newline: str = "\r\n", close: bool = True) -> bytes:
    lines = []
    for name, value in parts:
        lines += ["--BOUND", f'Content-Disposition: form-data; name="{name}"', "", value]
    lines.append("--BOUND--" if close else "")
    return newline.join(lines).encode()


MULTIPART = {"content-type": "multipart/form-data; boundary=BOUND"}
FORM = [("name", "m"), ("target", "y"), ("task", "classification")]


def test_a_hand_written_multipart_body_is_read_exactly(http):
    body = _multipart([*FORM, ("file", CSV.rstrip("\n"))])
    r = http.post("/v1/datasets", content=body, headers=MULTIPART)
    assert (r.status_code, r.json()["n_rows"]) == (201, 20), r.text
    assert http.get("/v1/datasets/m/csv").content == CSV.rstrip("\n").encode()
    lf = _multipart([("name", "lf"), *FORM[1:], ("file", CSV)], newline="\n")
    r = http.post("/v1/datasets", content=lf, headers=MULTIPART)
    assert (r.status_code, r.json()["name"]) == (201, "lf"), r.text


@pytest.mark.parametrize(
    ("body", "content_type", "words"),
    [
        (_multipart([*FORM, ("file", CSV)], close=False), MULTIPART, "closing boundary"),
        (_multipart([*FORM, ("file", CSV)]), {"content-type": "multipart/form-data"}, "boundary"),
        (_multipart(FORM), MULTIPART, "no field 'file'"),
    ],
)
def test_a_broken_multipart_body_is_unreadable(http, body, content_type, words):
    r = http.post("/v1/datasets", content=body, headers=content_type)
    assert (r.status_code, r.json()["code"]) == (422, "dataset_unreadable")
    assert words in r.json()["detail"]
    assert names(http) == BUILTINS
