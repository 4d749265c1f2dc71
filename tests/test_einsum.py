"""torch.einsum for the contractions matmul/bmm/mm cover, recorded as those ops.

The equation is mapped once (`ir/ops/shapes.py:einsum_plan`) onto one `matmul` with
permutes of its operands and product: 'ik,kj->ij', 'bik,bkj->bij', 'ij,kj->ik' (the
transposed rhs), 'ki,kj->ij', 'ik,kj->ji' (a transposed product), implicit outputs.
Any other equation is an error naming it. Products accumulate in float32 as matmul's do
(the mask planner zeroes a partial contracted tile like any matmul's).
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.ir import walk_nodes
from pallasite.ir.ops.shapes import einsum_plan
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import code_and_output, run_ref


def _tolerance(dtype):
    return {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 5e-2, "rtol": 2e-2}


def _input(shape, dtype, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pallasite.kernel
def einsum_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The classic tiled matmul with einsum in the inner loop (K = 200: a partial K tile)."""
    m, k = a.size()
    _, n = b.size()
    out = torch.empty([m, n], dtype=a.dtype)
    for tile_m, tile_n in hl.tile([m, n], block_size=[16, 128]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k, block_size=128):
            acc = acc + torch.einsum("ik,kj->ij", a[tile_m, tile_k], b[tile_k, tile_n])
        out[tile_m, tile_n] = acc.to(a.dtype)
    return out


@pytest.mark.parametrize("loop_type, dtype", [*((loop_type, torch.float32) for loop_type in LOOP_TYPES),
                                               (LOOP_TYPES[0], torch.bfloat16)], ids=str)
def test_einsum_matmul_in_an_inner_loop(loop_type, dtype):
    a, b = _input((24, 200), dtype, 1), _input((200, 256), dtype, 2)
    _, out = code_and_output(einsum_matmul, (a, b), pallas_loop_type=loop_type)
    # each chunk's einsum has the factors' dtype (rounded once per chunk, as torch does)
    chunks = [(a[:, j:j + 128].float() @ b[j:j + 128].float()).to(dtype).float() for j in (0, 128)]
    expected = (chunks[0] + chunks[1]).to(dtype)
    torch.testing.assert_close(out, expected, **_tolerance(dtype))
    torch.testing.assert_close(out, run_ref(einsum_matmul, (a, b)), **_tolerance(dtype))


@pallasite.kernel
def einsum_forms(a: torch.Tensor, b: torch.Tensor, bt: torch.Tensor, at: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    m, k = a.size()
    n = b.size(1)
    plain = torch.empty([m, n])
    transposed_rhs = torch.empty([m, n])
    transposed_lhs = torch.empty([m, n])
    transposed_out = torch.empty([n, m])
    for tile_m in hl.tile(m, block_size=16):
        x, y, yt, xt = a[tile_m, :], b[:, :], bt[:, :], at[:, tile_m]
        plain[tile_m, :] = torch.einsum("mk,kn", x, y)  # implicit output: 'mn'
        transposed_rhs[tile_m, :] = torch.einsum("ij,kj->ik", x, yt)
        transposed_lhs[tile_m, :] = torch.einsum("ki,kj->ij", xt, y)
        transposed_out[:, tile_m] = torch.einsum("ik,kj->ji", [x, y])
    return plain, transposed_rhs, transposed_lhs, transposed_out


def test_einsum_with_transposes_and_implicit_output():
    a, b = _input((32, 64), torch.float32, 3), _input((64, 128), torch.float32, 4)
    args = (a, b, b.t().contiguous(), a.t().contiguous())
    expected = a @ b
    _, outs = code_and_output(einsum_forms, args)
    for out, ref, want in zip(outs, run_ref(einsum_forms, args), (expected, expected, expected, expected.t())):
        torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(ref, want, atol=1e-4, rtol=1e-4)
    (call,) = einsum_forms.bind(args).plan().calls
    ops = [node.op for node in walk_nodes(call.call.loop.body)]
    assert ops.count("matmul") == 4 and ops.count("permute") == 3  # rhs, lhs, product


@pallasite.kernel
def einsum_batched(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Attention scores per head: 'bqd,bkd->bqk' (a batched matmul with a transposed rhs)."""
    b, s, d = q.size()
    out = torch.empty([b, s, s], dtype=torch.float32)
    for tile_b, tile_q in hl.tile([b, s], block_size=[2, 8]):
        out[tile_b, tile_q, :] = torch.einsum("bqd,bkd->bqk", q[tile_b, tile_q, :], k[tile_b, :, :])
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_einsum_batched_with_a_transposed_rhs(dtype):
    q, k = _input((3, 16, 128), dtype, 5), _input((3, 16, 128), dtype, 6)
    _, out = code_and_output(einsum_batched, (q, k))
    expected = torch.einsum("bqd,bkd->bqk", q.float(), k.float())
    torch.testing.assert_close(out, expected, **_tolerance(dtype))
    torch.testing.assert_close(out, run_ref(einsum_batched, (q, k)), **_tolerance(dtype))


@pytest.mark.parametrize("equation, ranks, plan", [
    ("ik,kj->ij", (2, 2), ((0, 1), (0, 1), (0, 1))),
    ("ij,kj->ik", (2, 2), ((0, 1), (1, 0), (0, 1))),
    ("bik,bkj->bij", (3, 3), ((0, 1, 2), (0, 1, 2), (0, 1, 2))),
    ("ik,kj->ji", (2, 2), ((0, 1), (0, 1), (1, 0))),
    ("kb i, bkj -> bij", (3, 3), ((1, 2, 0), (0, 1, 2), (0, 1, 2))),
])
def test_einsum_plans(equation, ranks, plan):
    assert einsum_plan(equation, ranks) == plan


@pytest.mark.parametrize("equation, ranks, why", [
    ("ij,ij->i", (2, 2), "no free letter (a dot product per batch letter)"),
    ("ij,jk,kl->il", (2, 2, 2), "3 operand"),
    ("ii,ij->ij", (2, 2), "repeated letter"),
    ("...ik,...kj->...ij", (3, 3), "'...'"),
    ("abik,abkj->abij", (4, 4), "2 batch letters"),
    ("ijk,jk->i", (3, 2), "2 contracted letters"),
])
def test_other_equations_are_refused_naming_them(equation, ranks, why):
    with pytest.raises(exc.UnsupportedOperation, match="torch.einsum") as info:
        einsum_plan(equation, ranks)
    assert repr(equation) in str(info.value) and why in str(info.value)


@pallasite.kernel
def einsum_rowwise_dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    m, k = a.size()
    out = torch.empty([m])
    for tile_m in hl.tile(m, block_size=8):
        out[tile_m] = torch.einsum("ij,ij->i", a[tile_m, :], b[tile_m, :])
    return out


def test_a_refused_equation_names_the_line():
    a = torch.randn(16, 128)
    with pytest.raises(exc.UnsupportedOperation, match=r"torch.einsum\('ij,ij->i'\)") as info:
        einsum_rowwise_dot(a, a)
    assert 'torch.einsum("ij,ij->i", a[tile_m, :], b[tile_m, :])' in str(info.value)
