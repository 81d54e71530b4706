"""/docs and /redoc need no internet: every file their pages load is served by the server."""

from __future__ import annotations

import re

import pytest


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_every_file_a_docs_page_loads_is_served_locally(http, page):
    r = http.get(page)
    assert r.status_code == 200
    assert "http://" not in r.text and "https://" not in r.text
    files = re.findall(r'<(?:script|link)[^>]*?(?:src|href)="([^"]+)"', r.text)
    spec = re.findall(r"(?:url: '|spec-url=\")([^'\"]+)", r.text)
    assert len(files) >= 2 and spec == ["/openapi.json"]
    for path in files + spec:
        assert path.startswith("/") and not path.startswith("//"), path
        assert http.get(path).status_code == 200, path
