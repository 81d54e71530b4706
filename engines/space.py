"""The search space and its single encoding to the unit cube.

Every engine works on points ``x`` in ``[0, 1]^d``, one coordinate per non-fixed parameter, in
the order the study declared them. The encoding of each kind:

- float, linear: ``u = (v - low) / (high - low)``.
- float, log: ``u = (ln v - ln low) / (ln high - ln low)``.
- float with ``step`` and int, linear: ``K`` levels, level ``k`` occupies the cell
  ``[k / K, (k + 1) / K)``; it encodes to the cell centre and ``u`` decodes to ``floor(u K)``.
  Uniform ``u`` therefore gives every level the same probability.
- int, log: the log of ``[low - 0.5, high + 0.5]`` mapped to ``[0, 1]``, rounded on decode, so
  each integer owns the cell of its rounding interval.
- categorical: ``K`` choices, choice ``i`` at the centre of cell ``i``, as for linear ints.
  Engines that model categoricals (``gp``) read ``Dimension.kind`` and ``levels`` and never treat
  the index as an ordered number.
- fixed: no coordinate; the value is added on decode.

``snap`` maps any point to the representative of the value it decodes to, so engines compare
points by the parameters they stand for (two points are equal iff they decode to equal values).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

import numpy as np

from engines.errors import SpaceError

MAX_PARAMETERS = 1000

CategoryValue = str | int | float | bool
ParamValue = CategoryValue
Number = TypeVar("Number", int, float)


@dataclass(frozen=True)
class _Bounded(Generic[Number]):
    """The fields a numeric parameter starts with: its bounds, and whether it is searched on a
    log scale."""

    name: str
    low: Number
    high: Number
    log: bool = False


@dataclass(frozen=True)
class FloatParam(_Bounded[float]):
    """A real parameter in ``[low, high]``; with ``step``, on the grid ``low + k step``."""

    step: float | None = None


@dataclass(frozen=True)
class IntParam(_Bounded[int]):
    """An integer parameter in ``[low, high]``."""


@dataclass(frozen=True)
class CategoricalParam:
    name: str
    choices: tuple[CategoryValue, ...]


@dataclass(frozen=True)
class FixedParam:
    name: str
    value: CategoryValue


Param = FloatParam | IntParam | CategoricalParam | FixedParam
DimensionKind = Literal["continuous", "integer", "categorical"]


@dataclass(frozen=True)
class Dimension:
    """One coordinate of the unit cube: what an engine may know about it.

    ``levels`` is the number of distinct values for discrete kinds (``integer`` with a linear
    scale, stepped floats and ``categorical``), ``None`` for continuous ones and log-scaled ints.
    """

    name: str
    kind: DimensionKind
    levels: int | None


def _same_category(a: object, b: object) -> bool:
    # True == 1 in Python; a categorical with choices [1, True] must keep them apart.
    return type(a) is type(b) and a == b


class SearchSpace:
    """A validated search space; build it with ``SearchSpace(params)``.

    Raises:
        SpaceError: no parameter, empty or duplicate names, bounds in the wrong order, a log
            scale with a bound <= 0, a step on a log scale or a non-positive step, an empty or
            duplicated categorical, or more than ``MAX_PARAMETERS`` parameters.
    """

    def __init__(self, params: Sequence[Param]) -> None:
        if not params:
            raise SpaceError("the search space needs at least one parameter")
        if len(params) > MAX_PARAMETERS:
            raise SpaceError(
                f"the search space has {len(params)} parameters; at most {MAX_PARAMETERS} allowed"
            )
        seen: set[str] = set()
        for p in params:
            if not p.name or not p.name.strip():
                raise SpaceError("every parameter needs a non-empty name")
            if p.name in seen:
                raise SpaceError(f"parameter name {p.name!r} is used twice; names must be unique")
            seen.add(p.name)
            _check_param(p)
        self.params: tuple[Param, ...] = tuple(params)
        self.free: tuple[Param, ...] = tuple(p for p in params if not isinstance(p, FixedParam))
        self.dimensions: tuple[Dimension, ...] = tuple(_dimension(p) for p in self.free)
        self.by_name: dict[str, Param] = {p.name: p for p in params}

    @property
    def d(self) -> int:
        return len(self.free)

    def encode(self, values: Mapping[str, ParamValue]) -> np.ndarray:
        """Encode validated parameter values as a point: ``(d,)`` float64 in [0, 1]."""
        return np.array([_encode_one(p, values[p.name]) for p in self.free], dtype=np.float64)

    def decode(self, x: np.ndarray) -> dict[str, ParamValue]:
        """Decode a point ``x: (d,)`` in [0, 1] (clipped) to parameter values by name."""
        out: dict[str, ParamValue] = {}
        coords = iter(np.clip(np.asarray(x, dtype=np.float64), 0.0, 1.0).tolist())
        for p in self.params:
            out[p.name] = p.value if isinstance(p, FixedParam) else _decode_one(p, next(coords))
        return out

    def snap(self, X: np.ndarray) -> np.ndarray:
        """Map each row of ``X: (n, d)`` to the representative point of the values it decodes to."""
        X = np.clip(np.asarray(X, dtype=np.float64), 0.0, 1.0)
        out = X.copy()
        for j, p in enumerate(self.free):
            out[:, j] = _snap_column(p, X[:, j])
        return out

    def validate(self, values: Mapping[str, object]) -> dict[str, ParamValue]:
        """Check user-given values (an enqueued or imported trial) and return them normalized.

        Fixed parameters may be omitted. Ints given as integral floats are accepted as ints.

        Raises:
            SpaceError: an unknown or missing name, a value of the wrong type, out of range,
                off the step grid, or not among the choices.
        """
        unknown = sorted(set(values) - set(self.by_name))
        if unknown:
            raise SpaceError(f"unknown parameter(s) {unknown}; the study has {list(self.by_name)}")
        out: dict[str, ParamValue] = {}
        for p in self.params:
            if p.name not in values:
                if isinstance(p, FixedParam):
                    out[p.name] = p.value
                    continue
                raise SpaceError(f"parameter {p.name!r} is missing")
            out[p.name] = _validate_one(p, values[p.name])
        return out


def _check_param(p: Param) -> None:
    if isinstance(p, FloatParam | IntParam):
        if not (math.isfinite(p.low) and math.isfinite(p.high) and math.isfinite(p.high - p.low)):
            raise SpaceError(f"parameter {p.name!r}: bounds must be finite numbers")
        if p.low >= p.high:
            raise SpaceError(
                f"parameter {p.name!r}: low ({p.low}) must be below high ({p.high}); "
                "use a fixed parameter for a single value"
            )
        if p.log and p.low <= 0:
            raise SpaceError(f"parameter {p.name!r}: a log scale needs low > 0, got {p.low}")
    if isinstance(p, FloatParam) and p.step is not None:
        if p.log:
            raise SpaceError(f"parameter {p.name!r}: step cannot be combined with a log scale")
        if not (p.step > 0 and math.isfinite(p.step)):
            raise SpaceError(f"parameter {p.name!r}: step must be a positive number")
        if p.step > p.high - p.low:
            raise SpaceError(f"parameter {p.name!r}: step is larger than high - low")
    if isinstance(p, CategoricalParam):
        if not p.choices:
            raise SpaceError(f"parameter {p.name!r}: a categorical needs at least one choice")
        for i, a in enumerate(p.choices):
            if any(_same_category(a, b) for b in p.choices[:i]):
                raise SpaceError(f"parameter {p.name!r}: choice {a!r} appears twice")


def _levels(p: Param) -> int | None:
    if isinstance(p, FloatParam) and p.step is not None:
        return math.floor((p.high - p.low) / p.step + 1e-9) + 1
    if isinstance(p, IntParam) and not p.log:
        return p.high - p.low + 1
    if isinstance(p, CategoricalParam):
        return len(p.choices)
    return None


def _dimension(p: Param) -> Dimension:
    if isinstance(p, CategoricalParam):
        return Dimension(p.name, "categorical", len(p.choices))
    if isinstance(p, IntParam) or (isinstance(p, FloatParam) and p.step is not None):
        return Dimension(p.name, "integer", _levels(p))
    return Dimension(p.name, "continuous", None)


def _int_log_bounds(p: IntParam) -> tuple[float, float]:
    # A log-scaled int has low >= 1, so low - 0.5 > 0.
    return math.log(p.low - 0.5), math.log(p.high + 0.5)


def _encode_one(p: Param, v: ParamValue) -> float:
    levels = _levels(p)
    if isinstance(p, CategoricalParam):
        index = next(i for i, c in enumerate(p.choices) if _same_category(c, v))
        return (index + 0.5) / len(p.choices)
    if isinstance(p, FloatParam):
        if levels is not None and p.step is not None:
            k = round((float(v) - p.low) / p.step)
            return (k + 0.5) / levels
        if p.log:
            return (math.log(float(v)) - math.log(p.low)) / (math.log(p.high) - math.log(p.low))
        return (float(v) - p.low) / (p.high - p.low)
    if isinstance(p, IntParam):
        if levels is not None:
            return (int(v) - p.low + 0.5) / levels
        lo, hi = _int_log_bounds(p)
        return (math.log(int(v)) - lo) / (hi - lo)
    raise SpaceError(f"parameter {p.name!r} has no coordinate")


def _decode_one(p: Param, u: float) -> ParamValue:
    levels = _levels(p)
    if levels is not None:
        k = min(math.floor(u * levels), levels - 1)
        if isinstance(p, CategoricalParam):
            return p.choices[k]
        if isinstance(p, IntParam):
            return p.low + k
        assert isinstance(p, FloatParam) and p.step is not None
        return min(round(p.low + k * p.step, 12), p.high)
    if isinstance(p, FloatParam):
        if p.log:
            value = math.exp(math.log(p.low) + u * (math.log(p.high) - math.log(p.low)))
            return min(max(value, p.low), p.high)
        return p.low + u * (p.high - p.low)
    assert isinstance(p, IntParam)
    lo, hi = _int_log_bounds(p)
    return min(max(round(math.exp(lo + u * (hi - lo))), p.low), p.high)


def _snap_column(p: Param, u: np.ndarray) -> np.ndarray:
    levels = _levels(p)
    if levels is not None:
        return (np.minimum(np.floor(u * levels), levels - 1) + 0.5) / levels
    if isinstance(p, IntParam):
        lo, hi = _int_log_bounds(p)
        v = np.clip(np.round(np.exp(lo + u * (hi - lo))), p.low, p.high)
        return (np.log(v) - lo) / (hi - lo)
    return u


def _validate_one(p: Param, v: object) -> ParamValue:
    if isinstance(p, FixedParam):
        if not _same_category(v, p.value):
            raise SpaceError(f"parameter {p.name!r} is fixed to {p.value!r}, got {v!r}")
        return p.value
    if isinstance(p, CategoricalParam):
        for c in p.choices:
            if _same_category(c, v):
                return c
        raise SpaceError(f"parameter {p.name!r}: {v!r} is not one of {list(p.choices)}")
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise SpaceError(f"parameter {p.name!r} takes a number, got {v!r}")
    if not math.isfinite(v):
        raise SpaceError(f"parameter {p.name!r}: {v!r} is not a finite number")
    if not p.low <= v <= p.high:
        raise SpaceError(f"parameter {p.name!r}: {v} is outside [{p.low}, {p.high}]")
    if isinstance(p, IntParam):
        if v != int(v):
            raise SpaceError(f"parameter {p.name!r} takes an integer, got {v}")
        return int(v)
    if p.step is not None:
        k = (v - p.low) / p.step
        if abs(k - round(k)) > 1e-6:
            raise SpaceError(f"parameter {p.name!r}: {v} is not low + k * step (step {p.step})")
        return min(round(p.low + round(k) * p.step, 12), p.high)
    return float(v)


def distinct_rows(X: np.ndarray, taken: np.ndarray) -> np.ndarray:
    """The rows of ``X: (n, d)`` in order, without repeats and without rows of ``taken``."""
    keys = _row_keys(X)
    _, first = np.unique(keys, return_index=True)
    first.sort()
    if len(taken):
        first = first[~np.isin(keys[first], _row_keys(taken))]
    return X[first]


def _row_keys(X: np.ndarray) -> np.ndarray:
    """One comparable bytes value per row (``+ 0.0`` turns -0.0 into 0.0)."""
    X = np.ascontiguousarray(X + 0.0, dtype=np.float64)
    return X.view(np.dtype((np.void, X.itemsize * X.shape[1]))).ravel()
