"""The test problem shared by the optimizer tests: a 2x3 quadratic and fixed gradients.

The problem is f(x) = 1/2 sum h (x - x*)^2 (+ a constant) with h = H (mu = 1, L = 10) and
x* = X_STAR, started at X0; G1 and G2 are fixed gradients for steps checked by hand.
"""

from __future__ import annotations

import torch

DTYPES = [torch.float32, torch.float64]
H = torch.linspace(1.0, 10.0, 6, dtype=torch.float64).reshape(2, 3)
X_STAR = torch.tensor([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]], dtype=torch.float64)
X0 = torch.tensor([[3.0, 1.0, -2.0], [4.0, -1.0, 2.0]], dtype=torch.float64)
G1 = torch.tensor([[0.5, -1.5, 2.0], [-0.25, 1.0, 3.0]], dtype=torch.float64)
G2 = torch.tensor([[-1.0, 0.5, 0.25], [2.0, -0.75, 0.5]], dtype=torch.float64)


def param(dtype: torch.dtype, value: torch.Tensor = X0) -> torch.Tensor:
    """A fresh leaf parameter holding ``value`` in ``dtype``."""
    return value.to(dtype).clone().requires_grad_(True)
