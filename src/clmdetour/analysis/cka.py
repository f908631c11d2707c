"""Linear centered kernel alignment (CKA) between two representations.

Kornblith, Norouzi, Lee and Hinton (2019), "Similarity of Neural Network
Representations Revisited" (ICML), eq. (5)/(6): for representations
``X`` (n, p1) and ``Y`` (n, p2) of the same ``n`` examples, with every column
centered,

    CKA(X, Y) = ||Y^T X||_F^2 / (||X^T X||_F * ||Y^T Y||_F)

It equals HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L)) with linear kernels
``K = X X^T``, ``L = Y Y^T``; it is 1 for identical representations and is
invariant to orthogonal transforms and isotropic scaling of either one (not
to arbitrary invertible linear maps).

Here an "example" is one token position, so ``n`` is large (tokens of many
sequences) while ``p`` is the hidden size. ``LinearCKA`` accumulates the three
centered cross-product matrices (p x p) batch by batch, so the hidden states
of all tokens never need to be held at once; batches are merged with the
pairwise update of Chan, Golub and LeVeque (1979) for co-moments, which stays
accurate when the features have large means (as transformer hidden states do).
"""

from __future__ import annotations

import torch

__all__ = ["LinearCKA", "linear_cka"]


def _as_2d_float64(name: str, a: torch.Tensor) -> torch.Tensor:
    if not isinstance(a, torch.Tensor):
        a = torch.as_tensor(a)
    if a.dim() != 2:
        raise ValueError(f"{name} must be 2-D (examples, features), got shape {tuple(a.shape)}")
    return a.detach().to(device="cpu", dtype=torch.float64)


def _cka_from_comoments(cxx: torch.Tensor, cyy: torch.Tensor, cyx: torch.Tensor) -> float:
    denom = torch.linalg.matrix_norm(cxx) * torch.linalg.matrix_norm(cyy)
    if denom == 0:
        raise ValueError("CKA is undefined: a representation is constant over the examples (zero variance)")
    return float(torch.linalg.matrix_norm(cyx) ** 2 / denom)


def linear_cka(x: torch.Tensor, y: torch.Tensor) -> float:
    """Linear CKA of two representations of the same examples (Kornblith et al. 2019, eq. 5).

    Args:
        x: (n, p1) representation, one row per example (any float dtype; computed in float64).
        y: (n, p2) representation of the same ``n`` examples, in the same order.

    Returns:
        CKA in [0, 1]; 1.0 when ``y`` is an orthogonal transform and/or isotropic
        scaling of ``x`` (up to a constant shift).

    Raises:
        ValueError: not 2-D, different numbers of rows, fewer than 2 rows, or a
            representation with zero variance.
    """
    x = _as_2d_float64("x", x)
    y = _as_2d_float64("y", y)
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x and y must have the same number of examples, got {x.shape[0]} and {y.shape[0]}")
    if x.shape[0] < 2:
        raise ValueError(f"CKA needs at least 2 examples, got {x.shape[0]}")
    x = x - x.mean(dim=0, keepdim=True)
    y = y - y.mean(dim=0, keepdim=True)
    return _cka_from_comoments(x.T @ x, y.T @ y, y.T @ x)


class LinearCKA:
    """Streaming linear CKA: feed batches of paired rows, read the CKA of all rows seen.

    Keeps the example count, the feature means and the centered co-moment
    matrices ``Cxx`` (p1, p1), ``Cyy`` (p2, p2) and ``Cyx`` (p2, p1) in float64
    (memory ``8 * (p1 + p2)^2`` bytes). ``value()`` equals ``linear_cka`` on the
    concatenation of every batch.
    """

    def __init__(self) -> None:
        self.n = 0
        self._mx: torch.Tensor | None = None
        self._my: torch.Tensor | None = None
        self._cxx: torch.Tensor | None = None
        self._cyy: torch.Tensor | None = None
        self._cyx: torch.Tensor | None = None

    def update(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """Add a batch of paired examples.

        Args:
            x: (b, p1) rows of the first representation.
            y: (b, p2) rows of the second representation for the same examples.

        Raises:
            ValueError: shapes disagree with each other or with earlier batches.
        """
        x = _as_2d_float64("x", x)
        y = _as_2d_float64("y", y)
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"x and y must have the same number of rows, got {x.shape[0]} and {y.shape[0]}")
        b = x.shape[0]
        if b == 0:
            return
        mx_b = x.mean(dim=0)
        my_b = y.mean(dim=0)
        xc = x - mx_b
        yc = y - my_b
        cxx_b, cyy_b, cyx_b = xc.T @ xc, yc.T @ yc, yc.T @ xc
        if self._mx is None:
            self.n, self._mx, self._my = b, mx_b, my_b
            self._cxx, self._cyy, self._cyx = cxx_b, cyy_b, cyx_b
            return
        if x.shape[1] != self._mx.shape[0] or y.shape[1] != self._my.shape[0]:
            raise ValueError(
                f"feature sizes changed between batches: got ({x.shape[1]}, {y.shape[1]}), "
                f"expected ({self._mx.shape[0]}, {self._my.shape[0]})")
        n_a, n = self.n, self.n + b
        dx = mx_b - self._mx
        dy = my_b - self._my
        w = n_a * b / n
        self._cxx += cxx_b + w * torch.outer(dx, dx)
        self._cyy += cyy_b + w * torch.outer(dy, dy)
        self._cyx += cyx_b + w * torch.outer(dy, dx)
        self._mx += dx * (b / n)
        self._my += dy * (b / n)
        self.n = n

    def value(self) -> float:
        """CKA of all rows added so far.

        Raises:
            ValueError: fewer than 2 rows were added, or a representation has zero variance.
        """
        if self.n < 2:
            raise ValueError(f"CKA needs at least 2 examples, got {self.n}")
        return _cka_from_comoments(self._cxx, self._cyy, self._cyx)
