"""service.jobs.data: CSV parsing and its errors, the seeded stratified split, the
preprocessor fitted on the training split, predict rows, decode and score."""

from __future__ import annotations

import numpy as np
import pytest

from client.models import ProblemCode
from service.jobs import data
from service.jobs.data import DatasetError, Preprocessor

CSV = (
    "size,color,weight,label\n"
    + "".join(
        f"{i},{['red', 'blue', 'green'][i % 3]},{'' if i == 7 else i * 2.5},{'ab'[i % 2]}\n"
        for i in range(40)
    )
).encode()


def error_code(content: bytes, target: str = "label", task: str = "classification", **kw):
    with pytest.raises(DatasetError) as info:
        data.parse_csv(content, target, task, **kw)  # type: ignore[arg-type]
    return info.value.code, info.value.detail


def test_columns_are_typed_and_missing_cells_counted():
    frame = data.parse_csv(CSV, "label", "classification")
    assert frame.n_rows == 40 and frame.classes == ("a", "b")
    assert frame.kinds == {"size": "numeric", "color": "categorical", "weight": "numeric"}
    assert frame.describe()[1] == {
        "name": "color",
        "kind": "categorical",
        "missing": 0,
        "categories": 3,
    }
    assert frame.describe()[2]["missing"] == 1


@pytest.mark.parametrize(
    ("content", "kw", "code", "words"),
    [
        (b"", {}, ProblemCode.DATASET_EMPTY, "no header"),
        (b"a,label\n", {}, ProblemCode.DATASET_EMPTY, "no data rows"),
        (b"a,label\n1,x\n2,y\n", {}, ProblemCode.DATASET_EMPTY, "at least 5"),
        (b"label\nx\ny\nx\ny\nx\n", {}, ProblemCode.DATASET_EMPTY, "no feature column"),
        (b"a,label\n\xff\xfe,1\n", {}, ProblemCode.DATASET_UNREADABLE, "UTF-8"),
        (b"a,a,label\n1,2,x\n", {}, ProblemCode.DATASET_UNREADABLE, "twice"),
        (b"a,label\n1,x\n2,y,3\n", {}, ProblemCode.DATASET_RAGGED, "line 3"),
        (b"a,b\n1,x\n", {}, ProblemCode.DATASET_NO_TARGET, "'label'"),
        (b"a,label\n1,x\n2,\n", {}, ProblemCode.DATASET_NO_TARGET, "line 3"),
        (b"a,label\n" + b"1,x\n" * 6, {}, ProblemCode.DATASET_SINGLE_CLASS, "'x'"),
        (b"a,label\n" + b"1,x\n" * 6, {"max_rows": 5}, ProblemCode.DATASET_TOO_LARGE, "5"),
    ],
)
def test_bad_csvs_get_their_code(content, kw, code, words):
    got, detail = error_code(content, **kw)
    assert got is code and words in detail


def test_a_regression_target_must_be_numeric():
    content = b"a,y\n1,2\n2,3\n3,4\n4,five\n5,6\n"
    code, detail = error_code(content, "y", "regression")
    assert code is ProblemCode.DATASET_TARGET_NOT_NUMERIC and "line 5" in detail
    assert data.parse_csv(content.replace(b"five", b"5e0"), "y", "regression").n_rows == 5


def test_blank_lines_and_a_bom_are_skipped():
    frame = data.parse_csv(
        b"\xef\xbb\xbfa,label\n\n1,x\n2,y\n\n3,x\n4,y\n5,x\n", "label", "classification"
    )
    assert frame.n_rows == 5 and list(frame.columns) == ["a"]


def test_numeric_labels_are_ordered_by_value():
    content = b"a,label\n" + b"".join(
        f"{i},{v}\n".encode() for i, v in enumerate([10, 2, 1, 2, 10, 1])
    )
    assert data.parse_csv(content, "label", "classification").classes == ("1", "2", "10")


