"""The workload tests' data: the service's own splits of scikit-learn's bundled datasets
(``service.jobs.data``), digits optionally cut to its first ``n`` examples for speed."""

from __future__ import annotations

import dataclasses

from service.jobs.data import Split, builtin_split, split_frame
from service.jobs.table import builtin_frame


def digits(seed: int = 0, n: int | None = None) -> Split:
    """Digits (64 features, 10 classes); the first ``n`` examples when given."""
    if n is None:
        return builtin_split("digits", seed)
    frame = builtin_frame("digits")
    columns = {name: values[:n] for name, values in frame.columns.items()}
    return split_frame(dataclasses.replace(frame, columns=columns, y=frame.y[:n]), seed)


def diabetes(seed: int = 0) -> Split:
    """Diabetes (10 features), the target standardized on the training rows."""
    return builtin_split("diabetes", seed)
