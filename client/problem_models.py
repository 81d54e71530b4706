"""The API's errors: every problem ``code`` with its HTTP status, and the problem+json body;
``client.models`` re-exports them."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class ProblemCode(StrEnum):
    """Every ``code`` a problem+json error of the API carries, each with its HTTP ``status``.

    The service raises with these members (``service.errors.ApiError``), and each route lists
    the ones it answers with in the OpenAPI document; the README's error table has one row per
    member.
    """

    status: int

    def __new__(cls, code: str, status: int) -> ProblemCode:
        member = str.__new__(cls, code)
        member._value_ = code
        member.status = status
        return member

    # 400, 405, 413: the request itself is unreadable
    MALFORMED_JSON = "malformed_json", 400
    HTTP_ERROR = "http_error", 400  # any other HTTP error Starlette raises, with its own status
    METHOD_NOT_ALLOWED = "method_not_allowed", 405
    # 408, 431: the request came too slowly, or its headers are too large or too many
    REQUEST_TIMEOUT = "request_timeout", 408
    HEADERS_TOO_LARGE = "headers_too_large", 431
    # 401, 403: no valid API key, or one whose scope does not allow the request
    UNAUTHORIZED = "unauthorized", 401
    INSUFFICIENT_SCOPE = "insufficient_scope", 403
    BODY_TOO_LARGE = "body_too_large", 413
    DATASET_TOO_LARGE = "dataset_too_large", 413
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type", 415
    # 404: the path names nothing (no such study, sampler or route) or no such trial
    NOT_FOUND = "not_found", 404
    TRIAL_NOT_FOUND = "trial_not_found", 404
    NO_COMPLETED_UNIT = "no_completed_unit", 404
    DATASET_NOT_FOUND = "dataset_not_found", 404
    JOB_NOT_FOUND = "job_not_found", 404
    ARTIFACT_NOT_FOUND = "artifact_not_found", 404
    # 409: the request is well formed but conflicts with what is stored
    CONFLICT = "conflict", 409
    STUDY_EXISTS = "study_exists", 409
    STUDY_NOT_ACTIVE = "study_not_active", 409
    TRIAL_FINISHED = "trial_finished", 409
    TRIAL_NOT_RUNNING = "trial_not_running", 409
    TRIAL_REASSIGNED = "trial_reassigned", 409
    IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused", 409
    STALE_ITERATION = "stale_iteration", 409
    ENGINE_SCHEDULES_UNITS = "engine_schedules_units", 409
    NOT_A_SCHEDULER_STUDY = "not_a_scheduler_study", 409
    MAX_TRIALS_REACHED = "max_trials_reached", 409
    DATASET_EXISTS = "dataset_exists", 409
    DATASET_IN_USE = "dataset_in_use", 409
    JOB_EXISTS = "job_exists", 409
    JOB_FINISHED = "job_finished", 409
    JOB_NOT_SUCCEEDED = "job_not_succeeded", 409
    # 422: a field's value is wrong; ``detail`` says what to fix
    VALIDATION_ERROR = "validation_error", 422
    INVALID_SEARCH_SPACE = "invalid_search_space", 422
    INVALID_ENGINE = "invalid_engine", 422
    ENGINE_UNSUPPORTED = "engine_unsupported", 422
    ENGINE_WORK_TOO_LARGE = "engine_work_too_large", 422
    INVALID_STUDY = "invalid_study", 422
    INVALID_IMPORT = "invalid_import", 422
    INVALID_PARAMS = "invalid_params", 422
    INVALID_CURSOR = "invalid_cursor", 422
    INVALID_IDEMPOTENCY_KEY = "invalid_idempotency_key", 422
    UNKNOWN_OBJECTIVE = "unknown_objective", 422
    UNKNOWN_CONSTRAINT = "unknown_constraint", 422
    MISSING_OBJECTIVE = "missing_objective", 422
    MISSING_CONSTRAINT = "missing_constraint", 422
    NON_FINITE_VALUE = "non_finite_value", 422
    CHECKPOINT_REQUIRED = "checkpoint_required", 422
    INVALID_SAMPLER = "invalid_sampler", 422
    SHAPE_MISMATCH = "shape_mismatch", 422
    NON_FINITE_GRADIENT = "non_finite_gradient", 422
    NON_FINITE_LOG_PROB = "non_finite_log_prob", 422
    STEP_NOT_FINITE = "step_not_finite", 422
    DATASET_EMPTY = "dataset_empty", 422
    DATASET_UNREADABLE = "dataset_unreadable", 422
    DATASET_RAGGED = "dataset_ragged", 422
    DATASET_NO_TARGET = "dataset_no_target", 422
    DATASET_TARGET_NOT_NUMERIC = "dataset_target_not_numeric", 422
    DATASET_SINGLE_CLASS = "dataset_single_class", 422
    INVALID_ARTIFACT_KEY = "invalid_artifact_key", 422
    UNKNOWN_WORKLOAD = "unknown_workload", 422
    UNKNOWN_OPTIMIZER = "unknown_optimizer", 422
    INVALID_JOB = "invalid_job", 422
    INVALID_PREDICT_ROWS = "invalid_predict_rows", 422
    EXECUTOR_UNAVAILABLE = "executor_unavailable", 422
    # 429, 503: try again (the client retries these)
    RATE_LIMITED = "rate_limited", 429
    UNAVAILABLE = "unavailable", 503
    STUDY_BUSY = "study_busy", 503
    # 500: a bug of the server; the error is logged
    INTERNAL_ERROR = "internal_error", 500


class ProblemDetail(BaseModel):
    """An RFC 9457 problem+json body; ``code`` is stable and safe to branch on."""

    model_config = ConfigDict(extra="allow")

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    code: str
