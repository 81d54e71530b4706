"""The dashboard's files come from this server: its pages, its modules and Plotly.js."""

import re
from html.parser import HTMLParser

import pytest

from service.dashboard import STATIC


@pytest.mark.parametrize(
    "path", ["/dashboard", "/dashboard/studies/7", "/dashboard/studies/7/trials/3"]
)
def test_the_pages_are_html_whose_scripts_and_styles_are_served_here(http, path):
    r = http.get(path)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    for src in re.findall(r'(?:src|href)="([^"]+)"', r.text):
        if src.startswith("data:"):
            continue
        assert src.startswith("/dashboard"), src  # no CDN
        assert http.get(src).status_code == 200, src


def test_every_module_imports_only_modules_served_here(http):
    for module in STATIC.glob("*.js"):
        r = http.get(f"/dashboard/static/{module.name}")
        assert r.status_code == 200 and "javascript" in r.headers["content-type"]
        for imported in re.findall(r'from "(\.[^"]+)"', r.text):
            assert (STATIC / imported).is_file(), f"{module.name} imports {imported}"


def test_plotly_is_served_gzipped_under_2_mb(http):
    r = http.get("/dashboard/plotly.min.js", headers={"Accept-Encoding": "gzip"})
    assert r.status_code == 200 and r.headers["content-encoding"] == "gzip"
    assert int(r.headers["content-length"]) < 2_000_000
    assert r.content.startswith(b"/**") and len(r.content) > 3_000_000
    plain = http.get("/dashboard/plotly.min.js", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers and plain.content == r.content


def test_a_study_page_of_a_malformed_id_and_a_missing_file_are_problems(http):
    assert http.get("/dashboard/studies/abc").json()["code"] == "validation_error"
    assert http.get("/dashboard/static/nope.js").json()["code"] == "not_found"


def test_the_dashboard_is_not_part_of_the_api_description(http):
    assert not [p for p in http.app.openapi()["paths"] if p.startswith("/dashboard")]


class _Nesting(HTMLParser):
    """Checks that every element a page opens is closed, in order (void elements aside)."""

    VOID = {"meta", "link", "br", "hr", "img", "input", "col", "source", "area", "base", "wbr"}

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.open or self.open[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.open[-1:]} at line {self.getpos()[0]}")
        else:
            self.open.pop()


@pytest.mark.parametrize("page", sorted(p.name for p in STATIC.glob("*.html")))
def test_every_page_closes_each_element_it_opens(page):
    # A lost </section> hides every view after it inside a hidden section.
    parser = _Nesting()
    parser.feed((STATIC / page).read_text(encoding="utf-8"))
    assert parser.errors == [] and parser.open == [], (parser.errors, parser.open)
