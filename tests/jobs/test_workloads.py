"""The workloads: the built-in ``mlp`` (training, checkpoints, transforms, every registry
optimizer, regression, options) and user workloads found as ``asktell.workloads`` entry points."""

from __future__ import annotations

import importlib.metadata
import io
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from engines.optim import registry
from service.jobs import mlp
from service.jobs.workloads import (
    UnitInput,
    UnknownWorkload,
    Workload,
    load_workload,
    workload_names,
)
from tests.jobs import splits, workload_pkg

torch.set_num_threads(1)

DIGITS = splits.digits(seed=0)
SMALL = splits.digits(seed=0, n=200)
NONE = {"kind": "none"}


def unit(data=SMALL, **fields) -> UnitInput:
    base = {
        "data": data,
        "hparams": {"lr": 1e-3},
        "optimizer": "adamw",
        "options": {"hidden": [16]},
        "start": None,
        "transform": NONE,
        "steps": 5,
        "seed": 0,
        "report": None,
    }
    return UnitInput(**{**base, **fields})


def checkpoint(data: bytes) -> dict:
    return torch.load(io.BytesIO(data), weights_only=True)


def test_mlp_learns_digits():
    workload = load_workload("mlp")
    assert isinstance(workload, Workload) and workload.name == "mlp"
    reported = []
    out = workload.train(
        unit(DIGITS, hparams={"lr": 3e-3}, options={}, steps=300, report=reported.append)
    )
    assert len(reported) == 1 and reported[0] < 0.3  # fresh weights: near chance
    assert out.score > 0.9
    assert out.train_seconds > 0
    outputs = workload.predict(out.checkpoint, DIGITS.X_val)
    assert outputs.shape == (len(DIGITS.X_val), 10)
    assert mlp.score("classification", DIGITS.y_val, outputs) == out.score


def test_same_unit_same_result():
    a, b = mlp.MLPWorkload().train(unit(seed=3)), mlp.MLPWorkload().train(unit(seed=3))
    c = mlp.MLPWorkload().train(unit(seed=4))
    assert a.checkpoint == b.checkpoint
    w = lambda out: checkpoint(out.checkpoint)["model"]["0.weight"]  # noqa: E731
    assert not torch.equal(w(a), w(c))


def test_checkpoint_round_trip_and_continuation():
    workload = mlp.MLPWorkload()
    first = workload.train(unit(steps=20, seed=1))
    # Zero steps from a checkpoint: the same model and optimizer state, the same score.
    again = workload.train(unit(start=first.checkpoint, steps=0, seed=9))
    before, after = checkpoint(first.checkpoint), checkpoint(again.checkpoint)
    for name, tensor in before["model"].items():
        assert torch.equal(tensor, after["model"][name]), name
    assert again.score == first.score
    np.testing.assert_array_equal(
        workload.predict(first.checkpoint, SMALL.X_val),
        workload.predict(again.checkpoint, SMALL.X_val),
    )
    # The next steps from the checkpoint are the same whether or not it went through a
    # round trip, and the optimizer state was restored (AdamW counts its steps).
    x = workload.train(unit(start=first.checkpoint, steps=7, seed=2))
    y = workload.train(unit(start=again.checkpoint, steps=7, seed=2))
    assert x.checkpoint == y.checkpoint
    state = checkpoint(x.checkpoint)
    assert state["steps"] == 27
    assert all(int(s["step"]) == 27 for s in state["optimizer_state"]["state"].values())


def test_an_other_optimizer_starts_afresh():
    first = mlp.MLPWorkload().train(unit(steps=10))
    out = mlp.MLPWorkload().train(
        unit(start=first.checkpoint, optimizer="sgd", hparams={"lr": 0.01}, steps=3)
    )
    state = checkpoint(out.checkpoint)
    assert state["optimizer"] == "sgd" and state["steps"] == 13
    assert state["optimizer_state"]["param_groups"][0]["lr"] == 0.01


def test_shrink_perturb_zero_one_is_a_fresh_model():
    workload = mlp.MLPWorkload()
    trained = workload.train(unit(steps=30, seed=1))
    transform = {"kind": "shrink_perturb", "shrink": 0.0, "perturb": 1.0, "seed": 77}
    out = workload.train(unit(start=trained.checkpoint, transform=transform, steps=0, seed=5))
    fresh = mlp.build_model({"n_features": 64, "n_outputs": 10, "hidden": [16], "dropout": 0.0}, 77)
    model = checkpoint(out.checkpoint)["model"]
    for name, tensor in fresh.state_dict().items():
        assert torch.equal(model[name], tensor), name
    # The optimizer state is dropped: AdamW starts counting again.
    later = workload.train(unit(start=trained.checkpoint, transform=transform, steps=2))
    steps = [
        int(s["step"]) for s in checkpoint(later.checkpoint)["optimizer_state"]["state"].values()
    ]
    assert steps and set(steps) == {2}


