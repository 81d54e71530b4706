"""A dataset as columns: an uploaded CSV read and checked (``read_csv``, ``frame_of``), or a
scikit-learn dataset bundled in its wheel (``builtin_frame``). ``service.jobs.data`` splits
and encodes a ``Frame``.

The rules of an upload, each broken one a ``DatasetError`` with the problem code to answer:
UTF-8 text (a byte-order mark is skipped), a header row of distinct non-empty names, then data
rows of as many cells as the header (blank lines are skipped); the target a column of the
header; every row has a target value; a regression target is a number in every row; a
classification target has at least two classes. A feature column is numeric when every
non-empty cell reads as a finite number (Python's ``float``: ``3``, ``-1.5e3``), otherwise
categorical (its distinct texts, one-hot encoded). An empty cell (spaces only included) is a
missing value: the training mean of a numeric column, no category (all zeros) for a
categorical one.
"""

from __future__ import annotations

import csv
import functools
import io
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from client.models import ProblemCode

Task = Literal["classification", "regression"]
Kind = Literal["numeric", "categorical"]
BUILTIN_DATASETS = ("iris", "wine", "breast_cancer", "digits", "diabetes")
#: The task of each bundled dataset.
BUILTIN_TASKS: dict[str, Task] = {
    "iris": "classification",
    "wine": "classification",
    "breast_cancer": "classification",
    "digits": "classification",
    "diabetes": "regression",
}
#: The target column's name of a bundled dataset.
BUILTIN_TARGET = "target"
#: Fewer data rows cannot be split into non-empty training, validation and test sets.
MIN_ROWS = 5
#: The most encoded features (numeric columns plus categories) and encoded cells (rows times
#: features) of a dataset: more would not fit in a worker's memory.
MAX_FEATURES = 4096
MAX_CELLS = 50_000_000


class DatasetError(ValueError):
    """A dataset that cannot be used as given; ``code`` says what to fix."""

    def __init__(self, code: ProblemCode, detail: str) -> None:
        super().__init__(detail)
        self.code, self.detail = code, detail


@dataclass(frozen=True)
class Table:
    """A CSV's header and data rows (text cells, stripped), with each row's line number."""

    header: list[str]
    rows: list[list[str]]
    lines: list[int]


@dataclass(frozen=True)
class Frame:
    """Feature columns by name, in order: numeric ones as float64 with NaN for a missing
    cell, categorical ones as object arrays of text (``None`` when missing); the target as
    class indices (int64, into ``classes``) or numbers (float64)."""

    task: Task
    target: str
    columns: dict[str, np.ndarray]
    kinds: dict[str, Kind]
    y: np.ndarray
    classes: tuple[str, ...] | None

    @property
    def n_rows(self) -> int:
        return len(self.y)

    def describe(self) -> list[dict[str, Any]]:
        """The feature columns as stored with a dataset: name, kind, missing cells and, for a
        categorical column, its number of distinct values."""
        out: list[dict[str, Any]] = []
        for name, values in self.columns.items():
            if self.kinds[name] == "numeric":
                missing = int(np.isnan(values).sum())
                out.append({"name": name, "kind": "numeric", "missing": missing})
            else:
                present = {v for v in values if v is not None}
                missing = int(sum(v is None for v in values))
                column = {"name": name, "kind": "categorical", "missing": missing}
                out.append(column | {"categories": len(present)})
        return out


def read_csv(content: bytes, max_rows: int | None = None) -> Table:
    """The header and data rows of a CSV; raises ``DatasetError``."""
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DatasetError(
            ProblemCode.DATASET_UNREADABLE,
            f"the file is not UTF-8 text (byte {exc.start} is not UTF-8); save it as UTF-8 CSV",
        ) from exc
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    rows: list[list[str]] = []
    lines: list[int] = []
    try:
        for raw in reader:
            if not raw or (len(raw) == 1 and not raw[0].strip()):
                continue  # a blank line
            cells = [cell.strip() for cell in raw]
            if header is None:
                header = _header(cells, reader.line_num)
                continue
            if len(cells) != len(header):
                raise DatasetError(
                    ProblemCode.DATASET_RAGGED,
                    f"line {reader.line_num} has {len(cells)} cells but the header has "
                    f"{len(header)}; every row needs one cell per column",
                )
            if max_rows is not None and len(rows) >= max_rows:
                raise DatasetError(
                    ProblemCode.DATASET_TOO_LARGE,
                    f"the file has more than {max_rows} data rows, the server's limit",
                )
            rows.append(cells)
            lines.append(reader.line_num)
    except csv.Error as exc:
        raise DatasetError(
            ProblemCode.DATASET_UNREADABLE, f"line {reader.line_num} is not valid CSV: {exc}"
        ) from exc
    if header is None:
        raise DatasetError(ProblemCode.DATASET_EMPTY, "the file is empty: no header row")
    if not rows:
        raise DatasetError(ProblemCode.DATASET_EMPTY, "the file has a header but no data rows")
    return Table(header, rows, lines)


