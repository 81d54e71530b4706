"""/docs (Swagger UI) and /redoc that work offline: their scripts, stylesheet and favicon are
the files bundled in the ``fastapi-offline`` wheel, served by this server instead of a CDN."""

from __future__ import annotations

import secrets
from pathlib import Path

import fastapi_offline
from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

#: Where the bundled files are served.
ASSETS = "/docs-assets"
_FILES = Path(fastapi_offline.__file__).parent / "static"
#: The pages' Content-Security-Policy: files from this server, the one inline script of the
#: Swagger UI page by its nonce, inline styles (both UIs set them), ReDoc's search worker from a
#: blob: URL, images as data: URLs.
_CSP = (
    "default-src 'self'; script-src 'self' 'nonce-{nonce}'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; worker-src 'self' blob:; connect-src 'self'; object-src 'none'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


def _with_csp(page: HTMLResponse) -> HTMLResponse:
    """``page`` with a CSP that allows its inline scripts by a fresh nonce."""
    nonce = secrets.token_urlsafe(16)
    html = bytes(page.body).replace(b"<script>", f'<script nonce="{nonce}">'.encode())
    return HTMLResponse(html, headers={"Content-Security-Policy": _CSP.format(nonce=nonce)})


def install(app: FastAPI) -> None:
    """Serve the docs pages and their files; create ``app`` with ``docs_url=None`` and
    ``redoc_url=None`` so that FastAPI's CDN pages are not there too."""
    app.mount(ASSETS, StaticFiles(directory=_FILES), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        page = get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS}/favicon.png",
        )
        return _with_csp(page)

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        page = get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS}/favicon.png",
            with_google_fonts=False,
        )
        return _with_csp(page)
