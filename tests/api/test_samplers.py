"""/v1/samplers end to end: create, ask, tell, read; the step the server applies; bad input."""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest

from client import AsyncClient, InvalidRequest
from engines import wasserstein_particles as wgd
from service.app import create_app
from service.settings import Settings

MEANS = np.array([[2.0, 0.0], [0.0, 2.0]])


def _scores(X: list[list[float]]) -> tuple[np.ndarray, np.ndarray]:
    """Two Gaussian targets N(mu_k, I): ``grad log pi_k = mu_k - x``, ``log pi_k`` up to a
    constant."""
    P = np.asarray(X)
    diff = MEANS[:, None, :] - P[None, :, :]  # (2, m, 2)
    return diff, -0.5 * np.sum(diff**2, axis=2)


def test_a_sampler_moves_its_particles_to_the_compromise_of_two_targets(client):
    sampler = client.create_sampler(dim=2, n_targets=2, n_particles=30, eta=0.05, seed=3)
    assert sampler.info.iteration == 0 and np.shape(sampler.info.X) == (30, 2)
    info = sampler.run(_scores, iterations=150)
    assert info.iteration == 150
    assert len(info.grad_norm_history) == 150 and len(info.mean_nll_history) == 150
    # The min-norm compromise of two unit Gaussians at (2, 0) and (0, 2) lies on the segment
    # between them, with the weights balanced by symmetry.
    centre = np.mean(info.X, axis=0)
    np.testing.assert_allclose(centre, [1.0, 1.0], atol=0.25)
    assert info.grad_norm_history[-1] < 0.1 * info.grad_norm_history[0]
    assert info.weights is not None and info.weights[0] == pytest.approx(0.5, abs=0.15)
    first_nll, last_nll = info.mean_nll_history[0], info.mean_nll_history[-1]
    assert first_nll is not None and last_nll is not None
    assert sum(last_nll) < sum(first_nll)


def test_the_server_applies_the_librarys_step(http):
    X0 = np.random.default_rng(0).standard_normal((5, 3))
    body = {
        "dim": 3,
        "n_targets": 2,
        "n_particles": 5,
        "eta": 0.02,
        "kernel": "blob",
        "init": {"kind": "points", "X": X0.tolist()},
    }
    r = http.post("/v1/samplers", json=body)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    particles = wgd.Particles.at(X0)
    rng = np.random.default_rng(1)
    for iteration in range(3):
        asked = http.post(f"/v1/samplers/{sid}/ask").json()
        assert asked["iteration"] == iteration
        np.testing.assert_allclose(asked["X"], particles.X, rtol=0, atol=1e-12)
        grad = rng.standard_normal((2, 5, 3))
        r = http.post(
            f"/v1/samplers/{sid}/tell",
            json={"iteration": iteration, "grad_log_prob": grad.tolist()},
        )
        assert r.status_code == 200, r.text
        particles, info = wgd.step(particles, -grad, 0.02, kernel="blob")
        assert r.json()["grad_norm"] == pytest.approx(info.grad_norm, rel=1e-12)
        assert r.json()["weights"] == pytest.approx(info.weights.tolist(), rel=1e-9)
    got = http.get(f"/v1/samplers/{sid}").json()
    np.testing.assert_allclose(got["X"], particles.X, rtol=0, atol=1e-12)
    assert got["iteration"] == 3 and got["mean_nll_history"] == [None] * 3


