"""The ``asktell datasets`` commands against a real uvicorn server in a thread."""

from __future__ import annotations

import json

from tests.cli.test_cli import client, run, url  # noqa: F401 (fixtures)

CSV = "x,color,label\n" + "".join(f"{i},{'rg'[i % 2]},{'ab'[i % 2]}\n" for i in range(10))


def test_upload_list_show_and_delete(url, capsys, tmp_path):  # noqa: F811
    path = tmp_path / "d.csv"
    path.write_text(CSV)

    code, out, err = run(
        capsys, "datasets", "upload", str(path), "--name", "d", "--target", "label", "--url", url
    )
    assert (code, err) == (0, "")
    dataset_id = int(out)

    code, out, err = run(capsys, "--url", url, "datasets", "list")
    assert code == 0
    header, first, *builtins = out.splitlines()
    assert header.split() == ["ID", "NAME", "TASK", "TARGET", "ROWS", "COLUMNS", "CLASSES"]
    assert first.split() == [str(dataset_id), "d", "classification", "label", "10", "2", "2"]
    assert [line.split()[:2] for line in builtins[:1]] == [["builtin", "iris"]]
    assert len(builtins) == 5

    code, out, _ = run(capsys, "datasets", "show", "d", "--url", url)
    assert code == 0 and json.loads(out)["classes"] == ["a", "b"]

    code, out, err = run(capsys, "datasets", "delete", str(dataset_id), "--url", url)
    assert (code, out, err) == (0, "", "")
    code, out, err = run(capsys, "datasets", "show", "d", "--url", url)
    assert code == 1 and err.startswith("error 404 dataset_not_found:")


def test_a_bad_upload_is_one_line_on_stderr(url, capsys, tmp_path):  # noqa: F811
    path = tmp_path / "d.csv"
    path.write_text("x,label\n1,a\n2,b,3\n")
    code, out, err = run(
        capsys, "datasets", "upload", str(path), "--name", "d", "--target", "label", "--url", url
    )
    assert (code, out) == (1, "")
    assert err.startswith("error 422 dataset_ragged: line 3 has 3 cells")
    code, _, err = run(
        capsys,
        "datasets",
        "upload",
        str(tmp_path / "nope.csv"),
        "--name",
        "e",
        "--target",
        "y",
        "--url",
        url,
    )
    assert code == 1 and "cannot read" in err
