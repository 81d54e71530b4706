"""The worker example (examples/pbt_digits_worker.py) trains real units through the client."""

from __future__ import annotations

from examples.pbt_digits_worker import OBJECTIVE, SEARCH_SPACE, Digits, DigitsTrainer


def test_the_digits_worker_trains_a_pbt_study_and_its_checkpoints_load(client, tmp_path):
    study = client.create_study(
        "digits",
        SEARCH_SPACE,
        objectives=[OBJECTIVE],
        engine={"name": "pbt", "options": {"t_max": 60, "population_size": 3, "interval": 20}},
        seed=0,
    )
    folder = tmp_path / "checkpoints"
    trainer = DigitsTrainer(folder, Digits.load())
    n = study.train(lambda trial: trainer(trial, study.report))
    trials = list(study.trials())
    assert n == len(trials) == 9 and all(t.state == "completed" for t in trials)
    # Each unit saved its own file; a unit that starts from a checkpoint loaded that file.
    assert {f.name for f in folder.iterdir()} == {f"trial-{t.number}.pt" for t in trials}
    best = study.best_schedule()
    last = best.segments[-1]
    assert [s.to_step for s in best.segments] == list(range(20, last.to_step + 1, 20))
    assert last.values["accuracy"] > 0.5  # ten classes: chance is 0.1
    assert 0.5 < trainer.test_accuracy(last.checkpoint) <= 1.0
    releasable = [c.checkpoint for c in study.checkpoints().releasable]
    assert trainer.delete(releasable) == len(releasable) > 0
    for c in study.checkpoints().pinned:
        assert (folder / c.checkpoint).exists()
