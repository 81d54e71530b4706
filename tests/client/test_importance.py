"""``study.importance()``, sync and async: the server's fANOVA importance per objective."""

import asyncio
import json

import httpx
import pytest

from client import AsyncClient, InvalidRequest
from service.app import create_app
from service.settings import Settings
from tests.conftest import FLOAT_X, FLOAT_Y

OBJECTIVES = [{"name": "fx"}, {"name": "gy"}]


def _fn(p):
    return {"fx": p["x"] ** 2, "gy": abs(p["y"])}


def test_importance_names_the_parameter_each_objective_depends_on(client):
    study = client.create_study("imp", [FLOAT_X, FLOAT_Y], objectives=OBJECTIVES, engine="random")
    study.optimize(_fn, n_trials=30, progress=False)
    fx = study.importance()
    assert fx.method == "fanova" and fx.objective == "fx" and fx.used == 30
    assert fx.importances[0].name == "x"
    assert study.importance(objective="gy").importances[0].name == "y"
    small = study.importance(filter=json.dumps({"number": {"max": 2}}))
    assert small.matched == 3 and small.importances == []
    with pytest.raises(InvalidRequest, match="nope"):
        study.importance(objective="nope")


def test_async_importance(sqlite_url):
    async def main():
        app = create_app(Settings(database_url=sqlite_url))
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with AsyncClient("http://testserver", transport=transport, retries=0) as c:
                study = await c.create_study(
                    "imp", [FLOAT_X, FLOAT_Y], objectives=OBJECTIVES, engine="random"
                )
                await study.optimize(_fn, n_trials=20, progress=False)
                return await study.importance(objective="gy")

    result = asyncio.run(main())
    assert result.objective == "gy" and result.importances[0].name == "y"
