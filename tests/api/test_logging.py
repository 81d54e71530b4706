"""The server's own log lines: the ``asktell`` loggers' information reaches stderr beside
uvicorn's (operators see a job claimed, its workers started; tests find the workers' pids)."""

from __future__ import annotations

import logging

from service.observability import configure_logging


def test_asktell_information_is_written_once_to_stderr(capfd) -> None:
    configure_logging("text")
    configure_logging("text")  # a second app in the same process adds no second handler
    # Written to the stderr of the moment: an app made earlier in this process (another
    # test's) made the handler while another stream was stderr.
    logging.getLogger("asktell.jobs").info("job %d: claimed by %s", 7, "host:1")
    logging.getLogger("asktell.jobs").debug("not shown")
    err = capfd.readouterr().err
    assert err.count("job 7: claimed by host:1") == 1
    assert "INFO:     asktell.jobs: job 7: claimed by host:1" in err
    assert "not shown" not in err


def test_a_level_the_operator_set_is_kept(capfd) -> None:
    logger = logging.getLogger("asktell")
    before = logger.level
    logger.setLevel(logging.WARNING)
    try:
        configure_logging("text")
        logging.getLogger("asktell.jobs").info("quiet")
        logging.getLogger("asktell.jobs").warning("loud")
        err = capfd.readouterr().err
        assert "quiet" not in err and "loud" in err
    finally:
        logger.setLevel(before)
