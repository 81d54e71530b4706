"""The data of a tuning job: a dataset split 60/20/20 into training, validation and test sets
(seeded; stratified by class for classification), encoded by a ``Preprocessor`` fitted on the
training split only, and the score a model's outputs get (accuracy or R^2, higher is better).

A dataset is an uploaded CSV (``csv_split``; its rules in ``service.jobs.table``) or a
scikit-learn dataset bundled in its wheel (``builtin_split``; no download).

Encoding: a numeric column is standardized with its training mean and standard deviation (1
when constant), a missing value becoming the training mean (0 after standardizing); a
categorical column is one-hot over the categories seen in the training split, a missing value
or a category seen only in the validation or test split encoded as all zeros. A regression
target is standardized too (``y_mean``, ``y_std``); ``decode`` gives predictions back in its
original units.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.jobs.table import (
    BUILTIN_DATASETS,
    BUILTIN_TASKS,
    DatasetError,
    Frame,
    Kind,
    Task,
    builtin_frame,
    finite_float,
    frame_of,
    read_csv,
)

__all__ = [
    "BUILTIN_DATASETS",
    "BUILTIN_TASKS",
    "DatasetError",
    "FeatureColumn",
    "Preprocessor",
    "Split",
    "Task",
    "builtin_split",
    "csv_split",
    "parse_csv",
    "score",
    "split_frame",
    "split_indices",
]

#: The shares of the validation and test splits; the training split gets the rest.
VAL_SHARE = TEST_SHARE = 0.2
#: How many unknown categories an error message lists.
_SHOWN = 10


@dataclass(frozen=True)
class FeatureColumn:
    """A feature column's encoding: a numeric column's training mean and standard deviation,
    or a categorical column's training categories (one output each)."""

    name: str
    kind: Kind
    mean: float = 0.0
    std: float = 1.0
    categories: tuple[str, ...] = ()

    @property
    def width(self) -> int:
        return 1 if self.kind == "numeric" else len(self.categories)

    def read(self, value: Any, row: int) -> Any:
        """A raw value of a predict row: a number (NaN when missing) or a category (``None``
        when missing); raises ``ValueError`` naming the row and the column."""
        if value is None or (isinstance(value, str) and not value.strip()):
            return np.nan if self.kind == "numeric" else None
        if self.kind == "numeric":
            number = None
            if isinstance(value, str):
                number = finite_float(value.strip())
            elif isinstance(value, int | float) and not isinstance(value, bool):
                number = _finite(value)
            if number is None:
                raise ValueError(
                    f"row {row}, column {self.name!r}: {value!r} is not a finite number"
                )
            return number
        if not isinstance(value, str | int | float | bool):
            raise ValueError(f"row {row}, column {self.name!r}: {value!r} is not a category")
        text = value.strip() if isinstance(value, str) else str(value)
        if text not in self.categories:
            known = ", ".join(repr(c) for c in self.categories[:_SHOWN])
            more = ", ..." if len(self.categories) > _SHOWN else ""
            raise ValueError(
                f"row {row}, column {self.name!r}: {text!r} is not a category of the training "
                f"data ({known}{more}); leave it empty (null) if unknown"
            )
        return text

    def encode(self, values: np.ndarray) -> np.ndarray:
        """``(n, width)`` float32 features of this column's values."""
        if self.kind == "numeric":
            x = (np.asarray(values, dtype=np.float64) - self.mean) / self.std
            return np.nan_to_num(x, nan=0.0).astype(np.float32)[:, None]
        out = np.zeros((len(values), len(self.categories)), dtype=np.float32)
        index = {category: k for k, category in enumerate(self.categories)}
        for i, value in enumerate(values):
            k = index.get(value)
            if k is not None:
                out[i, k] = 1.0
        return out

    @classmethod
    def fit(cls, name: str, kind: Kind, values: np.ndarray) -> FeatureColumn:
        """The encoding of a column from its training values."""
        if kind == "numeric":
            present = values[~np.isnan(values)]
            mean = float(present.mean()) if len(present) else 0.0
            std = float(present.std()) if len(present) else 1.0
            return cls(name, kind, mean, std if std > 1e-12 else 1.0)
        return cls(name, kind, categories=tuple(sorted({v for v in values if v is not None})))


def _finite(value: float) -> float | None:
    try:
        number = float(value)
    except OverflowError:  # an integer past the float range
        return None
    return number if math.isfinite(number) else None


