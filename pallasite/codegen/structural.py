"""The kernel emitter's own lowering of the op registry's STRUCTURAL ops (tile begins,
ends, indices and counts, scalar arguments, subviews): each reads the emitter's state
(grid axes, loop counters), so none is a `RULES` entry of codegen/lowering.py."""
from __future__ import annotations

from typing import Any

import torch

from ..ir import Node
from .frames import tile_count
from .subviews import subview_text

KernelEmitter = Any  # codegen/kernel.py's, which imports these rules


def _tile_step(emitter: KernelEmitter, dim) -> str:
    """A grid tile counts steps with pl.program_id, an inner tile with its loop counter."""
    frame = emitter.frame_of(dim)
    if frame is None:
        axis = emitter.plan.grid_axis_of[dim.id]
        # inside pltpu.emit_pipeline, pl.program_id is the pipeline's own step
        return emitter.grid_ids[axis] if emitter.pipeline_depth else f"pl.program_id({axis})"
    return frame.counters[dim.id]


def _scalar_arg(emitter: KernelEmitter, node: Node) -> str:
    plan = emitter.plan
    (operand,) = [o for o in (*plan.scalar_prefetch, *plan.scalar_inputs) if o.symbol is node.args[0]]
    return f"{operand.ref_name}[0]"


def _tile_begin(emitter: KernelEmitter, node: Node) -> str:
    return tile_begin_text(emitter, node.args[0])


def tile_begin_text(emitter: KernelEmitter, dim, step: str | None = None) -> str:
    """The first index of `dim`'s tile at `step` (default: this tile's step)."""
    step = _tile_step(emitter, dim) if step is None else step
    term = step if dim.block_size == 1 else f"{step} * {dim.block_size}"
    return term if isinstance(dim.begin, int) and dim.begin == 0 else f"{emitter.render(dim.begin)} + {term}"


def _tile_id(emitter: KernelEmitter, node: Node) -> str:
    return _tile_step(emitter, node.args[0])


def _tile_end(emitter: KernelEmitter, node: Node) -> str:
    dim = node.args[0]
    begin = emitter.render(dim.begin_value)
    return f"jnp.minimum({begin} + {dim.block_size}, {emitter.render(dim.end)})"


def _tile_index(emitter: KernelEmitter, node: Node) -> str:
    dim = node.args[0]
    begin = emitter.render(dim.begin_value)
    return f"{begin} + lax.broadcasted_iota(jnp.int32, ({dim.block_size},), 0)"


def _tile_count(emitter: KernelEmitter, node: Node) -> str:
    return tile_count(emitter, node.args[0])


def device_print_statements(emitter: KernelEmitter, node: Node) -> list[str]:
    """`hl.device_print(prefix, *values)` as `pl.debug_print` calls, in the forms Mosaic logs:
    int32 scalars together in one call (`$0`-style placeholders), any other value alone and
    as a vector of at least two dims (a scalar as [[v]])."""
    prefix, values = node.kwargs["prefix"], node.args
    if all(tuple(v.shape) == () and v.dtype == torch.int32 for v in values):
        text = " ".join([prefix, *["{}"] * len(values)]) if values else prefix
        return [f"pl.debug_print({text!r}{''.join(', ' + emitter.render(v) for v in values)})"]
    statements = []
    for value in values:
        shape = (1,) * max(0, 2 - len(value.shape)) + tuple(value.shape)
        rendered = emitter.render(value)
        if tuple(shape) != tuple(value.shape):
            rendered = f"jnp.reshape({rendered}, {tuple(shape)!r})"
        statements.append(f"pl.debug_print({(prefix + ' {}')!r}, {rendered})")
    return statements


STRUCTURAL_RULES = {
    "subview": subview_text,
    "scalar_arg": _scalar_arg, "tile_begin": _tile_begin, "tile_id": _tile_id, "tile_end": _tile_end,
    "tile_index": _tile_index, "tile_count": _tile_count,
}

# STRUCTURAL ops that are statements with no value (besides remote copies, codegen/remote.py)
STATEMENT_RULES = {"device_print": device_print_statements}
