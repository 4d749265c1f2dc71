"""The generated code users read: attention under every loop type (issue #6 §5).

Checks the module has none of the known readability defects, and that the
copy under docs/generated/ is exactly what pallasite generates today.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import pallasite
import pallasite.language as hl
from examples.attention import attention, example_inputs
from pallasite.plan.loops import STRATEGIES

DOCS = Path(__file__).resolve().parent.parent / "docs" / "generated"
CHIP = "v6e"


def attention_code(loop_type: str) -> str:
    config = pallasite.Config(block_sizes=[128, 128], pallas_loop_type=loop_type)
    return attention.bind(example_inputs(causal=True)).to_code(config, chip=CHIP)


@pytest.mark.parametrize("loop_type", list(STRATEGIES))
def test_attention_code_has_no_readability_defects(loop_type):
    code = attention_code(loop_type)
    kernel = code[code.index("def attention_kernel"):code.index("\ndef attention(")]
    # Temporaries named after ops where the user's names or an inline expression would do.
    assert not re.search(r"\b(getitem|sub|mul|div|to|permute|amax|sum)(_\d+)?\s*=", kernel)
    # Zeros spelled as a fill of 0.
    assert not re.search(r"jnp\.full\([^)]*\), 0, ", kernel)
    # Redundant copies `acc_1 = acc` before a loop.
    assert not re.search(r"^\s*(\w+)_\d+ = \1\s*$", kernel, re.M)
    # Tile attributes that nothing reads.
    for name in re.findall(r"^\s*(tile_\w+_(?:begin|end|index|id|count)) =", kernel, re.M):
        assert len(re.findall(rf"\b{name}\b", kernel)) > 1, name
    # One iota per range condition, "1 steps", an empty header note.
    assert all(line.count("broadcasted_iota") <= 1 for line in kernel.splitlines())
    assert "1 steps" not in code
    assert re.search(r"^# Chip: TPU \S+$", code, re.M)


def test_docs_generated_attention_is_current():
    """docs/generated/attention_fori_loop.py is what pallasite generates (regenerate with
    `python docs/generated/regenerate.py` after a codegen change)."""
    expected = attention_code("fori_loop")
    assert (DOCS / "attention_fori_loop.py").read_text() == expected, (
        "docs/generated/attention_fori_loop.py is stale: run python docs/generated/regenerate.py")



@pytest.mark.parametrize("loop_type", list(STRATEGIES))
def test_every_device_line_of_the_user_is_quoted_in_the_kernel(loop_type):
    """Each line of the kernel's device code is quoted above the code it became — also a
    line whose code all folded away (the grid loop's `for`, whose tile attributes nothing
    reads): the tree once dropped its quote with the dropped bindings."""
    import inspect

    from examples import matmul as example

    config = pallasite.Config(block_sizes=[128, 128, 128], pallas_loop_type=loop_type)
    code = example.matmul.bind(example.example_inputs()).to_code(config, chip=CHIP)
    kernel = code[code.index("def matmul_kernel"):code.index("\ndef matmul(")]
    lines, first = inspect.getsourcelines(example.matmul.fn)
    body = lines[next(i for i, line in enumerate(lines) if "hl.tile([m, n])" in line):]
    for offset, line in enumerate(body):
        if line.strip() and not line.strip().startswith("return"):
            number = first + len(lines) - len(body) + offset
            assert f"# matmul.py:{number}: {line.strip()}" in kernel, line


@pallasite.kernel
def row_sums(x):
    b, m, n = x.size()
    out = torch.empty([b, n], dtype=torch.float32, device=x.device)
    for g in hl.grid(b):
        out[g, :] = x[g, :, :].sum(0)
    return out


def test_a_row_chosen_by_the_grid_is_squeezed_out_of_the_block():
    """Each program writes one row of `out`. Mosaic cannot squeeze a block's
    second-to-last dim of an [R, n] array, so the plan views `out` as [R, 1, n]; the
    unit axis is squeezed too (its array dim is 1), so the kernel ref is just the row:
    no `(1, n)` block that the body broadcasts its value into."""
    x = torch.randn(3, 16, 256, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(row_sums(x), x.sum(1), atol=1e-5, rtol=1e-5)
    (call,) = row_sums.bind((x,)).plan().calls
    (out,) = call.outputs
    assert out.view_shape == (3, 1, 256)
    assert out.block_shape == (None, None, 256)
    code = row_sums.bind((x,)).to_code(chip=CHIP)
    assert "pl.BlockSpec((pl.Squeezed(), pl.Squeezed(), 256), lambda i0: (i0, 0, 0)),  # out" in code
    kernel = code[code.index("def row_sums_kernel"):code.index("\ndef row_sums(")]
    assert "out_ref[...] = jnp.sum(x, axis=0)" in kernel
    assert "(1, 256)" not in kernel
