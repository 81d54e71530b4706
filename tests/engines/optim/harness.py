"""What the optimizer tests do over and over: step with fixed gradients, save and load a state,
compare within a module's rounding tolerances."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import torch
from torch.optim import Optimizer


@dataclass(frozen=True)
class Tolerances:
    """A test module's rounding tolerances: one for float64 (rtol = atol), two for float32."""

    float64: float
    float32_rtol: float
    float32_atol: float

    def __call__(self, dtype: torch.dtype) -> dict[str, float]:
        if dtype == torch.float64:
            return {"rtol": self.float64, "atol": self.float64}
        return {"rtol": self.float32_rtol, "atol": self.float32_atol}

    def close(self, actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
        """Assert ``actual`` equals ``expected`` within the tolerances of ``dtype``."""
        torch.testing.assert_close(actual, expected, **self(dtype))


def step_with(opt: Optimizer, x: torch.Tensor, *grads: torch.Tensor) -> None:
    """One step of ``opt`` per gradient in ``grads``, each set as the gradient of ``x``."""
    for grad in grads:
        x.grad = grad.to(x.dtype).clone()
        opt.step()


def through_torch_save(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` after ``torch.save`` and ``torch.load(weights_only=True)``."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)
