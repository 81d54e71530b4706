"""The artifact store: PUT/GET/DELETE /v1/artifacts/{key}, key checks, size limit, atomic
writes, and the sync and async clients' methods."""

import asyncio
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from client import AsyncClient
from client.errors import ArtifactNotFound, InvalidArtifactKey
from service.app import create_app
from service.artifacts import ArtifactStore, artifacts_root
from service.artifacts import InvalidArtifactKey as StoreKeyError
from service.db.models import DEFAULT_TENANT_ID
from service.settings import Settings

OCTETS = {"Content-Type": "application/octet-stream"}


def _root(http: TestClient) -> Path:
    return http.app.state.artifacts.root


def test_put_get_replace_delete(http):
    data = bytes(range(256)) * 1000
    r = http.put("/v1/artifacts/jobs/3/trial-7.pt", content=data, headers=OCTETS)
    assert r.status_code == 201, r.text
    assert r.json() == {"key": "jobs/3/trial-7.pt", "size": len(data)}
    r = http.get("/v1/artifacts/jobs/3/trial-7.pt")
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/octet-stream"
    assert r.headers["content-length"] == str(len(data))
    assert r.content == data
    r = http.put("/v1/artifacts/jobs/3/trial-7.pt", content=b"new", headers=OCTETS)
    assert r.status_code == 200, r.text
    assert r.json()["size"] == 3
    assert http.get("/v1/artifacts/jobs/3/trial-7.pt").content == b"new"
    r = http.delete("/v1/artifacts/jobs/3/trial-7.pt")
    assert r.status_code == 204
    assert r.content == b""
    r = http.get("/v1/artifacts/jobs/3/trial-7.pt")
    assert r.status_code == 404
    assert r.json()["code"] == "artifact_not_found"
    assert http.delete("/v1/artifacts/jobs/3/trial-7.pt").json()["code"] == "artifact_not_found"


def test_empty_artifact(http):
    assert http.put("/v1/artifacts/empty", content=b"").status_code == 201
    r = http.get("/v1/artifacts/empty")
    assert r.status_code == 200
    assert r.content == b""


def test_stored_in_the_tenant_folder_beside_the_database(http, tmp_path):
    http.put("/v1/artifacts/a/b.bin", content=b"xyz")
    # sqlite_url is tmp_path/asktell.db: the artifacts live in tmp_path/asktell-artifacts/<tenant>
    assert _root(http) == tmp_path / "asktell-artifacts"
    assert (
        tmp_path / "asktell-artifacts" / str(DEFAULT_TENANT_ID) / "a" / "b.bin"
    ).read_bytes() == (b"xyz")


@pytest.mark.parametrize(
    "path",
    [
        "/v1/artifacts/%2e%2e/secret",
        "/v1/artifacts/a/%2e%2e/%2e%2e/x",
        "/v1/artifacts/a/%2e/x",
        "/v1/artifacts/a//b",
        "/v1/artifacts/a/b/",
        "/v1/artifacts/",
        "/v1/artifacts/sp%20ace",
        "/v1/artifacts/%C3%A9t%C3%A9",
        "/v1/artifacts/a%5Cb",
        "/v1/artifacts/new%0Aline",
        "/v1/artifacts/a/b%0A",
        "/v1/artifacts/" + "x" * 600,
    ],
)
def test_bad_keys_are_422(http, tmp_path, path):
    for method in ("PUT", "GET", "DELETE"):
        r = http.request(method, path, content=b"data" if method == "PUT" else None)
        assert r.status_code == 422, (method, path, r.text)
        assert r.json()["code"] == "invalid_artifact_key"
        assert r.headers["content-type"] == "application/problem+json"
    assert not list(tmp_path.glob("**/secret"))
    assert not list(tmp_path.glob("**/x"))


def test_dot_dot_never_leaves_the_root():
    store = ArtifactStore(Path("/nonexistent-root"))
    for key in ("..", "../x", "a/../../x", ".", "a/./b", "/abs", "", "a/"):
        with pytest.raises(StoreKeyError):
            store.path(1, key)
    assert store.path(1, "..a/b..c/.x") == Path("/nonexistent-root/1/..a/b..c/.x")


def test_a_file_cannot_also_be_a_folder(http):
    assert http.put("/v1/artifacts/a/b", content=b"1").status_code == 201
    r = http.put("/v1/artifacts/a/b/c", content=b"2")
    assert r.status_code == 422
    assert r.json()["code"] == "invalid_artifact_key"
    r = http.put("/v1/artifacts/a", content=b"3")
    assert r.status_code == 422
    assert http.get("/v1/artifacts/a/b").content == b"1"
    assert http.get("/v1/artifacts/a").json()["code"] == "artifact_not_found"


@pytest.fixture
def small(sqlite_url):
    """The app with artifacts of at most 1000 bytes."""
    settings = Settings(database_url=sqlite_url, reaper_interval=0.2, max_artifact_bytes=1000)
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def _partials(http: TestClient) -> list[Path]:
    return [p for p in (_root(http) / ".partial").glob("*") if p.is_file()]


def test_over_the_limit_is_413(small):
    assert small.put("/v1/artifacts/ok", content=b"x" * 1000).status_code == 201
    r = small.put("/v1/artifacts/big", content=b"x" * 1001)
    assert r.status_code == 413
    assert r.json()["code"] == "body_too_large"
    assert small.get("/v1/artifacts/big").status_code == 404


