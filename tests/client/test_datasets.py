"""The clients' dataset methods: upload (bytes, text, a path), list, get, delete, errors."""

from __future__ import annotations

import pytest

from client.errors import DatasetExists, DatasetNotFound, DatasetRagged, UnsupportedMediaType
from client.models import DatasetPublic
from tests.client.test_async import run

CSV = "x,y\n" + "".join(f"{i},{i * 2 + 1}\n" for i in range(10))
BUILTINS = ["iris", "wine", "breast_cancer", "digits", "diabetes"]


def test_upload_list_get_and_delete_with_the_sync_client(client, tmp_path):
    path = tmp_path / "data.csv"
    path.write_text(CSV)
    a = client.upload_dataset("a", path, target="y", task="regression")
    b = client.upload_dataset("b", str(path), target="y", task="regression")
    c = client.upload_dataset("c", CSV, target="y", task="regression")
    d = client.upload_dataset("d", CSV.encode(), target="x", task="classification")
    assert isinstance(a, DatasetPublic) and a.n_rows == 10 and a.n_bytes == len(CSV)
    assert (b.n_bytes, c.n_bytes, d.classes) == (len(CSV), len(CSV), [str(i) for i in range(10)])
    assert [x.name for x in client.datasets()] == ["a", "b", "c", "d", *BUILTINS]
    assert client.dataset(a.id) == a and client.dataset("a") == a
    assert client.dataset("iris").builtin
    assert client.dataset_csv(d.id) == CSV.encode() == client.dataset_csv("a")
    with pytest.raises(DatasetExists):
        client.upload_dataset("a", CSV, target="y", task="regression")
    with pytest.raises(DatasetRagged):
        client.upload_dataset("e", CSV + "1,2,3\n", target="y", task="regression")
    client.delete_dataset(a.id)
    client.delete_dataset("b")
    with pytest.raises(DatasetNotFound):
        client.dataset("a")
    assert [x.name for x in client.datasets()] == ["c", "d", *BUILTINS]


def test_a_name_needing_quoting_reaches_the_server(client):
    info = client.upload_dataset("my data?v1#", CSV, target="y", task="regression")
    assert client.dataset("my data?v1#") == info
    client.delete_dataset("my data?v1#")


def test_the_async_client_has_the_same_methods(sqlite_url):
    async def body(client):
        info = await client.upload_dataset("a", CSV, target="y", task="regression")
        listed = await client.datasets()
        got = await client.dataset("a")
        await client.delete_dataset(info.id)
        with pytest.raises(DatasetNotFound):
            await client.dataset(info.id)
        return info, listed, got

    info, listed, got = run(body, sqlite_url)
    assert got == info and [x.name for x in listed] == ["a", *BUILTINS]


def test_the_server_answers_415_to_another_content_type(http):
    r = http.post("/v1/datasets?name=a&target=y&task=regression", content=CSV)
    assert r.status_code == 415
    from client.errors import error_for

    assert isinstance(error_for(415, r.json()), UnsupportedMediaType)
