"""A workload whose unit takes a fixed time (bench/jobs.py, part 5: Ray scale-out), installed
for the server's workers as the ``asktell.workloads`` entry point ``sleep``.

``train`` sleeps ``options["unit_seconds"]`` (default 1 s) whatever the steps, so two cores do
not cap how many units run at once: the wall time shows how the server and the executor scale.
Its score is a smooth function of the learning rate, accumulated over the steps from the start
checkpoint (a small JSON document), so ``ipbt`` has something to tune. ``install(folder)``
writes the distribution metadata into ``folder``; with ``folder`` and the repository root on
``PYTHONPATH`` (the server's environment, which its workers inherit), the entry point is found.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from service.jobs.workloads import UnitInput, UnitOutput

DIST = "asktell_bench_workloads-0.1.dist-info"


def train(unit: UnitInput) -> UnitOutput:
    started = time.perf_counter()
    progress = 0.0 if unit.start is None else float(json.loads(unit.start)["progress"])
    transform = unit.transform
    if transform.get("kind") == "shrink_perturb":
        progress *= float(transform["shrink"])
    lr = float(unit.hparams.get("lr", 1e-3))
    rate = math.exp(-((math.log10(lr) + 2.0) ** 2))  # best at lr = 0.01
    progress += unit.steps * rate
    time.sleep(float(unit.options.get("unit_seconds", 1.0)))
    score = 1.0 - math.exp(-progress / 100.0)
    checkpoint = json.dumps({"progress": progress}).encode()
    return UnitOutput(score, checkpoint, time.perf_counter() - started)


def install(folder: Path) -> Path:
    """Write the distribution's metadata (the ``sleep`` entry point) into ``folder``."""
    dist = Path(folder) / DIST
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: asktell-bench-workloads\nVersion: 0.1\n"
    )
    lines = ["[asktell.workloads]", "sleep = bench.sleep_workload:train"]
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return dist
