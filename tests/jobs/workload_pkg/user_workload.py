"""A user's workload, written only against the documented contract (``UnitInput`` fields,
``UnitOutput``): a linear model (softmax regression, or least squares on column 0) trained by
full-batch gradient descent in numpy. Its checkpoint is an ``.npz`` of the weights."""

from __future__ import annotations

import io
import multiprocessing
import time
from typing import Any

import numpy as np

from service.jobs.workloads import UnitInput, UnitOutput


def _outputs(W: np.ndarray, X: np.ndarray) -> np.ndarray:
    return np.hstack([X, np.ones((len(X), 1), np.float32)]) @ W


def _score(task: str, y: np.ndarray, out: np.ndarray) -> float:
    if task == "classification":
        return float(np.mean(out.argmax(axis=1) == y))
    return float(1 - np.sum((y - out[:, 0]) ** 2) / np.sum((y - y.mean()) ** 2))


def _gradient(W: np.ndarray, X: np.ndarray, y: np.ndarray, task: str) -> np.ndarray:
    Xb = np.hstack([X, np.ones((len(X), 1), np.float32)])
    out = Xb @ W
    if task == "classification":
        p = np.exp(out - out.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        p[np.arange(len(y)), y] -= 1
        return Xb.T @ p / len(y)
    residual = np.zeros_like(out)
    residual[:, 0] = out[:, 0] - y
    return Xb.T @ residual / len(y)


#: ``tune_l2``: the l2 penalty is a tuned parameter; ``score_in_child``: the validation score
#: is computed in a child process.
OPTIONS = {"tune_l2", "score_in_child"}


class LinearWorkload:
    name = "linear"

    def parameters(self, options: dict[str, Any]) -> list[dict[str, Any]]:
        if set(options) - OPTIONS:
            raise ValueError(f"unknown option(s) {sorted(set(options) - OPTIONS)}")
        if options.get("tune_l2"):
            return [{"type": "float", "name": "l2", "low": 1e-6, "high": 1e-1, "log": True}]
        return []

    def train(self, unit: UnitInput) -> UnitOutput:
        t0 = time.perf_counter()
        d = unit.data
        shape = (d.n_features + 1, d.n_outputs)
        W = np.random.default_rng(unit.seed).normal(0, 0.01, shape).astype(np.float32)
        if unit.start is not None:
            W = np.load(io.BytesIO(unit.start))["W"]
        if unit.transform.get("kind") == "shrink_perturb":
            fresh = np.random.default_rng(unit.transform["seed"]).normal(0, 0.01, shape)
            W = unit.transform["shrink"] * W + unit.transform["perturb"] * fresh.astype(np.float32)
        if unit.report is not None:
            unit.report(_score(d.task, d.y_val, _outputs(W, d.X_val)))
        lr, l2 = float(unit.hparams.get("lr", 0.1)), float(unit.hparams.get("l2", 0.0))
        for _ in range(unit.steps):
            W = W - lr * (_gradient(W, d.X_train, d.y_train, d.task) + l2 * W)
        buffer = io.BytesIO()
        np.savez(buffer, W=W.astype(np.float32))
        score_args = (d.task, d.y_val, _outputs(W, d.X_val))
        if unit.options.get("score_in_child"):
            # As a workload may start processes of its own (a torch DataLoader's workers).
            with multiprocessing.get_context("fork").Pool(1) as pool:
                score = pool.apply(_score, score_args)
        else:
            score = _score(*score_args)
        return UnitOutput(score, buffer.getvalue(), time.perf_counter() - t0)

    def predict(self, checkpoint: bytes, X: np.ndarray) -> np.ndarray:
        return _outputs(np.load(io.BytesIO(checkpoint))["W"], np.asarray(X, np.float32))


WORKLOAD = LinearWorkload()
NOT_A_WORKLOAD = 42


def train(unit: UnitInput) -> UnitOutput:
    """The same training as a plain function."""
    return WORKLOAD.train(unit)
