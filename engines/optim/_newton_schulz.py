"""The Newton-Schulz quintic iteration that Muon and OLion use to orthogonalize a momentum matrix.

For a matrix G (m x n) with singular value decomposition G = U S V^T, the iteration

    X_0 = G / (||G||_F + eps)                  (transposed first when m > n, so X X^T is small)
    A = X_k X_k^T
    X_{k+1} = a X_k + (b A + c A^2) X_k        (a, b, c) = (3.4445, -4.7750, 2.0315)

maps every singular value s of X_0 through the odd polynomial p(s) = a s + b s^3 + c s^5, five
times, and leaves U and V unchanged, so X_5 ~ U S' V^T with S' near the identity; it is not exactly
the polar factor U V^T [Jordan2024muon]. After 5 steps normalized singular values in [2e-3, 1]
land in about [0.68, 1.20]; smaller ones stay small (1e-3 -> 0.47, 1e-4 -> 0.05).

Precision (our choice): the iteration runs in float32, as part C prescribes on CPU (GPUs use
bfloat16), except that a float64 input runs in float64, so float64 parameters keep float64
arithmetic throughout. The result is returned in that working dtype; callers cast it back.

References:
    [Jordan2024muon] K. Jordan et al. Muon: an optimizer for hidden layers in neural networks.
        2024. https://kellerjordan.github.io/posts/muon/
"""

from __future__ import annotations

import torch
from torch import Tensor

#: Coefficients (a, b, c) of the quintic p(s) = a s + b s^3 + c s^5 [Jordan2024muon].
NS_COEFFICIENTS: tuple[float, float, float] = (3.4445, -4.7750, 2.0315)


def working_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 for float64 input, float32 for everything else (float32, float16, bfloat16)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def as_matrix(t: Tensor) -> Tensor:
    """A view of ``t`` as a matrix: ``(shape[0], prod(shape[1:]))``; conv kernels flatten."""
    if t.ndim < 2:
        raise ValueError(
            f"expected a tensor with at least 2 dimensions, got shape {tuple(t.shape)}"
        )
    return t.reshape(t.shape[0], -1)


def newton_schulz5(g: Tensor, steps: int = 5, eps: float = 1e-7) -> Tensor:
    """Approximately orthogonalize the matrix ``g`` (m x n) by ``steps`` quintic iterations.

    Returns an m x n tensor in ``working_dtype(g.dtype)``. A zero matrix maps to zero.
    """
    if g.ndim != 2:
        raise ValueError(f"newton_schulz5 needs a matrix, got shape {tuple(g.shape)}")
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    a, b, c = NS_COEFFICIENTS
    x = g.to(working_dtype(g.dtype))
    transposed = x.shape[0] > x.shape[1]
    if transposed:
        x = x.mT
    x = x / (torch.linalg.matrix_norm(x) + eps)
    for _ in range(steps):
        gram = x @ x.mT
        x = a * x + (b * gram + c * (gram @ gram)) @ x
    return x.mT if transposed else x
