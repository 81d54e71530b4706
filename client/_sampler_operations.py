"""The sampler handle's operations (``client._operations`` explains operations): create, ask,
tell, run and delete a multi-target sampler, without I/O."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from client._base import Call, body, decoder, no_content
from client._operations import Evaluate, Op
from client.models import SamplerAsk, SamplerCreate, SamplerPublic, SamplerStep, SamplerTell


class SamplerHandle(Protocol):
    id: int
    info: SamplerPublic


_sampler = decoder(SamplerPublic)


def create_sampler(client: object, dim: int, n_targets: int, **fields: Any) -> Op[SamplerPublic]:
    """Create a multi-target sampler; ``fields`` are other ``SamplerCreate`` fields
    (``n_particles``, ``algorithm``, ``kernel``, ``eta``, ``init``, ``bounds``, ``seed``...)."""
    spec = SamplerCreate.model_validate({"dim": dim, "n_targets": n_targets, **fields})
    return (yield Call("POST", "/v1/samplers", _sampler, json=body(spec)))


def get_sampler(client: object, sampler_id: int) -> Op[SamplerPublic]:
    return (yield Call("GET", f"/v1/samplers/{sampler_id}", _sampler))


def refresh_sampler(sampler: SamplerHandle) -> Op[SamplerPublic]:
    sampler.info = yield from get_sampler(None, sampler.id)
    return sampler.info


def ask_sampler(sampler: SamplerHandle) -> Op[SamplerAsk]:
    path = f"/v1/samplers/{sampler.id}/ask"
    return (yield Call("POST", path, decoder(SamplerAsk)))


def tell_sampler(
    sampler: SamplerHandle, iteration: int, grad_log_prob: Any, log_prob: Any = None
) -> Op[SamplerStep]:
    """Tell the scores at the positions of ``iteration`` (nested lists or arrays)."""
    req = SamplerTell(
        iteration=iteration,
        grad_log_prob=_as_lists(grad_log_prob),
        log_prob=None if log_prob is None else _as_lists(log_prob),
    )
    path = f"/v1/samplers/{sampler.id}/tell"
    return (yield Call("POST", path, decoder(SamplerStep), json=body(req)))


def _as_lists(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else value


def run_sampler(
    sampler: SamplerHandle, scores: Callable[[list[list[float]]], Any], iterations: int
) -> Op[SamplerPublic]:
    """``iterations`` rounds of ask, ``scores(X)``, tell; ``scores`` returns the gradients
    ``K x m x d``, or ``(gradients, log_prob)`` with ``log_prob`` ``K x m`` (with the async
    client, ``scores`` may be a coroutine function)."""
    for _ in range(iterations):
        asked = yield from ask_sampler(sampler)
        answer = yield Evaluate(scores, asked.X)
        grads, log_prob = answer if isinstance(answer, tuple) else (answer, None)
        yield from tell_sampler(sampler, asked.iteration, grads, log_prob)
    return (yield from refresh_sampler(sampler))


def delete_sampler(sampler: SamplerHandle) -> Op[None]:
    yield Call("DELETE", f"/v1/samplers/{sampler.id}", no_content)
