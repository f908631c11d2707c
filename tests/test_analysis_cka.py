"""Linear CKA (Kornblith et al. 2019): identities, invariances and the streaming accumulator."""

import pytest
import torch

from clmdetour.analysis.cka import LinearCKA, linear_cka

torch.set_num_threads(1)


def _rand(n, p, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, p, generator=g, dtype=torch.float64)


def _cka_hsic(x, y):
    """Kernel form: HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L)), K = XX^T, H = I - 11^T/n (paper eq. 3-4)."""
    n = x.shape[0]
    h = torch.eye(n, dtype=torch.float64) - 1.0 / n
    k, l = x @ x.T, y @ y.T
    hsic = lambda a, b: torch.trace(a @ h @ b @ h)
    return float(hsic(k, l) / torch.sqrt(hsic(k, k) * hsic(l, l)))


def test_cka_with_itself_is_one():
    x = _rand(200, 16)
    assert linear_cka(x, x) == pytest.approx(1.0, abs=1e-12)


def test_cka_invariant_to_orthogonal_transform_and_isotropic_scaling():
    x = _rand(300, 12)
    q, _ = torch.linalg.qr(_rand(12, 12, seed=1))
    assert torch.allclose(q.T @ q, torch.eye(12, dtype=torch.float64), atol=1e-12)
    y = _rand(300, 8, seed=2)
    base = linear_cka(x, y)
    assert linear_cka(x @ q, y) == pytest.approx(base, abs=1e-10)
    assert linear_cka(7.5 * x, y) == pytest.approx(base, abs=1e-10)
    assert linear_cka(x, 0.01 * y) == pytest.approx(base, abs=1e-10)
    assert linear_cka(x, 3.0 * (x @ q) + 5.0) == pytest.approx(1.0, abs=1e-10)  # plus a constant shift


def test_cka_not_invariant_to_anisotropic_scaling():
    x = _rand(300, 6)
    d = torch.diag(torch.tensor([10.0, 1.0, 1.0, 1.0, 1.0, 0.1], dtype=torch.float64))
    assert linear_cka(x, x @ d) < 0.9


def test_cka_matches_kernel_formulation_and_independent_data_is_low():
    x, y = _rand(120, 10), _rand(120, 7, seed=3)
    y_mixed = y + 0.5 * x[:, :7]
    assert linear_cka(x, y_mixed) == pytest.approx(_cka_hsic(x, y_mixed), rel=1e-9)
    assert linear_cka(_rand(5000, 8), _rand(5000, 8, seed=9)) < 0.02


def test_streaming_accumulator_equals_one_shot():
    x = _rand(257, 9) + 100.0  # large feature means: the pairwise update must stay accurate
    y = torch.tanh(x @ _rand(9, 5, seed=4) / 50.0)
    acc = LinearCKA()
    for start in range(0, 257, 40):
        acc.update(x[start:start + 40].float(), y[start:start + 40].float())
    assert acc.n == 257
    assert acc.value() == pytest.approx(linear_cka(x.float(), y.float()), rel=1e-9)


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="same number of examples"):
        linear_cka(_rand(10, 3), _rand(11, 3))
    with pytest.raises(ValueError, match="2-D"):
        linear_cka(torch.zeros(10), torch.zeros(10))
    with pytest.raises(ValueError, match="zero variance"):
        linear_cka(torch.ones(10, 3), _rand(10, 3))
    with pytest.raises(ValueError, match="at least 2"):
        LinearCKA().value()
    acc = LinearCKA()
    acc.update(_rand(5, 3), _rand(5, 2))
    with pytest.raises(ValueError, match="feature sizes changed"):
        acc.update(_rand(5, 4), _rand(5, 2))
