"""`pallas_loop_type="compact_worklist"` (Helion's name): the q loop of a grid over jagged
segments runs as the items of a flattened worklist (plan/worklists.py), the items' tiles as
the default loop type, and its inner loops as the config's list says; a kernel without that
shape, or pallas_flatten_worklist=False beside it, is InvalidConfig at the loop."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref

from examples.jagged_attention import jagged_attention, reference as causal_reference
from test_worklists import LENGTHS, offsets_of, plan_of, qkv


@pytest.mark.parametrize("inner", LOOP_TYPES)
def test_compact_worklist_with_each_inner_loop_type(inner):
    q, k, v = qkv(sum(LENGTHS), 64)
    offsets = offsets_of(LENGTHS)
    config = dict(block_sizes=[8, 8], pallas_loop_type=["compact_worklist", inner])
    code, out = code_and_output(jagged_attention, (q, k, v, offsets), **config)
    torch.testing.assert_close(out, causal_reference(q, k, v, offsets), atol=1e-4, rtol=1e-4)
    assert plan_of(jagged_attention, (q, k, v, offsets), **config).worklist is not None
    assert "work_owner" in code
    torch.testing.assert_close(run_ref(jagged_attention, (q, k, v, offsets), **config), out, atol=1e-5, rtol=1e-5)
    check_tpu_lowering(jagged_attention, (q, k, v, offsets), **config)


@pallasite.kernel
def jagged_double(x, offsets):
    out = torch.zeros_like(x)
    for g in hl.grid(offsets.size(0) - 1):
        for tq in hl.tile(offsets[g], offsets[g + 1]):
            out[tq, :] = x[tq, :] * 2
    return out


@pallasite.kernel
def plain_add(x, y):
    out = torch.empty_like(x)
    for tile in hl.tile(out.size()):
        out[tile] = x[tile] + y[tile]
    return out


@pallasite.kernel
def segment_sums(x, offsets):
    """Carries a sum over the q tiles: items would split it, so it cannot flatten."""
    out = torch.zeros([offsets.size(0) - 1, x.size(1)], dtype=x.dtype, device=x.device)
    for g in hl.grid(offsets.size(0) - 1):
        acc = hl.zeros([x.size(1)], dtype=torch.float32)
        for tq in hl.tile(offsets[g], offsets[g + 1]):
            acc = acc + x[tq, :].sum(0)
        out[g, :] = acc
    return out


def test_a_single_compact_loop_runs_flattened():
    x, offsets = torch.randn(46, 128), offsets_of(LENGTHS)
    _, out = code_and_output(jagged_double, (x, offsets), block_sizes=[8], pallas_loop_type="compact_worklist")
    torch.testing.assert_close(out, x * 2)


@pytest.mark.parametrize("kernel, args, config, why", [
    (plain_add, (torch.randn(64, 64), torch.randn(64, 64)), {"block_sizes": [16, 16]}, "has no q loop"),
    (jagged_double, (torch.randn(46, 128), offsets_of(LENGTHS)), {"block_sizes": [8], "pallas_flatten_worklist": False},
     r"pallas_flatten_worklist=False"),
    (segment_sums, (torch.randn(46, 128), offsets_of(LENGTHS)), {"block_sizes": [8]}, "carries values"),
])
def test_compact_worklist_where_the_kernel_cannot_flatten_is_invalid(kernel, args, config, why):
    with pytest.raises(exc.InvalidConfig, match=f"compact_worklist.*{why}"):
        code_and_output(kernel, args, pallas_loop_type="compact_worklist", **config)
    declared = pallasite.kernel(config={**config, "pallas_loop_type": "compact_worklist"})(kernel.fn)
    with pytest.raises(exc.InvalidConfig, match=why):  # Helion's spelling of the same question
        declared.bind(args).ensure_config_exists(args)


def test_one_compact_worklist_name_for_every_inner_loop():
    """A string names every inner loop: the q loop flattens, the key loop inside it runs as
    the default type (a trial found it refused for the key loop)."""
    q, k, v = qkv(sum(LENGTHS), 64)
    offsets = offsets_of(LENGTHS)
    config = dict(block_sizes=[8, 8], pallas_loop_type="compact_worklist")
    _, out = code_and_output(jagged_attention, (q, k, v, offsets), **config)
    torch.testing.assert_close(out, causal_reference(q, k, v, offsets), atol=1e-4, rtol=1e-4)
    assert plan_of(jagged_attention, (q, k, v, offsets), **config).worklist is not None