def test_bad_tells_are_4xx_and_change_nothing(http):
    body = {"dim": 2, "n_targets": 2, "n_particles": 4, "seed": 0}
    sid = http.post("/v1/samplers", json=body).json()["id"]
    before = http.get(f"/v1/samplers/{sid}").json()
    good = np.zeros((2, 4, 2)).tolist()
    url = f"/v1/samplers/{sid}/tell"

    r = http.post(url, json={"iteration": 0, "grad_log_prob": np.zeros((3, 4, 2)).tolist()})
    assert r.status_code == 422 and r.json()["code"] == "shape_mismatch"
    assert "expected shape [2, 4, 2]" in r.json()["detail"]
    ragged = [[[0.0, 0.0]] * 4, [[0.0, 0.0]] * 3]
    r = http.post(url, json={"iteration": 0, "grad_log_prob": ragged})
    assert r.status_code == 422 and r.json()["code"] == "shape_mismatch"
    r = http.post(url, json={"iteration": 0, "grad_log_prob": good, "log_prob": [[0.0] * 4]})
    assert r.status_code == 422 and r.json()["code"] == "shape_mismatch"
    # NaN and Infinity are not JSON, but Python's encoder writes them; so does 1e999.
    text = str(good).replace("0.0", "NaN", 1)
    r = http.post(
        url,
        content=f'{{"iteration": 0, "grad_log_prob": {text}}}',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 422 and r.json()["code"] == "non_finite_gradient"
    assert r.json()["index"] == [0, 0, 0]
    r = http.post(
        url,
        content='{"iteration": 0, "grad_log_prob": ' + str(good).replace("0.0", "1e999", 2) + "}",
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 422 and r.json()["code"] == "non_finite_gradient"
    r = http.post(url, json={"iteration": 0, "grad_log_prob": (np.full((2, 4, 2), 1e300)).tolist()})
    assert r.status_code == 422 and r.json()["code"] == "step_not_finite"
    r = http.post(url, json={"iteration": 0, "grad_log_prob": good, "log_prob": [[1e308] * 4] * 2})
    assert r.status_code == 422 and r.json()["code"] == "non_finite_log_prob"
    r = http.post(url, json={"iteration": 5, "grad_log_prob": good})
    assert r.status_code == 409 and r.json()["code"] == "stale_iteration"
    assert r.json()["iteration"] == 0
    r = http.post(url, json={"iteration": 0, "grad_log_prob": "no"})
    assert r.status_code == 422

    after = http.get(f"/v1/samplers/{sid}").json()
    assert after == before

    assert http.post(url, json={"iteration": 0, "grad_log_prob": good}).status_code == 200
    r = http.post(url, json={"iteration": 0, "grad_log_prob": good})
    assert r.status_code == 409 and r.json()["iteration"] == 1


@pytest.mark.parametrize("weighting", ["shared", "per_particle"])
@pytest.mark.parametrize("bounds", [None, [-1.0, 1.0]])
def test_a_step_that_overflows_is_refused_whatever_the_options(http, weighting, bounds):
    body = {"dim": 2, "n_targets": 3, "n_particles": 4, "seed": 0, "weighting": weighting}
    sid = http.post("/v1/samplers", json={**body, "bounds": bounds}).json()["id"]
    before = http.get(f"/v1/samplers/{sid}").json()
    huge = np.full((3, 4, 2), 1e300)
    huge[1] *= -1.0
    r = http.post(f"/v1/samplers/{sid}/tell", json={"iteration": 0, "grad_log_prob": huge.tolist()})
    assert r.status_code == 422 and r.json()["code"] == "step_not_finite", r.text
    assert http.get(f"/v1/samplers/{sid}").json() == before


def test_a_retried_tell_with_its_key_replays_the_answer(http):
    sid = http.post("/v1/samplers", json={"dim": 1, "n_targets": 1, "seed": 0}).json()["id"]
    tell = {"iteration": 0, "grad_log_prob": np.ones((1, 50, 1)).tolist()}
    headers = {"Idempotency-Key": "step-0"}
    first = http.post(f"/v1/samplers/{sid}/tell", json=tell, headers=headers)
    again = http.post(f"/v1/samplers/{sid}/tell", json=tell, headers=headers)
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json()
    assert http.get(f"/v1/samplers/{sid}").json()["iteration"] == 1


TWO_D = {"dim": 2, "n_targets": 1}
OUTSIDE = {"kind": "points", "X": [[0, 0], [0, 2]]}


@pytest.mark.parametrize(
    "body, code",
    [
        ({**TWO_D, "n_particles": 3, "init": {"kind": "points", "X": [[0, 0]]}}, "invalid_sampler"),
        ({**TWO_D, "init": {"kind": "gaussian", "loc": [0, 0, 0]}}, "invalid_sampler"),
        ({**TWO_D, "bounds": [1.0, -1.0]}, "invalid_sampler"),
        ({**TWO_D, "n_particles": 2, "bounds": [0, 1], "init": OUTSIDE}, "invalid_sampler"),
        ({"dim": 10_000, "n_targets": 64, "n_particles": 4096}, "invalid_sampler"),
        ({"dim": 0, "n_targets": 1}, "validation_error"),
        ({**TWO_D, "kernel": "gauss"}, "validation_error"),
        ({**TWO_D, "eta": -1.0}, "validation_error"),
        ({**TWO_D, "init": {"kind": "gaussian", "scale": 1e308}}, "invalid_sampler"),
        ({"dim": 244, "n_targets": 1, "n_particles": 4096}, "invalid_sampler"),
    ],
)
def test_bad_samplers_are_refused(http, body, code):
    r = http.post("/v1/samplers", json=body)
    assert r.status_code == 422 and r.json()["code"] == code, r.text


def test_bounds_keep_the_particles_inside(client):
    sampler = client.create_sampler(dim=1, n_targets=1, n_particles=10, bounds=(0.0, 1.0), eta=0.5)
    assert all(0.0 <= x[0] <= 1.0 for x in sampler.info.X)

    def uphill(X):  # a target far to the right: every particle runs into the bound
        return [[[5.0] for _ in X]]

    info = sampler.run(uphill, iterations=5)
    assert max(x[0] for x in info.X) == 1.0 and min(x[0] for x in info.X) >= 0.0


def test_unknown_and_deleted_samplers_are_404(client, http):
    assert http.get("/v1/samplers/999").status_code == 404
    assert http.post("/v1/samplers/999/ask").json()["code"] == "not_found"
    sampler = client.create_sampler(dim=1, n_targets=1)
    sampler.delete()
    assert http.get(f"/v1/samplers/{sampler.id}").status_code == 404
    with pytest.raises(InvalidRequest):
        client.create_sampler(dim=1, n_targets=1, init={"kind": "points", "X": [[0.0]]})


def test_the_async_client_runs_a_sampler(sqlite_url):
    async def main() -> list[float]:
        app = create_app(Settings(database_url=sqlite_url))
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with AsyncClient("http://testserver", transport=transport, retries=0) as c:
                sampler = await c.create_sampler(dim=2, n_targets=2, n_particles=10, seed=1)

                async def scores(X):
                    return _scores(X)[0]

                info = await sampler.run(scores, iterations=5)
                again = await c.get_sampler(sampler.id)
                assert again.info.iteration == 5
                return info.grad_norm_history

    assert len(asyncio.run(main())) == 5
