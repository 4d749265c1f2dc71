"""Helion's atomics beyond `hl.atomic_add` (issue 22 §2): `atomic_and`, `atomic_or`,
`atomic_xor`, `atomic_max`, `atomic_min`, `atomic_xchg` and `atomic_cas`.

With tile, ':' and scalar indices every element belongs to the program owning its tiles,
so each atomic is a read-modify-write there (as `hl.atomic_add` is) returning the values
before it; a target combined across programs keeps one resident block, its grid axis in
sequence. Through an index tensor duplicates would race, which a TPU cannot do
atomically: an error names the atomic and says what to write.
"""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.plan.loops import LOOP_TYPES
from pallasite.plan.plans import BlockKind
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref

from plan_helpers import only_call


def _ints(*shape, seed=0, low=-(2**20), high=2**20):
    return torch.randint(low, high, shape, generator=torch.Generator().manual_seed(seed), dtype=torch.int32)


def _floats(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


# Each atomic with its torch meaning: (hl function, extra values, torch update of old)
UPDATES = {
    "and": (hl.atomic_and, lambda old, v: old & v),
    "or": (hl.atomic_or, lambda old, v: old | v),
    "xor": (hl.atomic_xor, lambda old, v: old ^ v),
    "max": (hl.atomic_max, torch.maximum),
    "min": (hl.atomic_min, torch.minimum),
    "xchg": (hl.atomic_xchg, lambda old, v: v),
}


def _updater(name):
    atomic = UPDATES[name][0]

    @pallasite.kernel(config=pallasite.Config(block_sizes=[64, 128]))
    def update(target, x):
        m, n = x.size()
        old = torch.empty_like(x)
        for tile_m, tile_n in hl.tile([m, n]):
            old[tile_m, tile_n] = atomic(target, [tile_m, tile_n], x[tile_m, tile_n], sem="acq_rel")
        return old
    return update


@pytest.mark.parametrize("name", UPDATES)
def test_each_atomic_updates_in_the_owning_program_and_returns_the_old_values(name):
    integer = name in ("and", "or", "xor")
    make = _ints if integer else _floats
    target, x = make(100, 256, seed=1), make(100, 256, seed=2)  # a partial row tile
    kernel = _updater(name)
    expected = UPDATES[name][1](target, x)
    compiled_target = target.clone()
    _, old = code_and_output(kernel, (compiled_target, x))
    assert torch.equal(compiled_target, expected) and torch.equal(old, target)
    ref_target = target.clone()
    assert torch.equal(run_ref(kernel, (ref_target, x)), target) and torch.equal(ref_target, expected)
    check_tpu_lowering(kernel, (target, x))


@pallasite.kernel(config=pallasite.Config(block_sizes=[64, 128]))
def compare_and_swap(target, expected, x):
    m, n = x.size()
    old = torch.empty_like(x)
    for tile_m, tile_n in hl.tile([m, n]):
        old[tile_m, tile_n] = hl.atomic_cas(target, [tile_m, tile_n], expected[tile_m, tile_n], x[tile_m, tile_n])
    return old


def test_atomic_cas_stores_where_the_old_value_equals_the_expected_one():
    target = _ints(100, 256, seed=1, low=0, high=4)
    expected, x = _ints(100, 256, seed=2, low=0, high=4), _ints(100, 256, seed=3)
    result = torch.where(target == expected, x, target)
    compiled_target = target.clone()
    _, old = code_and_output(compare_and_swap, (compiled_target, expected, x))
    assert torch.equal(compiled_target, result) and torch.equal(old, target)
    ref_target = target.clone()
    assert torch.equal(run_ref(compare_and_swap, (ref_target, expected, x)), target)
    assert torch.equal(ref_target, result)
    check_tpu_lowering(compare_and_swap, (target, expected, x))


@pallasite.kernel(config=pallasite.Config(block_sizes=[32, 128]))
def column_maxima(x):
    m, n = x.size()
    out = torch.full([n], float("-inf"), dtype=x.dtype, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        hl.atomic_max(out, [tile_n], x[tile_m, tile_n].amax(0))
    return out


def test_atomic_max_combines_across_programs_in_sequence():
    x = _floats(100, 384)
    _, result = code_and_output(column_maxima, (x,))
    assert torch.equal(result, x.amax(0))
    assert torch.equal(run_ref(column_maxima, (x,)), x.amax(0))
    call = only_call(column_maxima, (x,))
    (out,) = call.outputs
    assert out.axes[0].kind is BlockKind.RESIDENT
    check_tpu_lowering(column_maxima, (x,))


@pallasite.kernel(config=pallasite.Config(block_sizes=[64, 32]))
def flags_in_an_inner_loop(flags, x):
    m, k = x.size()
    for tile_m in hl.tile(m):
        for tile_k in hl.tile(k):
            hl.atomic_or(flags, [tile_m], (x[tile_m, tile_k] > 0).to(torch.int32).amax(1) << 1)
    return flags


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_atomic_or_in_an_inner_loop(loop_type):
    flags, x = _ints(100, seed=4, low=0, high=2), _floats(100, 96, seed=5) - 2.5
    expected = flags | ((x > 0).to(torch.int32).amax(1) << 1)
    compiled = flags.clone()
    code_and_output(flags_in_an_inner_loop, (compiled, x), pallas_loop_type=loop_type)
    assert torch.equal(compiled, expected)
    reference = flags.clone()
    run_ref(flags_in_an_inner_loop, (reference, x), pallas_loop_type=loop_type)
    assert torch.equal(reference, expected)


@pallasite.kernel(config=pallasite.Config(block_sizes=[64]))
def exchange_through_index(out, x, dest):
    for tile in hl.tile(x.size(0)):
        hl.atomic_xchg(out, [dest[tile]], x[tile])
    return out


def test_an_order_dependent_atomic_through_an_index_tensor_is_rejected_naming_it():
    args = (torch.zeros(16, dtype=torch.int32), _ints(64), _ints(64, low=0, high=16))
    for run in (lambda: code_and_output(exchange_through_index, args), lambda: run_ref(exchange_through_index, args)):
        with pytest.raises(exc.UnsupportedOperation) as info:
            run()
        message = str(info.value)
        assert "hl.atomic_xchg(out, [...], v) through an index tensor" in message
        assert "hl.atomic_xchg(out, [dest[tile]], x[tile])" in message
