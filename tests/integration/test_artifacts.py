"""The artifact store behind a real two-worker uvicorn: uploads over the limit leave nothing,
and readers never see a partly written artifact while another request replaces it."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx

from client import Client

LIMIT = 300_000


def _start(start_server, tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'asktell.db'}"
    return start_server(url, ASKTELL_MAX_ARTIFACT_BYTES=str(LIMIT), ASKTELL_RUN_JOBS="false")


def test_a_cut_upload_leaves_the_old_artifact_and_no_partial_file(start_server, tmp_path):
    server = _start(start_server, tmp_path)
    with Client(server.url, retries=0) as client:
        client.put_artifact("jobs/1/model.pt", b"old")

        def body():  # chunked: the server meets the limit while the body streams
            for _ in range(8):
                yield b"z" * 50_000

        r = httpx.put(f"{server.url}/v1/artifacts/jobs/1/model.pt", content=body())
        assert r.status_code == 413
        assert r.json()["code"] == "body_too_large"
        assert client.get_artifact("jobs/1/model.pt") == b"old"
    root = tmp_path / "asktell-artifacts"
    assert [p for p in (root / ".partial").iterdir()] == []
    assert sorted(p.name for p in root.rglob("*") if p.is_file()) == ["model.pt"]


def test_readers_see_whole_artifacts_during_replaces(start_server, tmp_path):
    server = _start(start_server, tmp_path)
    versions = [bytes([65 + i]) * 200_000 for i in range(2)]
    seen: list[bytes] = []
    errors: list[BaseException] = []
    with Client(server.url, retries=0) as client:
        client.put_artifact("m.pt", versions[0])
        done = threading.Event()

        def write() -> None:
            try:
                with Client(server.url, retries=0) as writer:
                    for i in range(40):
                        writer.put_artifact("m.pt", versions[i % 2])
            except BaseException as exc:
                errors.append(exc)
            finally:
                done.set()

        thread = threading.Thread(target=write)
        thread.start()
        while not done.is_set():
            seen.append(client.get_artifact("m.pt"))
        thread.join()
    assert errors == []
    assert len(seen) > 5
    assert all(data in versions for data in seen)
