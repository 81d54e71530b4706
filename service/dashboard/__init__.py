"""The dashboard at /dashboard: static pages (plain HTML, CSS and ES modules) that read only the
public JSON API (/v1/...), and Plotly.js from the ``plotly`` wheel, which bundles it. The server
serves every file, so the dashboard works without internet and without a build step."""

from __future__ import annotations

import gzip
from functools import cache
from importlib.util import find_spec
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Header, Response
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from service.errors import unavailable
from service.routers.common import StudyId, TrialNumber

STATIC = Path(__file__).parent / "static"
JAVASCRIPT = "text/javascript"

#: The pages' Content-Security-Policy: scripts, styles and data from this server only. Plotly
#: sets inline styles on the plots it draws (hence ``'unsafe-inline'`` for styles only) and
#: exports images as data: URLs.
PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)

router = APIRouter(include_in_schema=False)
router.mount("/dashboard/static", StaticFiles(directory=STATIC), name="dashboard-static")


@router.get("/dashboard")
def studies_page() -> FileResponse:
    return _page("studies.html")


@router.get("/dashboard/compare")
def compare_page() -> FileResponse:
    # The page reads the studies' ids from its query (?ids=1,2,3).
    return _page("compare.html")


@router.get("/dashboard/studies/{study_id}")
def study_page(study_id: StudyId) -> FileResponse:
    # The page reads the study id from its own URL; the id is checked here only so a
    # malformed URL is a 422 rather than an empty page.
    return _page("study.html")


@router.get("/dashboard/studies/{study_id}/trials/{number}")
def trial_page(study_id: StudyId, number: TrialNumber) -> FileResponse:
    # Like the study page, the trial page reads its ids from its own URL.
    return _page("trial.html")


@router.get("/dashboard/plotly.min.js")
def plotly_js(accept_encoding: Annotated[str, Header()] = "") -> Response:
    # Cached by browsers for a day: the file changes only with the installed wheel.
    headers = {"Cache-Control": "public, max-age=86400", "Vary": "Accept-Encoding"}
    if "gzip" in accept_encoding:
        # 4.8 MB as a file, about 1.4 MB compressed: the page's largest download by far.
        headers["Content-Encoding"] = "gzip"
        return Response(_plotly_gzip(), media_type=JAVASCRIPT, headers=headers)
    return FileResponse(_plotly_path(), media_type=JAVASCRIPT, headers=headers)


def _page(name: str) -> FileResponse:
    return FileResponse(STATIC / name, headers={"Content-Security-Policy": PAGE_CSP})


def _plotly_path() -> Path:
    spec = find_spec("plotly")
    if spec is None or spec.origin is None:
        raise unavailable("the plotly package is not installed: pip install 'asktell[server]'")
    return Path(spec.origin).parent / "package_data" / "plotly.min.js"


@cache
def _plotly_gzip() -> bytes:
    return gzip.compress(_plotly_path().read_bytes(), compresslevel=6)
