"""The ``asktell`` study commands, run in process against a real uvicorn server in a thread."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import uvicorn

from client import Client, Study
from service import cli
from service.app import create_app
from service.settings import Settings
from tests.conftest import FLOAT_X, FLOAT_Y, SEGMENT_OBJECTIVES
from tests.integration.conftest import free_port


@pytest.fixture
def url(sqlite_url: str) -> Iterator[str]:
    """The URL of a server on a fresh SQLite file, stopped after the test."""
    port = free_port()
    config = uvicorn.Config(
        create_app(Settings(database_url=sqlite_url)), port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


@pytest.fixture
def client(url: str) -> Iterator[Client]:
    with Client(url) as c:
        yield c


def quad_study(client: Client, values: list[float]) -> Study:
    """A single-objective study with completed trials of the given values."""
    study = client.create_study("quad", [FLOAT_X])
    for i, value in enumerate(values):
        study.enqueue({"x": float(i)}, values={"value": value})
    return study


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_studies_list_prints_a_header_and_each_best_value(client, url, capsys):
    quad_study(client, [3.0, 1.5, 2.0])
    client.create_study("two", [FLOAT_X, FLOAT_Y], objectives=SEGMENT_OBJECTIVES)

    code, out, err = run(capsys, "studies", "list", "--url", url)

    assert (code, err) == (0, "")
    header, quad, two = out.splitlines()
    assert header.split() == ["ID", "NAME", "STATE", "ENGINE", "BEST", "TRIALS"]
    assert quad.split()[1:5] == ["quad", "active", "random", "1.5"]
    assert quad[header.index("TRIALS") :] == "3: 3 completed"
    assert two.split()[1:6] == ["two", "active", "random", "-", "0"]
    for column in ("NAME", "STATE", "ENGINE", "BEST", "TRIALS"):  # aligned columns
        start = header.index(column)
        assert quad[start - 2 : start] == "  " and quad[start] != " "
        assert two[start - 2 : start] == "  " and two[start] != " "


def test_url_is_accepted_before_and_after_the_subcommand(client, url, capsys, monkeypatch):
    monkeypatch.setenv("ASKTELL_URL", "http://127.0.0.1:9")  # nothing listens there
    quad_study(client, [1.0])
    outputs = [
        run(capsys, "--url", url, "studies", "list"),
        run(capsys, "studies", "--url", url, "list"),
        run(capsys, "studies", "list", "--url", url),
    ]
    assert outputs[0][0] == 0 and "quad" in outputs[0][1]
    assert outputs[1] == outputs[0] and outputs[2] == outputs[0]


def test_a_404_is_one_line_on_stderr_and_exit_code_1(url, capsys):
    code, out, err = run(capsys, "studies", "show", "999", "--url", url)
    assert (code, out) == (1, "")
    assert err == "error 404 not_found: study 999 does not exist\n"


def test_a_409_is_one_line_on_stderr_and_exit_code_1(client, url, capsys, tmp_path: Path):
    study = quad_study(client, [1.0])
    exported = tmp_path / "quad.json"
    exported.write_text(study.export().model_dump_json())

    code, out, err = run(capsys, "studies", "import", str(exported), "--url", url)

    assert (code, out) == (1, "")
    assert err.startswith("error 409 study_exists: a study named 'quad' exists")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_an_unreachable_server_is_one_line_on_stderr(capsys):
    dead = f"http://127.0.0.1:{free_port()}"
    code, out, err = run(capsys, "studies", "list", "--url", dead)
    assert (code, out) == (1, "")
    assert err.startswith(f"error: cannot reach {dead}: ") and err.count("\n") == 1


def test_watch_once_prints_one_line_of_progress_when_not_on_a_terminal(client, url, capsys):
    study = quad_study(client, [3.0, 1.5, 2.0])

    code, out, err = run(capsys, "studies", "watch", str(study.id), "--once", "--url", url)

    assert (code, err) == (0, "")
    (line,) = out.splitlines()
    assert "\x1b" not in line
    for part in (
        f"study {study.id} quad",
        "state active",
        "engine random",
        "trials 3: 3 completed",
        "best 1.5",
        "trials/min",
        "last activity ",
    ):
        assert part in line, (part, line)


def test_watch_shows_the_hypervolume_of_several_objectives(client, url, capsys):
    study = client.create_study("two", [FLOAT_X, FLOAT_Y], objectives=SEGMENT_OBJECTIVES)
    study.enqueue({"x": 0.0, "y": 0.0}, values={"f1": 0.0, "f2": 4.0})
    study.enqueue({"x": 2.0, "y": 0.0}, values={"f1": 4.0, "f2": 0.0})
    hypervolume = study.best().hypervolume
    assert hypervolume is not None

    code, out, _ = run(capsys, "studies", "watch", str(study.id), "--once", "--url", url)

    assert code == 0
    assert f"best 2 Pareto-optimal, hypervolume {hypervolume:.6g}" in out


def test_watch_exits_when_the_study_is_completed(client, url, capsys, monkeypatch):
    study = quad_study(client, [1.0])
    study.update(state="completed")
    monkeypatch.setattr(cli, "sleep", lambda s: pytest.fail("watch waited"))

    code, out, _ = run(capsys, "studies", "watch", str(study.id), "--url", url)

    assert code == 0 and "state completed" in out and len(out.splitlines()) == 1


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_watch_redraws_in_place_on_a_terminal_and_exits_on_ctrl_c(client, url, capsys, monkeypatch):
    study = quad_study(client, [3.0])
    terminal = FakeTerminal()
    monkeypatch.setattr("sys.stdout", terminal)
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:
            raise KeyboardInterrupt
        study.enqueue({"x": 1.0}, values={"value": 0.5})  # shows in the next frame

    monkeypatch.setattr(cli, "sleep", sleep)

    code = cli.main(["studies", "watch", str(study.id), "--interval", "0.5", "--url", url])

    assert code == 0 and sleeps == [0.5, 0.5]
    assert capsys.readouterr().err == ""
    first, second = terminal.getvalue().split("\x1b[J")[:2]
    assert "\x1b[" not in first.replace("\x1b[K", "")
    assert second.startswith("\x1b[7F")  # back up over the 7 lines of the first frame
    assert "1: 1 completed" in first and "\nbest           3\x1b[K\n" in first
    assert "2: 2 completed" in second and "0.5" in second


def test_watch_rate_is_over_the_last_minute_of_polls_after_the_studys_lifetime(client, monkeypatch):
    info = quad_study(client, [1.0]).info
    info = info.model_copy(update={"updated_at": info.created_at + timedelta(minutes=2)})
    now = [1000.0]
    monkeypatch.setattr(cli, "monotonic", lambda: now[0])
    rate = cli.Rate()
    polls = [(0, 10, 5.0), (30, 25, 30.0), (60, 40, 30.0), (90, 40, 15.0), (150, 40, 0.0)]
    for seconds, finished, per_minute in polls:  # the first: 10 trials over a 2-minute life
        now[0] = 1000.0 + seconds
        counts = {"completed": finished - 2, "failed": 1, "infeasible": 1, "running": 7}
        assert rate.per_minute(info.model_copy(update={"trial_counts": counts})) == per_minute
