"""Every inner-loop example under every loop strategy: matches torch and lowers to Mosaic.

Each case runs an example kernel (examples/*.py) with the example's own block
sizes and one `pallas_loop_type`, compares it with the example's torch
reference at the example's tolerance, checks that the plan lowers every inner
loop with the requested strategy (no silent fallback), and lowers the kernel
to Mosaic for v5e, v6e and v7x.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Callable

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan.loops import LOOP_TYPES, STRATEGIES, LoopStrategy, loop_types
from pallasite.testing import check_tpu_lowering, code_and_output


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_every_strategy_states_every_fact(loop_type):
    """The base class gives no fact a default: each strategy's own class states each one, so
    the fuzzer, the cost model, the VMEM advice and the tests never assume one for a new
    strategy (tests take their loop types from the registry: `LOOP_TYPES`, `loop_types`)."""
    strategy = STRATEGIES[loop_type]
    assert strategy.name == loop_type
    stated = {fact for cls in type(strategy).__mro__ if cls is not LoopStrategy for fact in vars(cls)}
    assert set(LoopStrategy.FACTS) <= stated
    assert not set(LoopStrategy.FACTS) & set(vars(LoopStrategy))


def test_the_registry_filters_loop_types_by_fact():
    assert set(loop_types(streams=True)) | set(loop_types(streams=False)) == set(LOOP_TYPES)
    assert set(loop_types(copies_unaligned_windows=True)) <= set(loop_types(streams=True))
    with pytest.raises(ValueError, match="not a loop strategy fact"):
        loop_types(stream=True)


@dataclass(frozen=True)
class Case:
    """One example kernel with one set of its inputs."""

    example: str
    inputs: Callable[[ModuleType], tuple] = lambda module: module.example_inputs()
    label: str = ""

    @property
    def id(self) -> str:
        return f"{self.example}-{self.label}" if self.label else self.example


def _attention_case(dtype: torch.dtype, head_dim: int, causal: bool) -> Case:
    label = f"{str(dtype).removeprefix('torch.')}-d{head_dim}-{'causal' if causal else 'dense'}"
    return Case("attention", lambda module: module.example_inputs(dtype, head_dim, causal), label)


CASES = [
    Case("matmul"),  # bf16 in, f32 accumulation, K = 320 with 128-wide K tiles
    Case("bmm"),
    *(
        _attention_case(dtype, head_dim, causal)
        for dtype in (torch.bfloat16, torch.float32)
        for head_dim in (64, 128, 256)
        for causal in (False, True)
    ),
    Case("jagged_sum"),  # unaligned offsets and an empty segment
    Case("centering"),  # two sibling inner loops
]


def _load(case: Case) -> tuple[ModuleType, pallasite.Kernel, tuple]:
    module = importlib.import_module(f"examples.{case.example}")
    return module, getattr(module, case.example), case.inputs(module)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_example_matches_torch(case: Case, loop_type: str) -> None:
    module, kernel, inputs = _load(case)
    _, result = code_and_output(kernel, inputs, block_sizes=module.BLOCK_SIZES,
                                pallas_loop_type=loop_type)
    atol, rtol = module.TOLERANCES[inputs[0].dtype]
    torch.testing.assert_close(result, module.reference(*inputs), atol=atol, rtol=rtol)

    config = pallasite.Config(block_sizes=module.BLOCK_SIZES, pallas_loop_type=loop_type)
    plan = kernel.bind(inputs).plan(config)
    strategies = [loop.strategy for call in plan.calls for loop in call.inner_loops.values()]
    assert strategies and set(strategies) == {loop_type}


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_example_lowers_to_mosaic(case: Case, loop_type: str) -> None:
    module, kernel, inputs = _load(case)
    codes = check_tpu_lowering(kernel, inputs, block_sizes=module.BLOCK_SIZES,
                               pallas_loop_type=loop_type)
    assert set(codes) == {"v5e", "v6e", "v7x"}


@pallasite.kernel
def rows_scaled_by_table(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    m, k = x.size()
    sums = torch.empty([m], dtype=torch.float32)
    for tm in hl.tile(m):
        acc = hl.zeros([tm], dtype=torch.float32)
        for tk in hl.tile(k):
            acc = acc + x[tm, tk].sum(-1) * table[tm.id, 0]
        sums[tm] = acc
    return sums


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_grid_tile_id_read_inside_an_inner_loop(loop_type):
    """Inside pltpu.emit_pipeline, pl.program_id is the pipeline's step: the grid's id is
    read at the kernel's top (this once returned the wrong rows' table entries)."""
    x = torch.randn(64, 512)
    table = torch.arange(8, dtype=torch.float32)[:, None].repeat(1, 4)
    _, result = code_and_output(rows_scaled_by_table, (x, table), block_sizes=[8, 128],
                                pallas_loop_type=loop_type)
    expected = x.sum(-1) * torch.arange(8).repeat_interleave(8)
    torch.testing.assert_close(result, expected, atol=1e-4, rtol=1e-4)
