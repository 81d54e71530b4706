"""A user workload package for tests: ``user_workload`` holds the workloads, ``install``
makes them visible as ``asktell.workloads`` entry points.

``install(folder)`` writes ``asktell_test_workloads-0.1.dist-info/`` (METADATA and
entry_points.txt) into ``folder``; with ``folder`` on ``sys.path`` (in process:
``monkeypatch.syspath_prepend(folder)``; a worker process: ``PYTHONPATH=<folder>:<repo root>``),
``importlib.metadata`` finds the entry points:

- ``linear``: ``user_workload:WORKLOAD``, a numpy softmax/linear regression with ``predict`` and
  a tuned ``l2`` parameter (``parameters`` gives it when ``options["tune_l2"]``), usable for a
  job end to end;
- ``linear-class``: ``user_workload:LinearWorkload``, the same as a class;
- ``train-only``: ``user_workload:train``, a plain function (no predict, no parameters);
- ``broken``: ``user_workload:NOT_A_WORKLOAD``, a number.
"""

from __future__ import annotations

from pathlib import Path

MODULE = "tests.jobs.workload_pkg.user_workload"
DIST = "asktell_test_workloads-0.1.dist-info"
ENTRY_POINTS = {
    "linear": f"{MODULE}:WORKLOAD",
    "linear-class": f"{MODULE}:LinearWorkload",
    "train-only": f"{MODULE}:train",
    "broken": f"{MODULE}:NOT_A_WORKLOAD",
}


def install(folder: Path) -> Path:
    """Write the distribution's metadata into ``folder``; the dist-info folder."""
    dist = Path(folder) / DIST
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: asktell-test-workloads\nVersion: 0.1\n"
    )
    lines = ["[asktell.workloads]", *(f"{k} = {v}" for k, v in ENTRY_POINTS.items())]
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return dist
