"""A job worker ends without Python's teardown (half a second with torch imported, which a
job's end waits for), its log flushed and its exit code kept."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import atexit, logging
from service.jobs.worker import exit_now
logging.basicConfig(level=logging.INFO, format="%(message)s")
atexit.register(lambda: print("teardown ran", flush=True))
logging.getLogger("asktell.worker").info("the last unit is told")
exit_now(3)
"""


def test_a_worker_exits_at_once_with_its_log_flushed():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 3
    assert "the last unit is told" in done.stderr
    assert "teardown ran" not in done.stdout