def test_a_failed_upload_leaves_no_partial_file_and_keeps_the_old_one(small):
    assert small.put("/v1/artifacts/m.pt", content=b"old").status_code == 201

    def chunks():  # no Content-Length: the limit is met while the body streams
        for _ in range(10):
            yield b"y" * 300

    r = small.put("/v1/artifacts/m.pt", content=chunks())
    assert r.status_code == 413
    assert small.get("/v1/artifacts/m.pt").content == b"old"
    r = small.put("/v1/artifacts/fresh.pt", content=chunks())
    assert r.status_code == 413
    assert small.get("/v1/artifacts/fresh.pt").status_code == 404
    assert _partials(small) == []
    tenant = _root(small) / str(DEFAULT_TENANT_ID)
    assert sorted(p.name for p in tenant.rglob("*")) == ["m.pt"]


def test_a_write_that_fails_midway_removes_its_temporary_file(tmp_path):
    store = ArtifactStore(tmp_path)
    store.put(1, "k", b"before")
    with pytest.raises(RuntimeError), store.writer(1, "k") as (f, _):
        f.write(b"half")
        raise RuntimeError("disk gone")
    assert store.read(1, "k") == b"before"
    assert list((tmp_path / ".partial").iterdir()) == []


def test_store_methods(tmp_path):
    store = ArtifactStore(tmp_path)
    assert store.put(1, "jobs/3/trial-0.pt", b"a") is True
    assert store.put(1, "jobs/3/trial-0.pt", b"ab") is False
    store.put(1, "jobs/3/trial-1.pt", b"b")
    store.put(1, "jobs/3/model.pt", b"m")
    store.put(1, "jobs/30/trial-0.pt", b"c")
    store.put(2, "jobs/3/trial-0.pt", b"other tenant")
    assert store.size(1, "jobs/3/trial-0.pt") == 2
    assert store.exists(1, "jobs/3/model.pt") and not store.exists(1, "jobs/3/nope")
    with store.open(1, "jobs/3/trial-1.pt") as f:
        assert f.read() == b"b"
    assert store.delete_many(1, ["jobs/3/trial-1.pt", "jobs/3/missing"]) == 1
    assert store.delete_prefix(1, "jobs/3/trial-") == 1
    assert store.exists(1, "jobs/3/model.pt")
    assert store.delete_prefix(1, "jobs/3/") == 1
    assert not (tmp_path / "1" / "jobs" / "3").exists()
    assert store.read(1, "jobs/30/trial-0.pt") == b"c"
    assert store.read(2, "jobs/3/trial-0.pt") == b"other tenant"
    assert store.delete_prefix(1, "jobs/3/") == 0
    with pytest.raises(StoreKeyError):
        store.delete_prefix(1, "../")


def test_artifacts_root():
    assert artifacts_root(Settings(artifacts_dir="/data/a")) == Path("/data/a")
    sqlite = Settings(database_url="sqlite:////srv/x/asktell.db")
    assert artifacts_root(sqlite) == Path("/srv/x/asktell-artifacts")
    pg = Settings(database_url="postgresql://u@h/db")
    assert artifacts_root(pg) == Path("asktell-artifacts")


def test_sync_client(client):
    info = client.put_artifact("jobs/1/trial-0.pt", b"\x00\x01payload")
    assert (info.key, info.size) == ("jobs/1/trial-0.pt", 9)
    assert client.get_artifact("jobs/1/trial-0.pt") == b"\x00\x01payload"
    client.put_artifact("jobs/1/trial-0.pt", b"v2")
    assert client.get_artifact("jobs/1/trial-0.pt") == b"v2"
    assert client.delete_artifact("jobs/1/trial-0.pt") is None
    with pytest.raises(ArtifactNotFound):
        client.get_artifact("jobs/1/trial-0.pt")
    with pytest.raises(ArtifactNotFound):
        client.delete_artifact("jobs/1/trial-0.pt")
    with pytest.raises(InvalidArtifactKey):
        client.put_artifact("../escape", b"x")


def test_async_client(http):
    # The async client over the app's ASGI interface.
    transport = httpx.ASGITransport(app=http.app)

    async def run():
        async with AsyncClient("http://testserver", transport=transport, retries=0) as c:
            await c.put_artifact("m/model.pt", b"bytes")
            got = await c.get_artifact("m/model.pt")
            await c.delete_artifact("m/model.pt")
            with pytest.raises(ArtifactNotFound):
                await c.get_artifact("m/model.pt")
            return got

    assert asyncio.run(run()) == b"bytes"


def test_openapi_describes_binary_bodies_and_errors(http):
    paths = http.get("/openapi.json").json()["paths"]
    item = paths["/v1/artifacts/{key}"]
    binary = {"type": "string", "format": "binary"}
    put = item["put"]
    assert put["requestBody"]["content"] == {"application/octet-stream": {"schema": binary}}
    assert {"200", "201", "413", "422"} <= set(put["responses"])
    get = item["get"]["responses"]
    assert get["200"]["content"] == {"application/octet-stream": {"schema": binary}}
    assert "artifact_not_found" in get["404"]["description"]
    assert "invalid_artifact_key" in get["422"]["description"]
    assert "artifact_not_found" in item["delete"]["responses"]["404"]["description"]
    assert "204" in item["delete"]["responses"]
