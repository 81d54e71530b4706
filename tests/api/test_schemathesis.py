"""Schemathesis fuzzes every operation of /openapi.json against the app in process: no 5xx, and
every answer's status, content type and body as the document declares them.

Most generated ids name nothing, so ids in paths are swapped, half of the time, for those of a
seeded study (with a running and a completed trial), sampler, dataset and artifact: the
operations then also answer from real rows. The example count per operation keeps the whole
module near a minute on two cores.

The examples are derandomized: the same cases every run, so CI is reproducible. ``ASKTELL_FUZZ=
random`` draws fresh ones (and ``ASKTELL_FUZZ_EXAMPLES`` sets their count): that run has found
bugs the fixed cases missed, each then kept as a test of its own.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from service.app import create_app
from service.settings import Settings
from tests.conftest import study_body

#: Examples per operation and generation mode (valid and invalid inputs).
MAX_EXAMPLES = int(os.environ.get("ASKTELL_FUZZ_EXAMPLES", "25"))

#: Fixed cases unless a run asks for fresh ones.
DERANDOMIZE = os.environ.get("ASKTELL_FUZZ") != "random"

#: An id no seeded row has.
UNUSED_ID = 2**31 - 1

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def _seed(http: TestClient) -> dict[str, Any]:
    """Rows for the fuzzed ids to name: path parameter name to its value."""
    created = [
        http.post("/v1/studies", json=study_body("fuzzed")),
        http.post("/v1/samplers", json={"dim": 2, "n_targets": 1, "n_particles": 4}),
        http.post(
            "/v1/datasets?name=fuzzed&target=y&task=regression",
            content=b"a,y\n" + b"".join(b"%d,%d\n" % (i, i * i) for i in range(10)),
            headers={"content-type": "text/csv"},
        ),
        http.put("/v1/artifacts/fuzzed.bin", content=b"x"),
    ]
    assert [r.status_code for r in created] == [201] * 4, [r.text for r in created]
    study = created[0].json()["id"]
    asked = http.post(f"/v1/studies/{study}/ask", json={"count": 2}).json()["trials"]
    told = http.post(
        f"/v1/studies/{study}/trials/{asked[0]['number']}/tell", json={"values": {"value": 1.0}}
    )
    assert told.status_code == 200, told.text
    return {
        "study_id": study,
        "number": asked[1]["number"],
        "sampler_id": created[1].json()["id"],
        "dataset": "fuzzed",
        "key": "fuzzed.bin",
    }


def _cases() -> list[tuple[str, str, GenerationMode]]:
    """(method, path, mode) for every operation of the document (building it needs no
    database): invalid inputs only where the operation takes some."""
    document = create_app(Settings(database_url="sqlite://")).openapi()
    return [
        (method.upper(), path, mode)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        for mode in GenerationMode
        if mode is GenerationMode.POSITIVE
        or operation.get("parameters")
        or "requestBody" in operation
    ]


@pytest.fixture(scope="module")
def seeded_database(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path, dict[str, Any]]:
    """The document as schemathesis loads it from the app, a database file with the seeded
    rows, and their ids."""
    database = tmp_path_factory.mktemp("seeded") / "asktell.db"
    app = create_app(Settings(database_url=f"sqlite:///{database}", run_jobs=False))
    with TestClient(app) as http:
        seeded = _seed(http)
    return schemathesis.openapi.from_asgi("/openapi.json", app), database, seeded


@pytest.mark.parametrize(("method", "path", "mode"), _cases(), ids=str)
def test_every_operation_answers_as_documented(seeded_database, tmp_path, method, path, mode):
    schema, database, seeded_ids = seeded_database
    # A fresh app on a copy per operation: a fuzzed delete or tell of a seeded row leaves the
    # next operation's intact. Schemathesis runs its lifespan, and ends it after the test.
    shutil.copy(database, tmp_path / "asktell.db")
    artifacts = database.parent / "asktell-artifacts"
    shutil.copytree(artifacts, tmp_path / artifacts.name)
    schema.app = create_app(
        Settings(database_url=f"sqlite:///{tmp_path / 'asktell.db'}", run_jobs=False)
    )
    operation = schema[path][method]

    def seeded(drawn: tuple[Any, bool]) -> Any:
        case, swap = drawn
        known = {k: seeded_ids[k] for k in case.path_parameters if k in seeded_ids}
        if path.endswith("/events"):
            # A real study's event stream never ends (tests/api/test_events.py reads it):
            # fuzzed, the stream answers its errors only, a generated id naming no study.
            if case.path_parameters.get("study_id") == seeded_ids["study_id"]:
                case.path_parameters = {**case.path_parameters, "study_id": UNUSED_ID}
        elif swap and known:
            # Assigned, not updated in place: the case re-checks which of its parts are valid.
            case.path_parameters = {**case.path_parameters, **known}
        return case

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        derandomize=DERANDOMIZE,
        # No shrinking: a failure shows its request as found, and a run stays bounded.
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=st.tuples(operation.as_strategy(generation_mode=mode), st.booleans()).map(seeded))
    def fuzz(case: Any) -> None:
        case.call_and_validate(checks=CHECKS)

    fuzz()