@dataclass(frozen=True)
class Preprocessor:
    """Features and targets encoded as fitted on a training split (see the module's text)."""

    task: Task
    target: str
    columns: tuple[FeatureColumn, ...]
    #: Classification: the class labels, a model's output ``k`` being ``classes[k]``.
    classes: tuple[str, ...] | None = None
    #: Regression: the training target's mean and standard deviation.
    y_mean: float = 0.0
    y_std: float = 1.0

    @property
    def n_features(self) -> int:
        return sum(column.width for column in self.columns)

    @property
    def n_outputs(self) -> int:
        return len(self.classes) if self.classes is not None else 1

    @property
    def feature_names(self) -> list[str]:
        """One name per encoded feature: ``column`` or ``column=category``."""
        names: list[str] = []
        for c in self.columns:
            names += [c.name] if c.kind == "numeric" else [f"{c.name}={v}" for v in c.categories]
        return names

    @classmethod
    def fit(cls, frame: Frame, rows: np.ndarray) -> Preprocessor:
        """Fitted on ``frame``'s rows ``rows`` (the training split) only."""
        columns = tuple(
            FeatureColumn.fit(name, frame.kinds[name], values[rows])
            for name, values in frame.columns.items()
        )
        if frame.task == "classification":
            return cls(frame.task, frame.target, columns, classes=frame.classes)
        y = frame.y[rows]
        std = float(y.std())
        return cls(
            frame.task, frame.target, columns, None, float(y.mean()), std if std > 1e-12 else 1.0
        )

    def encode(self, columns: dict[str, np.ndarray], n: int) -> np.ndarray:
        """``(n, n_features)`` float32 features of raw columns (as in a ``Frame``)."""
        parts = [column.encode(columns[column.name]) for column in self.columns]
        return np.concatenate(parts, axis=1) if parts else np.zeros((n, 0), np.float32)

    def encode_target(self, y: np.ndarray) -> np.ndarray:
        """Class indices as int64, or the regression target standardized as float32."""
        if self.task == "classification":
            return np.asarray(y, dtype=np.int64)
        return ((np.asarray(y, dtype=np.float64) - self.y_mean) / self.y_std).astype(np.float32)

    def transform_rows(self, rows: list[dict[str, Any]]) -> np.ndarray:
        """Feature rows by column name (raw values as in the CSV: numbers or text; null or an
        empty text for a missing value; the target column may be present and is ignored) ->
        float32 ``(n, n_features)``. Raises ``ValueError`` saying which row or column is
        wrong."""
        if not isinstance(rows, list):
            raise ValueError("rows must be a list of objects from column name to value")
        known = {column.name for column in self.columns} | {self.target}
        raw: dict[str, list[Any]] = {column.name: [] for column in self.columns}
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                raise ValueError(f"row {i} is not an object from column name to value")
            unknown = sorted(str(key) for key in row if key not in known)
            if unknown:
                raise ValueError(
                    f"row {i} has unknown column(s) {', '.join(map(repr, unknown))}; the "
                    f"feature columns are {', '.join(repr(c.name) for c in self.columns)}"
                )
            for column in self.columns:
                if column.name not in row:
                    raise ValueError(f"row {i} has no column {column.name!r}")
                raw[column.name].append(column.read(row[column.name], i))
        columns = {
            c.name: np.array(raw[c.name], dtype=np.float64 if c.kind == "numeric" else object)
            for c in self.columns
        }
        return self.encode(columns, len(rows))

    def decode(self, outputs: np.ndarray) -> list[Any]:
        """Model outputs ``(n, n_outputs)`` -> predictions: class labels (argmax) or
        regression values in the target's original units."""
        outputs = np.asarray(outputs, dtype=np.float64)
        if outputs.ndim != 2 or outputs.shape[1] != self.n_outputs:
            raise ValueError(f"expected outputs of shape (n, {self.n_outputs}): {outputs.shape}")
        if self.classes is not None:
            return [self.classes[k] for k in np.argmax(outputs, axis=1)]
        return [float(v) for v in outputs[:, 0] * self.y_std + self.y_mean]

    def to_json(self) -> dict[str, Any]:
        columns = []
        for c in self.columns:
            fields: dict[str, Any] = {"name": c.name, "kind": c.kind}
            if c.kind == "numeric":
                fields |= {"mean": c.mean, "std": c.std}
            else:
                fields["categories"] = list(c.categories)
            columns.append(fields)
        return {
            "task": self.task,
            "target": self.target,
            "columns": columns,
            "classes": None if self.classes is None else list(self.classes),
            "y_mean": self.y_mean,
            "y_std": self.y_std,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Preprocessor:
        """The preprocessor ``to_json`` gave; raises ``ValueError`` for another document."""
        try:
            columns = tuple(
                FeatureColumn(
                    str(c["name"]),
                    c["kind"],
                    float(c.get("mean", 0.0)),
                    float(c.get("std", 1.0)),
                    tuple(str(v) for v in c.get("categories", ())),
                )
                for c in data["columns"]
            )
            classes = data.get("classes")
            return cls(
                data["task"],
                str(data["target"]),
                columns,
                None if classes is None else tuple(str(v) for v in classes),
                float(data.get("y_mean", 0.0)),
                float(data.get("y_std", 1.0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a preprocessor document: {exc!r}") from exc


@dataclass(frozen=True)
class Split:
    """A dataset split and encoded: float32 features; ``y`` int64 class indices or the
    float32 standardized regression target."""

    task: Task
    X_train: np.ndarray
    y_train: np.ndarray
    X_val: np.ndarray
    y_val: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    n_features: int
    #: The number of classes, or 1 for regression.
    n_outputs: int
    preprocessor: Preprocessor

    def to_bytes(self) -> bytes:
        """The split as an ``.npz`` file: its six arrays, and the rest as JSON."""
        meta = {
            "task": self.task,
            "n_features": self.n_features,
            "n_outputs": self.n_outputs,
            "preprocessor": self.preprocessor.to_json(),
        }
        buffer = io.BytesIO()
        arrays = {name: getattr(self, name) for name in _SPLIT_ARRAYS}
        np.savez(buffer, meta=np.array(json.dumps(meta)), **arrays)
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, content: bytes) -> Split:
        """The split ``to_bytes`` wrote (no pickle is loaded)."""
        with np.load(io.BytesIO(content), allow_pickle=False) as npz:
            meta = json.loads(str(npz["meta"]))
            arrays = {name: npz[name] for name in _SPLIT_ARRAYS}
        preprocessor = Preprocessor.from_json(meta["preprocessor"])
        return cls(
            task=meta["task"],
            n_features=int(meta["n_features"]),
            n_outputs=int(meta["n_outputs"]),
            preprocessor=preprocessor,
            **arrays,
        )


_SPLIT_ARRAYS = ("X_train", "y_train", "X_val", "y_val", "X_test", "y_test")


def parse_csv(content: bytes, target: str, task: Task, max_rows: int | None = None) -> Frame:
    """An uploaded CSV read and checked; raises ``DatasetError`` (its ``code`` the problem)."""
    return frame_of(read_csv(content, max_rows), target, task)


def csv_split(content: bytes, target: str, task: Task, seed: int) -> Split:
    """An uploaded CSV split and encoded; raises ``DatasetError``."""
    return split_frame(parse_csv(content, target, task), seed)


def builtin_split(name: str, seed: int) -> Split:
    """A bundled scikit-learn dataset (``BUILTIN_DATASETS``) split and encoded; raises
    ``KeyError`` for another name."""
    return split_frame(builtin_frame(name), seed)


def split_frame(frame: Frame, seed: int) -> Split:
    train, val, test = split_indices(frame.y, frame.task, seed)
    pre = Preprocessor.fit(frame, train)

    def part(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        columns = {name: values[rows] for name, values in frame.columns.items()}
        return pre.encode(columns, len(rows)), pre.encode_target(frame.y[rows])

    (X_train, y_train), (X_val, y_val), (X_test, y_test) = part(train), part(val), part(test)
    return Split(
        frame.task,
        X_train,
        y_train,
        X_val,
        y_val,
        X_test,
        y_test,
        pre.n_features,
        pre.n_outputs,
        pre,
    )


def split_indices(y: np.ndarray, task: Task, seed: int) -> tuple[np.ndarray, ...]:
    """Row indices (sorted) of the training, validation and test splits: 60/20/20 of the
    rows, or of each class's rows for classification (a class of one or two rows stays in
    training); each split has a row when there are at least 3."""
    rng = np.random.default_rng(seed)
    groups = (
        [np.arange(len(y))]
        if task == "regression"
        else [np.flatnonzero(y == k) for k in np.unique(y)]
    )
    parts: list[list[np.ndarray]] = [[], [], []]
    for members in groups:
        members = rng.permutation(members)
        n_val, n_test = (int(np.floor(len(members) * s + 0.5)) for s in (VAL_SHARE, TEST_SHARE))
        parts[1].append(members[:n_val])
        parts[2].append(members[n_val : n_val + n_test])
        parts[0].append(members[n_val + n_test :])
    train, val, test = (np.concatenate(p) for p in parts)
    for k, taken in ((1, val), (2, test)):
        if len(taken) == 0 and len(train) > 1:  # too few rows per class: move one over
            moved = train[rng.integers(len(train))]
            train = train[train != moved]
            val, test = (np.array([moved]), test) if k == 1 else (val, np.array([moved]))
    return np.sort(train), np.sort(val), np.sort(test)


def score(task: Task, y_true: np.ndarray, outputs: np.ndarray) -> float:
    """Higher is better: accuracy of the argmax of ``outputs`` (classification), or R^2 of
    ``outputs[:, 0]`` (regression; the same whether both are standardized or not). NaN when
    the outputs are not finite."""
    outputs = np.asarray(outputs, dtype=np.float64)
    y_true = np.asarray(y_true)
    if outputs.ndim == 1:
        outputs = outputs[:, None]
    if not np.isfinite(outputs).all():
        return float("nan")
    if task == "classification":
        return float(np.mean(np.argmax(outputs, axis=1) == y_true))
    y = y_true.astype(np.float64)
    residual = float(np.sum((y - outputs[:, 0]) ** 2))
    total = float(np.sum((y - y.mean()) ** 2))
    if total == 0.0:
        return 1.0 if residual == 0.0 else 0.0
    return 1.0 - residual / total
