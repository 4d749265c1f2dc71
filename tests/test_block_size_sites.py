"""Helion counts a config's block sizes per source site: a host loop that traces one
hl.tile line again (`for layer in range(n): for tm in hl.tile(m)`, decode stacks) gives
that line one size. pallasite numbers a slot per traced loop and takes both lists: one
size per slot, or one per site (`ConfigSpec.normalize` spreads it over the site's slots)."""
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
def layered_matmuls(x, w):
    """x @ w[i] summed over the layers; each layer traces the same two hl.tile lines."""
    m, k = x.shape
    n = w.size(2)
    out = torch.zeros([m, n], dtype=torch.float32, device=x.device)
    for i in range(w.size(0)):
        for tm, tn in hl.tile([m, n]):
            acc = hl.zeros([tm, tn], dtype=torch.float32)
            for tk in hl.tile(k):
                acc = torch.addmm(acc, x[tm, tk], w[i, tk, tn])
            out[tm, tn] = out[tm, tn] + acc
    return out


def _args():
    generator = torch.Generator().manual_seed(0)
    return torch.randn(24, 200, generator=generator), torch.randn(3, 200, 136, generator=generator) * 0.1


@pytest.mark.parametrize("loop_type", [*LOOP_TYPES, FOLDED_LOOP_TYPE])
def test_one_block_size_per_site_spreads_over_the_layers(loop_type):
    x, w = _args()
    expected = sum(x @ w[i] for i in range(3))
    config = {"block_sizes": [8, 128, 64], "pallas_loop_type": loop_type}
    bound = layered_matmuls.bind((x, w))
    assert bound.resolve_config(config).block_sizes == [8, 128, 64] * 3
    _, out = code_and_output(layered_matmuls, (x, w), **config)
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(run_ref(layered_matmuls, (x, w), **config), expected, atol=1e-4, rtol=1e-4)
    check_tpu_lowering(layered_matmuls, (x, w), **config)


def test_one_block_size_per_slot_still_chooses_each_layers():
    x, w = _args()
    per_slot = [8, 128, 64, 16, 128, 128, 8, 256, 64]
    _, out = code_and_output(layered_matmuls, (x, w), block_sizes=per_slot)
    torch.testing.assert_close(out, sum(x @ w[i] for i in range(3)), atol=1e-4, rtol=1e-4)
    # 256 over n = 136 is one tile: clamped to the smallest legal block covering the dim
    clamped = [8, 128, 64, 16, 128, 128, 8, 136, 64]
    assert layered_matmuls.bind((x, w)).resolve_config({"block_sizes": per_slot}).block_sizes == clamped


def test_a_count_of_neither_names_both():
    x, w = _args()
    with pytest.raises(exc.InvalidConfig, match=r"has 2 entries but the kernel has 9 tunable block sizes .*"
                                                r"from 3 hl.tile sites"):
        layered_matmuls.bind((x, w)).resolve_config({"block_sizes": [8, 128]})


@pallasite.kernel
def chained_layers(x):
    """Each layer allocates `out` and reads the previous layer's: two host tensors of one
    name in one kernel (the generated code named both `out_ref`: a SyntaxError)."""
    (m,) = x.shape
    h = x
    for _layer in range(3):
        out = torch.empty_like(x)
        for tm in hl.tile(m):
            out[tm] = h[tm] * 2.0 + 1.0
        h = out
    return h


@pytest.mark.parametrize("block_sizes", [[32], [32, 64, 16]])
def test_layers_that_chain_host_tensors_of_one_name(block_sizes):
    x = torch.randn(100)
    _, out = code_and_output(chained_layers, (x,), block_sizes=block_sizes)
    torch.testing.assert_close(out, ((x * 2 + 1) * 2 + 1) * 2 + 1)
    torch.testing.assert_close(run_ref(chained_layers, (x,), block_sizes=block_sizes), out)
    check_tpu_lowering(chained_layers, (x,), block_sizes=block_sizes)
