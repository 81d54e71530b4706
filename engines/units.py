"""Unit documents: what the schedulers (``pbt``, ``ipbt``) build and read about their units.

A unit document (``client.models.Unit``) says which member trains, in which generation, from
which step to which, starting fresh or from one exact checkpoint, and why. While an engine plans,
a document also carries its point (the hyperparameters in the unit cube) under ``"x"``;
``unit_proposal`` takes it out into ``Proposal.X``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from engines.base import JSON, Proposal, Unit


def unit_document(
    member: int,
    generation: int,
    from_step: int,
    to_step: int,
    start: Unit | None,
    reason: str,
    seed: int,
    x: Iterable[float],
    **extra: object,
) -> JSON:
    """The unit document, with its point under ``"x"``: start fresh, or from ``start``'s exact
    checkpoint."""
    return {
        "member": member,
        "generation": generation,
        "from_step": from_step,
        "to_step": to_step,
        "start": (
            {"kind": "fresh"}
            if start is None
            else {"kind": "checkpoint", "trial": start.number, "checkpoint": start.checkpoint}
        ),
        "reason": reason,
        "seed": seed,
        **extra,
        "x": [float(v) for v in x],
    }


def unit_proposal(docs: list[JSON], d: int, state: JSON, retry_after: float | None) -> Proposal:
    """A scheduler's proposal from unit documents that carry their point under ``"x"``."""
    return Proposal(
        X=np.array([doc["x"] for doc in docs], dtype=np.float64).reshape(len(docs), d),
        state=state,
        details=[{"member": doc["member"], "reason": doc["reason"]} for doc in docs],
        units=[{k: v for k, v in doc.items() if k != "x"} for doc in docs],
        retry_after=retry_after,
    )


def issued(units: Sequence[Unit]) -> set[tuple[int, int]]:
    """``(generation, member)`` of every unit handed out, to tell which planned ones are not."""
    return {(int(u.spec["generation"]), int(u.spec["member"])) for u in units}


def not_handed_out(plan: Sequence[JSON | None], units: Sequence[Unit]) -> list[JSON]:
    """The documents of a generation's ``plan`` no unit was handed out for yet."""
    handed_out = issued(units)
    return [d for d in plan if d is not None and (d["generation"], d["member"]) not in handed_out]


def told_generation(units: Sequence[Unit], generation: int, planned: int) -> list[Unit] | None:
    """The units of ``generation`` once all ``planned`` of them are handed out and told, else
    None (some are still training, or not handed out yet)."""
    members = [u for u in units if u.spec["generation"] == generation]
    if len(members) < planned or any(u.state == "pending" for u in members):
        return None
    return members


def checkpoint_starts(docs: Iterable[JSON]) -> set[int]:
    """The trials whose checkpoints the documents ``docs`` start from."""
    return {int(d["start"]["trial"]) for d in docs if d["start"]["kind"] == "checkpoint"}


def best_descendant_score(root: Unit, units: dict[int, Unit]) -> float:
    """The best score of any unit whose weights descend from ``root`` (itself included) through
    the units' ``start`` checkpoints, in ``root``'s ``iteration`` (``ipbt``)."""
    iteration = root.spec.get("iteration", 0)
    best = root.y if root.y is not None else math.inf
    for u in units.values():
        if u.y is None or u.spec.get("iteration", 0) != iteration:
            continue
        current: Unit | None = u
        seen = 0
        while current is not None and seen < len(units):
            if current.number == root.number:
                best = min(best, u.y)
                break
            start = current.spec["start"].get("trial")
            current = units.get(start) if start is not None else None
            seen += 1
    return best
