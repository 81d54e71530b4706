"""A small pbt study and a fake trainer for the clients' ``train`` tests."""

from client.models import TrialPublic

LR = {"type": "float", "name": "lr", "low": 0.001, "high": 1.0, "log": True}
#: Three members trained to step 30 in segments of 10.
PBT_STUDY = {
    "objectives": [{"name": "accuracy", "goal": "maximize"}],
    "engine": {"name": "pbt", "options": {"t_max": 30, "population_size": 3, "interval": 10}},
    "seed": 1,
}


class CurveTrainer:
    """Trains a unit on a synthetic curve (progress at the rate ``lr``); checkpoints are
    progress values kept by reference, as a folder of files would be."""

    def __init__(self) -> None:
        self.saved: dict[str, float] = {}
        self.loaded: list[str | None] = []

    def __call__(self, trial: TrialPublic) -> tuple[float, str]:
        assert trial.unit is not None
        start = trial.unit.start.checkpoint
        self.loaded.append(start)
        progress = 0.0 if start is None else self.saved[start]
        progress += (trial.unit.to_step - trial.unit.from_step) * float(trial.params["lr"])
        reference = f"ckpt/{trial.number}"
        self.saved[reference] = progress
        return progress / 30, reference

    def check(self, trials: list[TrialPublic]) -> None:
        """Every unit was trained here and completed, and loaded the checkpoint of the exact
        trial it names."""
        assert len(trials) == len(self.loaded) >= 6
        for trial, loaded in zip(trials, self.loaded, strict=True):
            assert trial.state == "completed" and trial.unit is not None
            named = trial.unit.start.trial
            assert loaded == (None if named is None else f"ckpt/{named}")