def test_shrink_perturb_mixes():
    workload = mlp.MLPWorkload()
    trained = workload.train(unit(steps=10, seed=1))
    transform = {"kind": "shrink_perturb", "shrink": 0.5, "perturb": 0.25, "seed": 3}
    out = workload.train(unit(start=trained.checkpoint, transform=transform, steps=0))
    arch = {"n_features": 64, "n_outputs": 10, "hidden": [16], "dropout": 0.0}
    expected = 0.5 * checkpoint(trained.checkpoint)["model"]["0.weight"]
    expected += 0.25 * mlp.build_model(arch, 3).state_dict()["0.weight"]
    torch.testing.assert_close(checkpoint(out.checkpoint)["model"]["0.weight"], expected)


def test_hparams_are_set_after_the_restore():
    workload = mlp.MLPWorkload()
    first = workload.train(unit(hparams={"lr": 1e-3, "weight_decay": 0.05}, steps=5))
    out = workload.train(unit(start=first.checkpoint, hparams={"lr": 4e-3}, steps=1))
    groups = checkpoint(out.checkpoint)["optimizer_state"]["param_groups"]
    assert [g["lr"] for g in groups] == [4e-3]
    assert [g["weight_decay"] for g in groups] == [0.05]  # not in the unit: kept from the start


def test_predict_from_the_bytes_alone():
    out = mlp.MLPWorkload().train(unit(options={"hidden": [8, 8], "dropout": 0.2}, steps=10))
    outputs = load_workload("mlp").predict(out.checkpoint, SMALL.X_test)
    assert outputs.shape == (len(SMALL.X_test), 10) and outputs.dtype == np.float32
    # Evaluation mode: dropout off, so the outputs repeat.
    np.testing.assert_array_equal(outputs, mlp.MLPWorkload().predict(out.checkpoint, SMALL.X_test))
    with pytest.raises(ValueError, match="not an mlp checkpoint"):
        mlp.MLPWorkload().predict(b"garbage", SMALL.X_test)


@pytest.mark.parametrize("name", registry.optimizer_names())
def test_every_registry_optimizer_trains(name):
    tiny = splits.digits(seed=1, n=60)
    workload = mlp.MLPWorkload()
    first = workload.train(unit(tiny, optimizer=name, hparams={}, options={"hidden": [8]}, steps=3))
    assert math.isfinite(first.score)
    hparams = {p["name"]: p["low"] for p in registry.search_space(name)}
    out = workload.train(
        unit(
            tiny,
            optimizer=name,
            hparams=hparams,
            start=first.checkpoint,
            options={"hidden": [8]},
            steps=3,
        )
    )
    state = checkpoint(out.checkpoint)
    assert state["optimizer"] == name and state["steps"] == 6
    assert math.isfinite(out.score)
    assert workload.predict(out.checkpoint, tiny.X_val).shape == (len(tiny.X_val), 10)


def test_regression():
    data = splits.diabetes()
    out = mlp.MLPWorkload().train(
        unit(data, options={"hidden": [32]}, hparams={"lr": 1e-2}, steps=300)
    )
    assert 0.3 < out.score <= 1.0
    outputs = mlp.MLPWorkload().predict(out.checkpoint, data.X_val)
    assert outputs.shape == (len(data.X_val), 1)


def test_divergence_scores_as_the_worst_finite_value():
    data = splits.diabetes()
    out = mlp.MLPWorkload().train(
        unit(data, optimizer="sgd", hparams={"lr": 1e3, "momentum": 0.99}, steps=50)
    )
    assert out.score == mlp.WORST_R2
    assert checkpoint(out.checkpoint)["steps"] < 50  # stopped at the non-finite loss
    out = mlp.MLPWorkload().train(unit(optimizer="sgd", hparams={"lr": 1e6}, steps=50))
    assert 0.0 <= out.score <= 1.0 and math.isfinite(out.score)


