"""A PBT / IPBT worker: trains a small MLP on scikit-learn's digits with torch, one unit at a
time, through the asktell client; checkpoints are files in a folder.

Start a server, then as many workers as you like (each trains the units it is given; they share
the checkpoint folder)::

    asktell serve                                    # or the README's server command
    python examples/pbt_digits_worker.py --engine ipbt --checkpoints /tmp/digits-ckpt

A unit (``trial.unit``) says where to start: fresh weights, or the checkpoint file that one exact
trial saved (never "the member's latest"), possibly shrunk and perturbed; the worker restores
the model and the optimizer state, then sets the trial's hyperparameters (``lr``, ``momentum``,
``weight_decay``, ``batch_size``), reports the validation accuracy before training when the unit
asks (``eval_before``), trains exactly ``to_step - from_step`` SGD steps, saves a new file
``trial-<number>.pt`` and tells the validation accuracy with the file's name. Every
``--gc-every`` units it deletes the files the study lists as releasable. At the end it prints
the best member's hyperparameter schedule and the test accuracy of its checkpoint.

``DigitsTrainer`` is also what ``bench/pbt.py`` trains with.
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from client import Client
from client.models import TrialPublic

#: The hyperparameters a unit sets, as the study's search space.
SEARCH_SPACE: list[dict[str, Any]] = [
    {"type": "float", "name": "lr", "low": 1e-4, "high": 1.0, "log": True},
    {"type": "float", "name": "momentum", "low": 0.0, "high": 0.99},
    {"type": "float", "name": "weight_decay", "low": 1e-8, "high": 1e-2, "log": True},
    {"type": "int", "name": "batch_size", "low": 16, "high": 128, "log": True},
]
OBJECTIVE = {"name": "accuracy", "goal": "maximize"}
HIDDEN = 128

Report = Callable[[int, int, dict[str, float]], object]


@dataclass(frozen=True)
class Digits:
    """The digits split 60 / 20 / 20 (stratified, fixed seed), features scaled by the training
    mean and standard deviation."""

    X_train: torch.Tensor
    y_train: torch.Tensor
    X_val: torch.Tensor
    y_val: torch.Tensor
    X_test: torch.Tensor
    y_test: torch.Tensor

    @classmethod
    def load(cls, seed: int = 0) -> Digits:
        X, y = load_digits(return_X_y=True)
        return cls.from_arrays(X, y, seed)

    @classmethod
    def from_arrays(cls, X: np.ndarray, y: np.ndarray, seed: int = 0) -> Digits:
        """Any 64-feature, 10-class data split the same way (``bench/pbt.py``'s other task)."""
        X_train, X_rest, y_train, y_rest = train_test_split(
            X, y, test_size=0.4, stratify=y, random_state=seed
        )
        X_val, X_test, y_val, y_test = train_test_split(
            X_rest, y_rest, test_size=0.5, stratify=y_rest, random_state=seed
        )
        mean, std = X_train.mean(axis=0), X_train.std(axis=0) + 1e-6

        def features(a: np.ndarray) -> torch.Tensor:
            return torch.as_tensor((a - mean) / std, dtype=torch.float32)

        def labels(a: np.ndarray) -> torch.Tensor:
            return torch.as_tensor(a, dtype=torch.long)

        return cls(
            features(X_train),
            labels(y_train),
            features(X_val),
            labels(y_val),
            features(X_test),
            labels(y_test),
        )


def fresh_model(seed: int) -> nn.Sequential:
    """The MLP 64-128-10 with ReLU, initialized from ``seed``."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(64, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 10))


def accuracy(model: nn.Module, X: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((model(X).argmax(dim=1) == y).float().mean())


class DigitsTrainer:
    """Trains one unit: ``trainer(trial, report) -> (validation accuracy, checkpoint name)``."""

    def __init__(self, folder: Path, data: Digits) -> None:
        self.folder = folder
        self.data = data
        folder.mkdir(parents=True, exist_ok=True)

    def __call__(self, trial: TrialPublic, report: Report | None = None) -> tuple[float, str]:
        unit = trial.unit
        if unit is None:
            raise ValueError(f"trial {trial.number} is not a training unit (engine pbt or ipbt)")
        params = trial.params
        model = fresh_model(unit.seed)
        optimizer_state = None
        if unit.start.kind == "checkpoint":
            assert unit.start.checkpoint is not None
            saved = torch.load(self.folder / unit.start.checkpoint, weights_only=True)
            model.load_state_dict(saved["model"])
            optimizer_state = saved["optimizer"]
        if unit.transform.kind == "shrink_perturb":
            assert unit.transform.seed is not None
            fresh = fresh_model(unit.transform.seed)
            with torch.no_grad():
                for p, q in zip(model.parameters(), fresh.parameters(), strict=True):
                    p.mul_(unit.transform.shrink).add_(q, alpha=unit.transform.perturb)
            optimizer_state = None  # new weights: the momentum of the old ones does not apply
        optimizer = torch.optim.SGD(model.parameters(), lr=float(params["lr"]))
        if optimizer_state is not None:
            optimizer.load_state_dict(optimizer_state)
        for group in optimizer.param_groups:  # the unit's hyperparameters, after the restore
            group.update(
                lr=float(params["lr"]),
                momentum=float(params["momentum"]),
                weight_decay=float(params["weight_decay"]),
            )
        if unit.eval_before and report is not None:
            before = accuracy(model, self.data.X_val, self.data.y_val)
            report(trial.number, unit.from_step, {OBJECTIVE["name"]: before})
        generator = torch.Generator().manual_seed(unit.seed)
        n, batch = len(self.data.y_train), int(params["batch_size"])
        loss_fn = nn.CrossEntropyLoss()
        for _ in range(unit.to_step - unit.from_step):
            rows = torch.randint(0, n, (batch,), generator=generator)
            optimizer.zero_grad()
            loss = loss_fn(model(self.data.X_train[rows]), self.data.y_train[rows])
            if not torch.isfinite(loss):
                break  # diverged: the accuracy below says so
            loss.backward()
            optimizer.step()
        name = f"trial-{trial.number}.pt"
        torch.save(
            {"model": copy.deepcopy(model.state_dict()), "optimizer": optimizer.state_dict()},
            self.folder / name,
        )
        return accuracy(model, self.data.X_val, self.data.y_val), name

    def test_accuracy(self, checkpoint: str) -> float:
        model = fresh_model(0)
        model.load_state_dict(torch.load(self.folder / checkpoint, weights_only=True)["model"])
        return accuracy(model, self.data.X_test, self.data.y_test)

    def delete(self, checkpoints: list[str]) -> int:
        deleted = 0
        for name in checkpoints:
            path = self.folder / name
            if path.exists():
                path.unlink()
                deleted += 1
        return deleted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--study", default="digits-mlp", help="study name (shared by workers)")
    parser.add_argument("--engine", choices=["pbt", "ipbt"], default="ipbt")
    parser.add_argument("--t-max", type=int, default=2000, help="SGD steps per member")
    parser.add_argument("--population", type=int, default=8)
    parser.add_argument("--interval", type=int, help="pbt: steps per unit (default 5 %% of t-max)")
    parser.add_argument("--checkpoints", type=Path, default=Path("digits-checkpoints"))
    parser.add_argument("--gc-every", type=int, default=20, help="units between deletions")
    parser.add_argument("--worker-id", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    options: dict[str, Any] = {"t_max": args.t_max, "population_size": args.population}
    if args.engine == "pbt" and args.interval:
        options["interval"] = args.interval
    trainer = DigitsTrainer(args.checkpoints, Digits.load())
    with Client(args.url) as client:
        study = client.create_study(
            args.study,
            SEARCH_SPACE,
            objectives=[OBJECTIVE],
            engine={"name": args.engine, "options": options},
        )
        trained = 0
        while True:  # train, and now and then delete the checkpoints no unit will load
            n = study.train(
                lambda trial: trainer(trial, study.report),
                worker_id=args.worker_id,
                max_units=args.gc_every,
            )
            trained += n
            deleted = trainer.delete([c.checkpoint for c in study.checkpoints().releasable])
            print(f"{trained} units trained, {deleted} checkpoints deleted", flush=True)
            if n < args.gc_every:
                break
        schedule = study.best_schedule()
        print("best member's schedule (steps: hyperparameters -> validation accuracy):")
        for s in schedule.segments:
            accuracy_ = (s.values or {}).get(OBJECTIVE["name"], float("nan"))
            print(f"  {s.from_step:>5}-{s.to_step:<5} {s.reason:<8} {s.params} -> {accuracy_:.4f}")
        best = schedule.segments[-1]
        if best.checkpoint and (args.checkpoints / best.checkpoint).exists():
            print(
                f"test accuracy of trial {best.trial}: {trainer.test_accuracy(best.checkpoint):.4f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
