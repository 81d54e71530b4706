"""Every endpoint as a ``Call`` builder; the sync and async clients send the same calls."""

from __future__ import annotations

from typing import Any, Literal

from client._base import Call, body, decoder, no_content, text
from client.models import (
    AskRequest,
    AskResponse,
    BestPublic,
    CheckpointsPublic,
    HeartbeatRequest,
    Lineage,
    MeasurementPublic,
    ReportRequest,
    SamplerAsk,
    SamplerCreate,
    SamplerPublic,
    SamplerStep,
    SamplerTell,
    StudiesPage,
    StudyCreate,
    StudyExport,
    StudyPublic,
    StudyUpdate,
    TellRequest,
    TrialCreate,
    TrialPublic,
    TrialsPage,
)

_study = decoder(StudyPublic)
_trial = decoder(TrialPublic)


def create_study(spec: StudyCreate) -> Call[StudyPublic]:
    return Call("POST", "/v1/studies", _study, json=body(spec))


def get_study(study_id: int) -> Call[StudyPublic]:
    return Call("GET", f"/v1/studies/{study_id}", _study)


def list_studies(cursor: str | None, limit: int) -> Call[StudiesPage]:
    params: dict[str, Any] = {"limit": limit}
    if cursor is not None:
        params["cursor"] = cursor
    return Call("GET", "/v1/studies", decoder(StudiesPage), params=params)


def update_study(study_id: int, change: StudyUpdate) -> Call[StudyPublic]:
    return Call("PATCH", f"/v1/studies/{study_id}", _study, json=body(change))


def delete_study(study_id: int) -> Call[None]:
    return Call("DELETE", f"/v1/studies/{study_id}", no_content)


def ask(study_id: int, req: AskRequest) -> Call[AskResponse]:
    return Call("POST", f"/v1/studies/{study_id}/ask", decoder(AskResponse), json=body(req))


def tell(study_id: int, number: int, req: TellRequest) -> Call[TrialPublic]:
    return Call("POST", f"/v1/studies/{study_id}/trials/{number}/tell", _trial, json=body(req))


def report(study_id: int, number: int, req: ReportRequest) -> Call[MeasurementPublic]:
    path = f"/v1/studies/{study_id}/trials/{number}/report"
    return Call("POST", path, decoder(MeasurementPublic), json=body(req))


def heartbeat(study_id: int, number: int, req: HeartbeatRequest) -> Call[TrialPublic]:
    path = f"/v1/studies/{study_id}/trials/{number}/heartbeat"
    return Call("POST", path, _trial, json=body(req))


def enqueue(study_id: int, req: TrialCreate) -> Call[TrialPublic]:
    return Call("POST", f"/v1/studies/{study_id}/trials", _trial, json=body(req))


def get_trial(study_id: int, number: int) -> Call[TrialPublic]:
    return Call("GET", f"/v1/studies/{study_id}/trials/{number}", _trial)


def list_trials(
    study_id: int, states: list[str] | None, cursor: str | None, limit: int
) -> Call[TrialsPage]:
    params: dict[str, Any] = {"limit": limit}
    if states:
        params["state"] = states
    if cursor is not None:
        params["cursor"] = cursor
    return Call("GET", f"/v1/studies/{study_id}/trials", decoder(TrialsPage), params=params)


def measurements(study_id: int, number: int) -> Call[list[MeasurementPublic]]:
    path = f"/v1/studies/{study_id}/trials/{number}/measurements"
    return Call("GET", path, decoder(list[MeasurementPublic]))


def best(study_id: int) -> Call[BestPublic]:
    return Call("GET", f"/v1/studies/{study_id}/best", decoder(BestPublic))


def lineage(study_id: int, number: int) -> Call[Lineage]:
    path = f"/v1/studies/{study_id}/trials/{number}/lineage"
    return Call("GET", path, decoder(Lineage))


def best_schedule(study_id: int) -> Call[Lineage]:
    return Call("GET", f"/v1/studies/{study_id}/best/schedule", decoder(Lineage))


def checkpoints(study_id: int) -> Call[CheckpointsPublic]:
    return Call("GET", f"/v1/studies/{study_id}/checkpoints", decoder(CheckpointsPublic))


def export_json(study_id: int) -> Call[StudyExport]:
    path = f"/v1/studies/{study_id}/export"
    return Call("GET", path, decoder(StudyExport), params={"format": "json"})


def export_csv(study_id: int) -> Call[str]:
    return Call("GET", f"/v1/studies/{study_id}/export", text, params={"format": "csv"})


def import_study(export: StudyExport, name: str | None) -> Call[StudyPublic]:
    params = {"name": name} if name else None
    return Call("POST", "/v1/studies/import", _study, json=body(export), params=params)


def create_sampler(dim: int, n_targets: int, fields: dict[str, Any]) -> Call[SamplerPublic]:
    spec = SamplerCreate.model_validate({"dim": dim, "n_targets": n_targets, **fields})
    return Call("POST", "/v1/samplers", decoder(SamplerPublic), json=body(spec))


def get_sampler(sampler_id: int) -> Call[SamplerPublic]:
    return Call("GET", f"/v1/samplers/{sampler_id}", decoder(SamplerPublic))


def ask_sampler(sampler_id: int) -> Call[SamplerAsk]:
    return Call("POST", f"/v1/samplers/{sampler_id}/ask", decoder(SamplerAsk))


def tell_sampler(
    sampler_id: int, iteration: int, grad_log_prob: Any, log_prob: Any
) -> Call[SamplerStep]:
    """Scores as nested lists or arrays (anything with ``tolist``)."""
    req = SamplerTell(
        iteration=iteration,
        grad_log_prob=_as_lists(grad_log_prob),
        log_prob=None if log_prob is None else _as_lists(log_prob),
    )
    return Call("POST", f"/v1/samplers/{sampler_id}/tell", decoder(SamplerStep), json=body(req))


def _as_lists(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else value


def delete_sampler(sampler_id: int) -> Call[None]:
    return Call("DELETE", f"/v1/samplers/{sampler_id}", no_content)


def study_create(
    name: str,
    parameters: list[Any],
    objectives: list[Any] | None,
    constraints: list[Any] | None,
    engine: str | dict[str, Any],
    extra: dict[str, Any],
) -> StudyCreate:
    fields: dict[str, Any] = {"name": name, "parameters": parameters, **extra}
    if objectives is not None:
        fields["objectives"] = objectives
    if constraints is not None:
        fields["constraints"] = constraints
    fields["engine"] = {"name": engine} if isinstance(engine, str) else engine
    return StudyCreate.model_validate(fields)


Format = Literal["json", "csv"]
