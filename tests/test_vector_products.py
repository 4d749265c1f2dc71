"""matrix @ vector and vector @ matrix over an inner loop whose last tile is partial. The
vector's padding was not masked (`ContractionDef.contracted_axes` reported no contracted axis
for a 1-D rhs): under `unroll` and `outer_pipeline`, where the block's tail is whatever the
buffer held (NaN in interpret mode), x @ w was NaN with no error (a trial's finding)."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.config import FOLDED_LOOP_TYPE
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


@pallasite.kernel
def matvec(x, w):
    m, k = x.size()
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        for tk in hl.tile(k):
            acc = acc + torch.matmul(x[tm, tk], w[tk])
        out[tm] = acc
    return out


@pallasite.kernel
def vecmat(v, x):
    k, n = x.size()
    out = torch.empty([n], dtype=torch.float32, device=x.device)
    for tn in hl.tile(n):
        acc = hl.zeros([tn], dtype=torch.float32)
        for tk in hl.tile(k):
            acc = acc + v[tk] @ x[tk, tn]
        out[tn] = acc
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("loop_type", [*LOOP_TYPES, FOLDED_LOOP_TYPE])
def test_a_matrix_vector_product_over_a_partial_tile_masks_the_vectors_padding(loop_type, dtype):
    x, w = torch.randn(11, 70).to(dtype), torch.randn(70).to(dtype)
    config = {"block_sizes": [8, 32], "pallas_loop_type": loop_type}
    expected = x.float() @ w.float()
    tolerance = {"rtol": 2e-2, "atol": 5e-2} if dtype == torch.bfloat16 else {"rtol": 1e-5, "atol": 1e-5}
    _, out = code_and_output(matvec, (x, w), **config)
    torch.testing.assert_close(out, expected, **tolerance)
    torch.testing.assert_close(run_ref(matvec, (x, w), **config), expected, **tolerance)


@pytest.mark.parametrize("loop_type", [*LOOP_TYPES, FOLDED_LOOP_TYPE])
def test_a_vector_matrix_product_over_a_partial_tile(loop_type):
    v, x = torch.randn(70), torch.randn(70, 20)
    config = {"block_sizes": [8, 32], "pallas_loop_type": loop_type}
    _, out = code_and_output(vecmat, (v, x), **config)
    torch.testing.assert_close(out, v @ x, rtol=1e-5, atol=1e-5)


@pallasite.kernel
def einsum_products(x, w, v):
    """torch.einsum's matrix-vector forms, the matrix read transposed too."""
    m, k = x.size()
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        for tk in hl.tile(k):
            acc = acc + torch.einsum("mk,k->m", x[tm, tk], w[tk])
            acc = acc + torch.einsum("k,mk->m", v[tk], x[tm, tk]) * 0.5
        out[tm] = acc
    return out


@pytest.mark.parametrize("loop_type", [*LOOP_TYPES, FOLDED_LOOP_TYPE])
def test_einsum_matrix_vector_forms_over_a_partial_tile(loop_type):
    x, w, v = torch.randn(11, 70), torch.randn(70), torch.randn(70)
    config = {"block_sizes": [8, 32], "pallas_loop_type": loop_type}
    expected = torch.einsum("mk,k->m", x, w) + 0.5 * torch.einsum("k,mk->m", v, x)
    _, out = code_and_output(einsum_products, (x, w, v), **config)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(run_ref(einsum_products, (x, w, v), **config), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("equation, why", [("k,k->", r"no free letter \(a dot product\)"), ("bmk,bk->bm", "batch letter beside a vector")])
def test_einsum_forms_without_a_matmul_are_refused(equation, why):
    from pallasite import exc
    from pallasite.ir.ops.shapes import einsum_plan

    ranks = tuple(len(side) for side in equation.split("->")[0].split(","))
    with pytest.raises(exc.UnsupportedOperation, match=why):
        einsum_plan(equation, ranks)
