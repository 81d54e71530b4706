"""Engine options: the ranges of integer options, declared on their dataclass fields, and
their checks (an engine's ``__post_init__`` runs them, so a bad option fails at creation)."""

from __future__ import annotations

from dataclasses import field, fields
from typing import Any, TypeVar, cast

T = TypeVar("T")


def check_option_ranges(checks: list[tuple[str, int | None, int, int, bool]]) -> None:
    """Check integer engine options: ``(name, value, low, high, nullable)`` each.

    Raises:
        ValueError: a value outside ``[low, high]``, or ``None`` where not nullable.
    """
    for name, value, low, high, nullable in checks:
        if value is None and nullable:
            continue
        if value is None or not low <= value <= high:
            raise ValueError(f"{name} must be between {low} and {high}, got {value}")


def int_option(default: T, low: int, high: int) -> T:
    """An integer engine option: a dataclass field whose value must lie in ``[low, high]``
    (``None`` is allowed when it is the default); ``check_int_options`` checks it."""
    return cast(T, field(default=default, metadata={"range": (low, high)}))


def check_int_options(engine: Any) -> None:
    """Check every ``int_option`` field of the engine ``engine``, in the order they are declared.

    Raises:
        ValueError: a value outside its range, or ``None`` where the default is not ``None``.
    """
    checks = []
    for f in fields(engine):
        if "range" in f.metadata:
            low, high = f.metadata["range"]
            checks.append((f.name, getattr(engine, f.name), low, high, f.default is None))
    check_option_ranges(checks)
