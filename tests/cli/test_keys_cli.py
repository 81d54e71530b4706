"""``asktell keys`` on the database, and the CLI's remote commands with ``ASKTELL_API_KEY``
against a real uvicorn (in a thread) that needs keys."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from service.settings import get_settings
from tests.cli.test_cli import run
from tests.jobs.conftest import serve


@pytest.fixture
def database(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("ASKTELL_DATABASE_URL", sqlite_url)
    monkeypatch.delenv("ASKTELL_API_KEY", raising=False)
    get_settings.cache_clear()
    yield sqlite_url
    get_settings.cache_clear()


@pytest.fixture
def url(database: str) -> Iterator[str]:
    """A server on that database that needs keys."""
    yield from serve({"database_url": database, "auth": "required"})


def test_keys_create_list_revoke(database, capsys):
    code, out, err = run(capsys, "keys", "create", "--tenant", "acme", "--scope", "admin")
    assert code == 0, err
    key = out.strip()
    assert key.startswith("at_") and "shown this once" in err
    code, out, _ = run(capsys, "keys", "list")
    assert code == 0 and "acme" in out and "admin" in out and "active" in out
    assert key not in out and key.split("_")[1] in out  # the prefix, never the secret
    code, out, _ = run(capsys, "keys", "revoke", "1")
    assert code == 0 and "revoked" in out
    assert "revoked" in run(capsys, "keys", "list", "--tenant", "acme")[1]
    code, _, err = run(capsys, "keys", "list", "--tenant", "nobody")
    assert code == 1 and "no tenant" in err
    code, _, err = run(capsys, "keys", "revoke", "99")
    assert code == 1 and "404 not_found" in err


def test_the_cli_sends_asktell_api_key(url, capsys, monkeypatch):
    code, _, err = run(capsys, "--url", url, "studies", "list")
    assert code == 1 and "401 unauthorized" in err
    code, out, _ = run(capsys, "keys", "create", "--tenant", "acme", "--scope", "read")
    monkeypatch.setenv("ASKTELL_API_KEY", out.strip())
    code, out, err = run(capsys, "--url", url, "studies", "list")
    assert code == 0, err