def _header(cells: list[str], line: int) -> list[str]:
    seen: set[str] = set()
    for i, name in enumerate(cells):
        if not name:
            raise DatasetError(
                ProblemCode.DATASET_UNREADABLE,
                f"column {i + 1} of the header (line {line}) has no name",
            )
        if name in seen:
            raise DatasetError(
                ProblemCode.DATASET_UNREADABLE, f"the header names column {name!r} twice"
            )
        seen.add(name)
    return cells


def frame_of(table: Table, target: str, task: Task) -> Frame:
    """The table's columns typed and its target checked; raises ``DatasetError``."""
    if target not in table.header:
        listed = ", ".join(repr(name) for name in table.header[:20])
        raise DatasetError(
            ProblemCode.DATASET_NO_TARGET,
            f"no column is named {target!r}; the columns are {listed}",
        )
    at = table.header.index(target)
    cells = [row[at] for row in table.rows]
    for value, line in zip(cells, table.lines, strict=True):
        if not value:
            raise DatasetError(
                ProblemCode.DATASET_NO_TARGET,
                f"line {line} has no value in the target column {target!r}; every row needs one",
            )
    y, classes = _target(cells, table.lines, target, task)
    columns: dict[str, np.ndarray] = {}
    kinds: dict[str, Kind] = {}
    for i, name in enumerate(table.header):
        if i != at:
            kinds[name], columns[name] = typed_column([row[i] for row in table.rows])
    return checked(Frame(task, target, columns, kinds, y, classes))


def _target(
    cells: list[str], lines: list[int], target: str, task: Task
) -> tuple[np.ndarray, tuple[str, ...] | None]:
    if task == "regression":
        values = np.empty(len(cells))
        for i, (value, line) in enumerate(zip(cells, lines, strict=True)):
            number = finite_float(value)
            if number is None:
                raise DatasetError(
                    ProblemCode.DATASET_TARGET_NOT_NUMERIC,
                    f"line {line}: the regression target {target!r} is {value!r}, not a "
                    "finite number",
                )
            values[i] = number
        return values, None
    classes = tuple(sorted(set(cells), key=_label_order))
    index = {label: k for k, label in enumerate(classes)}
    return np.array([index[c] for c in cells], dtype=np.int64), classes


def _label_order(label: str) -> tuple[int, float, str]:
    """Numeric labels by value first (``2`` before ``10``), then the others as text."""
    number = finite_float(label)
    return (0, number, label) if number is not None else (1, 0.0, label)


def finite_float(text: str) -> float | None:
    """``text`` as a finite number, or ``None``."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def typed_column(cells: list[str]) -> tuple[Kind, np.ndarray]:
    """A column as numbers (NaN for an empty cell) if every non-empty cell is a finite
    number, else as text (``None`` for an empty cell)."""
    numbers = np.full(len(cells), np.nan)
    for i, cell in enumerate(cells):
        if not cell:
            continue
        number = finite_float(cell)
        if number is None:
            values = np.array([c if c else None for c in cells], dtype=object)
            return "categorical", values
        numbers[i] = number
    return "numeric", numbers


def checked(frame: Frame) -> Frame:
    """Raises ``DatasetError`` for a frame that cannot be split and trained on."""
    if frame.n_rows < MIN_ROWS:
        raise DatasetError(
            ProblemCode.DATASET_EMPTY,
            f"the file has {frame.n_rows} data rows; at least {MIN_ROWS} are needed for the "
            "training, validation and test splits",
        )
    if not frame.columns:
        raise DatasetError(
            ProblemCode.DATASET_EMPTY, f"the file has no feature column besides {frame.target!r}"
        )
    if frame.classes is not None and len(frame.classes) < 2:
        raise DatasetError(
            ProblemCode.DATASET_SINGLE_CLASS,
            f"the target {frame.target!r} has one class ({frame.classes[0]!r}); "
            "classification needs at least two",
        )
    width = sum(
        1 if frame.kinds[name] == "numeric" else len({v for v in values if v is not None})
        for name, values in frame.columns.items()
    )
    if width > MAX_FEATURES or width * frame.n_rows > MAX_CELLS:
        raise DatasetError(
            ProblemCode.DATASET_TOO_LARGE,
            f"one-hot encoded, the dataset has {width} features and {frame.n_rows} rows; at "
            f"most {MAX_FEATURES} features and {MAX_CELLS} cells are allowed (drop "
            "identifier-like columns with many distinct values)",
        )
    return frame


@functools.cache
def builtin_frame(name: str) -> Frame:
    """A scikit-learn dataset bundled in its wheel (no download): every feature numeric; the
    target ``target``, its classes the dataset's class names. Raises ``KeyError``."""
    if name not in BUILTIN_TASKS:
        raise KeyError(name)
    from sklearn import datasets

    bunch = getattr(datasets, f"load_{name}")()
    names = [str(n) for n in bunch.feature_names]
    columns = {n: np.asarray(bunch.data[:, i], dtype=np.float64) for i, n in enumerate(names)}
    kinds: dict[str, Kind] = {n: "numeric" for n in names}
    task = BUILTIN_TASKS[name]
    if task == "regression":
        y, classes = np.asarray(bunch.target, dtype=np.float64), None
    else:
        y = np.asarray(bunch.target, dtype=np.int64)
        classes = tuple(str(label) for label in bunch.target_names)
    return Frame(task, BUILTIN_TARGET, columns, kinds, y, classes)