def test_split_is_60_20_20_stratified_and_seeded():
    split = data.csv_split(CSV, "label", "classification", seed=3)
    assert (len(split.y_train), len(split.y_val), len(split.y_test)) == (24, 8, 8)
    for y in (split.y_train, split.y_val, split.y_test):
        assert y.dtype == np.int64 and np.bincount(y).tolist() == [len(y) // 2] * 2
    again = data.csv_split(CSV, "label", "classification", seed=3)
    other = data.csv_split(CSV, "label", "classification", seed=4)
    assert np.array_equal(split.X_train, again.X_train)
    assert not np.array_equal(split.X_train, other.X_train)
    assert split.X_train.dtype == np.float32 and split.n_features == 5 and split.n_outputs == 2


def test_the_splits_partition_the_rows():
    y = np.array([0] * 7 + [1] * 3 + [2] * 1)
    train, val, test = data.split_indices(y, "classification", 0)
    assert sorted([*train, *val, *test]) == list(range(11))
    assert len(val) >= 1 and len(test) >= 1
    train, val, test = data.split_indices(np.zeros(10), "regression", 0)
    assert (len(train), len(val), len(test)) == (6, 2, 2)


def test_the_preprocessor_is_fitted_on_the_training_split_only():
    split = data.csv_split(CSV, "label", "classification", seed=0)
    pre = split.preprocessor
    size = pre.columns[0]
    # Standardized on the training rows: mean 0, std 1 there, not on validation + test.
    assert abs(split.X_train[:, 0].mean()) < 1e-6 and abs(split.X_train[:, 0].std() - 1) < 1e-5
    frame = data.parse_csv(CSV, "label", "classification")
    train, _, _ = data.split_indices(frame.y, "classification", 0)
    assert size.mean == pytest.approx(frame.columns["size"][train].mean())
    assert size.mean != pytest.approx(frame.columns["size"].mean())


def test_one_hot_and_missing_values():
    content = b"n,c,y\n1,u,a\n2,v,b\n3,u,a\n4,,b\n5,v,a\n6,u,b\n,v,a\n8,u,b\n9,w,a\n10,v,b\n"
    split = data.csv_split(content, "y", "classification", seed=1)
    pre = split.preprocessor
    assert pre.feature_names[0] == "n" and all(f.startswith("c=") for f in pre.feature_names[1:])
    one_hot = np.concatenate([split.X_train, split.X_val, split.X_test])[:, 1:]
    assert set(one_hot.sum(axis=1).tolist()) <= {0.0, 1.0}  # missing or unseen: all zeros
    X = pre.transform_rows([{"n": None, "c": ""}, {"n": "3", "c": "u", "y": "ignored"}])
    assert X[0].tolist() == [0.0] * pre.n_features  # the mean, and no category
    assert X[1, 1 + pre.columns[1].categories.index("u")] == 1.0


@pytest.mark.parametrize(
    ("rows", "words"),
    [
        ([{"n": 1}], "row 0 has no column 'c'"),
        ([{"n": 1, "c": "u"}, {"n": "x", "c": "u"}], "row 1, column 'n'"),
        ([{"n": True, "c": "u"}], "not a finite number"),
        ([{"n": float("inf"), "c": "u"}], "not a finite number"),
        ([{"n": 10**400, "c": "u"}], "not a finite number"),
        ([{"n": 1, "c": "zzz"}], "'zzz' is not a category"),
        ([{"n": 1, "c": "u", "extra": 2}], "unknown column(s) 'extra'"),
        ([[1, 2]], "row 0 is not an object"),
        ({"n": 1}, "rows must be a list"),
    ],
)
def test_predict_rows_errors_name_the_row_and_column(rows, words):
    content = b"n,c,y\n" + b"".join(
        f"{i},{'uv'[i % 2]},{'ab'[i % 2]}\n".encode() for i in range(10)
    )
    pre = data.csv_split(content, "y", "classification", seed=0).preprocessor
    with pytest.raises(ValueError) as info:
        pre.transform_rows(rows)
    assert words in str(info.value)


def test_preprocessor_json_round_trip():
    for split in (
        data.csv_split(CSV, "label", "classification", 0),
        data.builtin_split("diabetes", 0),
    ):
        pre = split.preprocessor
        back = Preprocessor.from_json(pre.to_json())
        assert back == pre
    with pytest.raises(ValueError):
        Preprocessor.from_json({"task": "regression"})


def test_a_split_round_trips_through_its_bytes():
    for split in (
        data.csv_split(CSV, "label", "classification", 0),
        data.builtin_split("diabetes", 0),
    ):
        back = data.Split.from_bytes(split.to_bytes())
        assert (back.task, back.n_features, back.n_outputs) == (
            split.task,
            split.n_features,
            split.n_outputs,
        )
        assert back.preprocessor == split.preprocessor
        for name in ("X_train", "y_train", "X_val", "y_val", "X_test", "y_test"):
            mine, theirs = getattr(back, name), getattr(split, name)
            assert mine.dtype == theirs.dtype and np.array_equal(mine, theirs), name


def test_decode_gives_labels_and_original_units():
    split = data.csv_split(CSV, "label", "classification", 0)
    assert split.preprocessor.decode(np.array([[0.1, 0.9], [2.0, -1.0]])) == ["b", "a"]
    content = b"x,y\n" + b"".join(f"{i},{100 + 10 * i}\n".encode() for i in range(20))
    reg = data.csv_split(content, "y", "regression", 0)
    assert reg.y_train.dtype == np.float32 and abs(reg.y_train.mean()) < 1e-6
    # The standardized targets decode back to the original values.
    assert reg.preprocessor.decode(reg.y_test[:, None]) == pytest.approx(
        [100 + 10 * i for i in data.split_indices(np.zeros(20), "regression", 0)[2]], rel=1e-5
    )
    with pytest.raises(ValueError):
        reg.preprocessor.decode(np.zeros((2, 3)))


def test_score_is_accuracy_or_r2():
    y = np.array([0, 1, 1, 0])
    outputs = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 0.0]])
    assert data.score("classification", y, outputs) == 0.75
    t = np.array([1.0, 2.0, 3.0, 4.0])
    assert data.score("regression", t, t[:, None]) == 1.0
    assert data.score("regression", t, np.full((4, 1), 2.5)) == 0.0
    assert data.score("regression", t, (t + 1)[:, None]) == pytest.approx(1 - 4 / 5)


@pytest.mark.parametrize("name", data.BUILTIN_DATASETS)
def test_each_builtin_dataset_loads_and_splits(name):
    split = data.builtin_split(name, 0)
    n = len(split.y_train) + len(split.y_val) + len(split.y_test)
    assert split.X_train.shape == (len(split.y_train), split.n_features)
    assert len(split.y_test) == pytest.approx(0.2 * n, abs=split.n_outputs)
    if name == "diabetes":
        assert split.task == "regression" and split.n_outputs == 1
    else:
        assert split.task == "classification" and split.n_outputs >= 2
        assert split.preprocessor.classes is not None
        assert set(np.unique(split.y_test)) == set(range(split.n_outputs))
    with pytest.raises(KeyError):
        data.builtin_split("mnist", 0)
