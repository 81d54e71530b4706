"""The progress output of ``optimize`` (``client._base.Budget``): a bar on a terminal, plain
lines otherwise."""

from __future__ import annotations

import io

import pytest

from client._base import Budget
from tests.conftest import FLOAT_X


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    """A clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def run_budget(
    stderr: io.StringIO, monkeypatch: pytest.MonkeyPatch, values: list[float | None], total: int
) -> Budget:
    """Finish one trial per second with these values (``None``: a failed trial)."""
    monkeypatch.setattr("sys.stderr", stderr)
    clock = Clock()
    budget = Budget(total, progress=True, goal="minimize", clock=clock)
    for value in values:
        clock.now += 1.0
        budget.done(ok=value is not None, value=value)
    budget.finish()
    return budget


def test_not_on_a_terminal_it_prints_a_plain_line_every_tenth(monkeypatch):
    stderr = io.StringIO()
    run_budget(stderr, monkeypatch, [5.0, 3.0, None, 4.0] * 5, total=20)

    lines = stderr.getvalue().splitlines()
    assert "\r" not in stderr.getvalue()
    assert [line.split()[0] for line in lines] == [f"{n}/20" for n in range(2, 21, 2)]
    assert lines[-1] == "20/20 trials  best 3  0:20 elapsed  1.00 trials/s  5 failed"


def test_not_on_a_terminal_it_prints_a_line_every_30_seconds_and_at_the_end(monkeypatch):
    stderr = io.StringIO()
    monkeypatch.setattr("sys.stderr", stderr)
    clock = Clock()
    budget = Budget(1000, progress=True, goal="maximize", clock=clock)
    for seconds, value in [(10, 1.0), (25, 2.0), (1, 0.5)]:
        clock.now += seconds
        budget.done(ok=True, value=value)
    budget.finish()  # stopped early: the last count is still printed

    assert stderr.getvalue().splitlines() == [
        "2/1000 trials  best 2  0:35 elapsed  0.06 trials/s",
        "3/1000 trials  best 2  0:36 elapsed  0.08 trials/s",
    ]


def test_on_a_terminal_it_redraws_one_bar(monkeypatch):
    terminal = FakeTerminal()
    run_budget(terminal, monkeypatch, [5.0, 3.0, None, 4.0], total=4)

    frames = terminal.getvalue().split("\r")[1:]
    assert len(frames) == 4 and all("\n" not in frame for frame in frames[:-1])
    assert (
        frames[0] == "[" + "#" * 7 + "-" * 23 + "] 1/4 trials  best 5  0:01 elapsed  1.00 trials/s"
    )
    assert (
        frames[-1]
        == "[" + "#" * 30 + "] 4/4 trials  best 3  0:04 elapsed  1.00 trials/s  1 failed\n"
    )


def test_several_objectives_show_no_best_value(monkeypatch):
    stderr = io.StringIO()
    monkeypatch.setattr("sys.stderr", stderr)
    budget = Budget(1, progress=True)
    budget.done(ok=True)
    assert "best" not in stderr.getvalue() and stderr.getvalue().startswith("1/1 trials  0:00")


def test_optimize_shows_the_best_feasible_value(client, capsys):
    study = client.create_study(
        "constrained", [FLOAT_X], constraints=[{"name": "c", "op": ">=", "threshold": 0.0}]
    )
    study.optimize(lambda p: {"value": p["x"], "c": p["x"]}, n_trials=20)

    (best,) = study.best().trials
    assert best.values is not None
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 10 and lines[-1].startswith("20/20 trials  best ")
    assert lines[-1].split()[3] == f"{best.values['value']:.6g}"
    assert min(t.values["value"] for t in study.trials() if t.values) < 0  # an infeasible one
