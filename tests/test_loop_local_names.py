"""A name an inner loop assigns before reading it, and that nothing reads after the loop,
is the body's own: it is not carried, so its shape may differ from the name's value
before the loop (Helion's decode layer reuses `s` for a normalised row in one loop and
for attention scores in a later one). A name read after the loop, or read in the body
before being assigned, is still carried and keeps its shape and dtype."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.config import FOLDED_LOOP_TYPE
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref


@pallasite.kernel(static_shapes=True)
def reused_name_across_loops(x, q, k):
    """`s` is a row of x in the first loop, attention scores in the second's inner loop."""
    m, h = x.shape
    rows = torch.empty_like(x)
    best = torch.empty([q.size(0)], dtype=torch.float32, device=x.device)
    for tm in hl.tile(m):
        s = x[tm, :].float()
        rows[tm, :] = s * torch.rsqrt(torch.mean(s * s, -1, keepdim=True) + 1e-6)
    for tq in hl.tile(q.size(0)):
        m_i = hl.full([tq], float("-inf"), dtype=torch.float32)
        for tk in hl.tile(k.size(0)):
            s = q[tq, :] @ k[tk, :].T
            m_i = torch.maximum(m_i, torch.amax(s, -1))
        best[tq] = m_i
    return rows, best


@pallasite.kernel(static_shapes=True)
def reused_name_in_one_loop(x, w):
    """`t` holds a [tm] sum before the inner loop and a [tm, tn] product in it."""
    m, k = x.shape
    out = torch.empty([m, w.size(1)], dtype=torch.float32, device=x.device)
    total = torch.empty([m], dtype=torch.float32, device=x.device)
    for tm in hl.tile(m):
        t = torch.sum(x[tm, :], -1)
        half = t * 0.5
        for tn in hl.tile(w.size(1)):
            t = x[tm, :] @ w[:, tn]
            out[tm, tn] = t * 2.0
        total[tm] = half
    return out, total


@pallasite.kernel(static_shapes=True)
def read_after_the_loop(x, w):
    m, k = x.shape
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    for tm in hl.tile(m):
        t = torch.sum(x[tm, :], -1)
        for tn in hl.tile(w.size(1)):
            t = x[tm, :] @ w[:, tn]
        out[tm] = t
    return out


@pallasite.kernel(static_shapes=True)
def read_on_the_next_outer_step(x, w):
    """`t` is read at the top of the outer loop's body: the next step sees the inner loop's."""
    m, k = x.shape
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    for tm in hl.tile(m):
        t = torch.sum(x[tm, :], -1)
        for tk in hl.tile(k):
            out[tm] = t
            for tn in hl.tile(w.size(1)):
                t = x[tm, :] @ w[:, tn]
    return out


def _args(generator_seed=0):
    generator = torch.Generator().manual_seed(generator_seed)
    return (torch.randn(24, 128, generator=generator), torch.randn(16, 128, generator=generator),
            torch.randn(40, 128, generator=generator))


def _expected_reused_across(x, q, k):
    rows = x * torch.rsqrt(torch.mean(x * x, -1, keepdim=True) + 1e-6)
    return rows, (q @ k.T).amax(-1)


@pytest.mark.parametrize("loop_type", [*LOOP_TYPES, FOLDED_LOOP_TYPE])
def test_a_name_assigned_first_in_an_inner_loop_is_not_carried(loop_type):
    args = _args()
    expected = _expected_reused_across(*args)
    config = {"block_sizes": [8, 8, 16], "pallas_loop_type": loop_type}
    _, out = code_and_output(reused_name_across_loops, args, **config)
    for got, want in zip(out, expected):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    for got, want in zip(run_ref(reused_name_across_loops, args, **config), expected):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    check_tpu_lowering(reused_name_across_loops, args, **config)


@pytest.mark.parametrize("loop_type", [*LOOP_TYPES, FOLDED_LOOP_TYPE])
def test_a_name_reused_with_another_shape_in_the_same_device_loop(loop_type):
    generator = torch.Generator().manual_seed(1)
    x, w = torch.randn(24, 64, generator=generator), torch.randn(64, 200, generator=generator)
    config = {"block_sizes": [8, 128], "pallas_loop_type": loop_type}
    _, (out, total) = code_and_output(reused_name_in_one_loop, (x, w), **config)
    torch.testing.assert_close(out, 2.0 * (x @ w), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(total, 0.5 * x.sum(-1), atol=1e-4, rtol=1e-4)
    ref_out, ref_total = run_ref(reused_name_in_one_loop, (x, w), **config)
    torch.testing.assert_close(ref_out, 2.0 * (x @ w), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ref_total, 0.5 * x.sum(-1), atol=1e-4, rtol=1e-4)
    check_tpu_lowering(reused_name_in_one_loop, (x, w), **config)


@pytest.mark.parametrize("kernel", [read_after_the_loop, read_on_the_next_outer_step])
def test_a_name_read_after_the_loop_is_still_carried(kernel):
    generator = torch.Generator().manual_seed(2)
    x, w = torch.randn(16, 64, generator=generator), torch.randn(64, 256, generator=generator)
    with pytest.raises(exc.ShapeMismatch, match="Loop-carried variable 't' is \\[8\\]"):
        code_and_output(kernel, (x, w), block_sizes=[8, 128] if kernel is read_after_the_loop else [8, 32, 128])
    with pytest.raises(exc.ShapeMismatch, match="Loop-carried variable 't'"):
        run_ref(kernel, (x, w), block_sizes=[8, 128] if kernel is read_after_the_loop else [8, 32, 128])
