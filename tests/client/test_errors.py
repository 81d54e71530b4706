"""The client's exception classes: one per problem+json code, under the status classes."""

import subprocess
import sys

import pytest

import client as client_pkg
from client import errors
from client.models import ProblemCode
from tests.conftest import FLOAT_X

STATUS_CLASS = {
    400: errors.InvalidRequest,
    401: errors.InvalidRequest,
    403: errors.InvalidRequest,
    404: errors.NotFound,
    405: errors.InvalidRequest,
    408: errors.InvalidRequest,
    409: errors.Conflict,
    413: errors.InvalidRequest,
    415: errors.InvalidRequest,
    422: errors.InvalidRequest,
    429: errors.Unavailable,
    431: errors.InvalidRequest,
    500: errors.ApiError,
    503: errors.Unavailable,
}


def _camel(code: str) -> str:
    return "".join(word.capitalize() for word in code.split("_"))


def test_importing_the_models_and_errors_loads_no_http_client():
    check = "import client.models, client.errors, sys; assert 'httpx' not in sys.modules"
    subprocess.run([sys.executable, "-c", check], check=True)


@pytest.mark.parametrize("code", list(ProblemCode), ids=str)
def test_every_code_has_its_class_under_its_status_class(code):
    cls = getattr(errors, _camel(code))
    assert issubclass(cls, STATUS_CLASS[code.status]) and cls.__doc__
    assert _camel(code) in client_pkg.__all__ and getattr(client_pkg, _camel(code)) is cls
    err = errors.error_for(code.status, {"code": code.value, "detail": "why"})
    assert type(err) is cls
    assert (err.status, err.code, err.detail) == (code.status, code.value, "why")


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (404, errors.NotFound),
        (409, errors.Conflict),
        (418, errors.InvalidRequest),
        (429, errors.Unavailable),
        (502, errors.ApiError),
    ],
)
def test_an_unknown_code_falls_back_to_the_status_class(status, cls):
    err = errors.error_for(status, {"code": "brand_new", "detail": "d"})
    assert type(err) is cls and err.code == "brand_new"


def test_a_code_under_another_status_keeps_the_status_class():
    err = errors.error_for(404, {"code": "http_error", "detail": "d"})
    assert type(err) is errors.NotFound


def test_a_double_tell_raises_trial_finished_a_conflict(client):
    study = client.create_study("twice", [FLOAT_X])
    (trial,) = study.ask()
    study.tell(trial.number, 1.0)
    with pytest.raises(errors.TrialFinished) as err:
        study.tell(trial.number, 2.0)
    assert err.value.status == 409 and err.value.code == "trial_finished"
    assert "finished" in err.value.detail
    try:  # code written against the status classes keeps working
        study.tell(trial.number, 3.0)
    except errors.Conflict as exc:
        assert isinstance(exc, errors.TrialFinished)
    else:
        pytest.fail("a double tell did not raise")
