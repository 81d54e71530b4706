"""The wire models of datasets (``/v1/datasets``): CSV uploads and the scikit-learn datasets
the server bundles, which tuning jobs train on; ``client.models`` re-exports them."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel

#: What a dataset's target is: class labels, or a number to predict.
DatasetTask = Literal["classification", "regression"]
#: How a feature column is encoded: standardized numbers, or one-hot categories.
ColumnKind = Literal["numeric", "categorical"]


class DatasetColumn(BaseModel):
    """A feature column (the target excluded)."""

    name: str
    #: ``numeric`` when every non-empty cell is a finite number, else ``categorical``.
    kind: ColumnKind
    #: Empty cells (a numeric one becomes the training mean, a categorical one no category).
    missing: int = 0
    #: A categorical column's number of distinct values (one-hot features); ``None`` if numeric.
    categories: int | None = None


class DatasetPublic(BaseModel):
    """An uploaded dataset, or one bundled with scikit-learn (``builtin``: no id, no bytes, no
    creation time)."""

    id: int | None
    name: str
    target: str
    task: DatasetTask
    builtin: bool = False
    #: Data rows (the header excluded).
    n_rows: int
    #: The size of the uploaded CSV.
    n_bytes: int | None = None
    columns: list[DatasetColumn]
    #: Classification: the class labels in order (a model's output ``k`` is ``classes[k]``).
    classes: list[str] | None = None
    created_at: datetime | None = None