def test_score_floors():
    y = np.array([0.0, 1.0, 2.0])
    assert mlp.score("regression", y, np.array([[np.nan], [0.0], [0.0]])) == mlp.WORST_R2
    assert mlp.score("regression", y, np.array([[1e30], [0.0], [0.0]])) == mlp.WORST_R2
    assert mlp.score("regression", y, y[:, None]) == 1.0
    assert mlp.score("classification", np.array([0, 1]), np.array([[np.inf, 0], [0, 1]])) == 0.0
    assert mlp.score("classification", np.array([0, 1]), np.array([[1.0, 0], [0, 1]])) == 1.0


def test_tuned_options():
    workload = mlp.MLPWorkload()
    assert workload.parameters({}) == []
    assert workload.parameters({"hidden": [4], "dropout": 0.1, "batch_size": 8}) == []
    params = workload.parameters(
        {"batch_size": {"low": 16, "high": 256, "log": True}, "dropout": {"low": 0, "high": 0.5}}
    )
    assert params == [
        {"type": "float", "name": "dropout", "low": 0, "high": 0.5, "log": False},
        {"type": "int", "name": "batch_size", "low": 16, "high": 256, "log": True},
    ]
    options = {"batch_size": {"low": 16, "high": 256, "log": True}, "hidden": [8]}
    out = workload.train(unit(options=options, hparams={"lr": 1e-3, "batch_size": 32}))
    assert math.isfinite(out.score)
    with pytest.raises(ValueError, match="batch_size is tuned"):
        workload.train(unit(options=options, hparams={"lr": 1e-3}))
    with pytest.raises(ValueError, match="neither the optimizer's nor the mlp's"):
        workload.train(unit(hparams={"momentum": 0.9}))


@pytest.mark.parametrize(
    "options",
    [
        {"width": 3},
        {"hidden": 128},
        {"hidden": [0]},
        {"hidden": [True]},
        {"dropout": 1.0},
        {"dropout": -0.1},
        {"batch_size": 0},
        {"batch_size": 3.5},
        {"batch_size": {"low": 16}},
        {"batch_size": {"low": 0, "high": 8, "log": True}},
        {"dropout": {"low": 0.5, "high": 0.1}},
        {"dropout": {"low": 0.0, "high": 0.5, "step": 0.1}},
    ],
)
def test_bad_options(options):
    with pytest.raises(ValueError):
        mlp.MLPWorkload().parameters(options)


def test_a_start_of_another_architecture_is_refused():
    first = mlp.MLPWorkload().train(unit(options={"hidden": [8]}, steps=1))
    with pytest.raises(ValueError, match="architecture"):
        mlp.MLPWorkload().train(unit(start=first.checkpoint, options={"hidden": [16]}))


def test_unknown_workload():
    with pytest.raises(UnknownWorkload) as info:
        load_workload("no-such-workload")
    assert info.value.name == "no-such-workload"
    assert isinstance(info.value, LookupError)
    assert "mlp" in workload_names()


# --- user workloads as entry points -----------------------------------------------------------


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """The test package's entry points on sys.path."""
    workload_pkg.install(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield tmp_path


def test_entry_points_are_found(installed):
    assert workload_names() == ["mlp", "broken", "linear", "linear-class", "train-only"]
    workload = load_workload("linear")
    assert workload.name == "linear"
    assert workload.parameters({}) == []
    assert workload.parameters({"tune_l2": True})[0]["name"] == "l2"
    with pytest.raises(ValueError):
        workload.parameters({"nope": 1})
    out = workload.train(unit(hparams={"lr": 0.5}, steps=50))
    assert out.score > 0.5
    assert workload.predict(out.checkpoint, SMALL.X_val).shape == (len(SMALL.X_val), 10)
    # The class form is instantiated.
    again = load_workload("linear-class").train(unit(hparams={"lr": 0.5}, steps=50))
    assert again.score == out.score


def test_a_function_entry_point(installed):
    workload = load_workload("train-only")
    assert workload.name == "train-only" and workload.parameters({"anything": 1}) == []
    assert not workload.predicts and load_workload("linear").predicts
    out = workload.train(unit(hparams={"lr": 0.5}, steps=10))
    assert 0 <= out.score <= 1
    with pytest.raises(NotImplementedError):
        workload.predict(out.checkpoint, SMALL.X_val)


def test_a_broken_entry_point(installed):
    with pytest.raises(TypeError, match="neither a workload"):
        load_workload("broken")


def test_entry_points_are_not_found_without_the_package():
    assert workload_names() == ["mlp"]
    with pytest.raises(UnknownWorkload):
        load_workload("linear")


def test_replace_keeps_unit_frozen():
    u = unit()
    with pytest.raises(AttributeError):
        u.steps = 3  # type: ignore[misc]
    assert replace(u, steps=3).steps == 3
