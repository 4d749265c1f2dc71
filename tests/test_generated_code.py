"""The generated code users read: attention under every loop type (issue #6 §5).

Checks the module has none of the known readability defects, and that the
copy under docs/generated/ is exactly what pallasite generates today.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import pallasite
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
