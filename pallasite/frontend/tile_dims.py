"""The dims of traced tile/grid loops and the config's block sizes they take.

Each tunable dim (`hl.tile(..., block_size=None)`) and each `hl.register_block_size`
call gets the next config slot, in the order the trace reaches them (reference mode
numbers them the same way); `block_dims[slot]` is the first dim of each slot.
"""
from __future__ import annotations

import ast
from typing import Any, Callable

from .. import exc
from .. import language as hl
from ..ir import Load, TileDim, Value
from ..ir.sizes import SymbolicSize
from .op_arguments import constant_attr
from .op_recorder import OpRecorder
from .proxies import BlockSize, DeviceTensor, HostScalar, HostTensor
from .walker import loop_names


class TileDims:
    """Builds the `TileDim`s of loops; owns the config slots of block sizes."""

    def __init__(self, choose_block_size: Callable[[int, int], int]):
        """`choose_block_size(slot, extent)`: the config's block size for a slot."""
        self.choose_block_size = choose_block_size
        self.block_dims: list[TileDim | None] = []
        # each slot's source site (line, loop variable): a host loop re-tracing one hl.tile line
        # gives slots of one site, which Helion counts once (ConfigSpec.normalize maps such configs)
        self.block_sites: list[tuple] = []
        self._max_extents: dict[int, int] = {}  # registered block size's slot -> its loops' max_extent

    def loop_dims(self, stmt: ast.For, spec: hl.TileIterable, bound: Callable, loc) -> list[TileDim]:
        """The TileDims of a loop; `bound(value, "begin"|"end", loc)` checks/converts each bound."""
        names = loop_names(stmt.target, len(spec.ends), spec.kind)
        dims = [
            self._tile_dim(name, bound(begin, "begin", loc), bound(end, "end", loc), block, spec.kind, loc)
            for name, begin, end, block in zip(names, spec.begins, spec.ends, spec.block_sizes)
        ]
        if spec.max_extent is not None:
            self._check_max_extent(dims[0], spec.max_extent, loc)
        return dims

    def _check_max_extent(self, dim: TileDim, max_extent: Any, loc) -> None:
        """`hl.tile(..., max_extent=n)`: n a compile-time int (a size, symbolic with dynamic
        shapes, counts), at least the loop's static extent, the same for every loop of one
        registered block size."""
        if isinstance(max_extent, HostScalar) and max_extent.is_int_argument:
            max_extent = int(max_extent)
        static = isinstance(max_extent, (int, SymbolicSize)) and not isinstance(max_extent, bool)
        if not static:
            raise exc.IncorrectTileUsage(
                f"hl.tile(max_extent=...) must be a statically known integer (a size or an int), got "
                f"{type(max_extent).__name__}; a bound read from a tensor is known only when the kernel runs.",
                loc)
        if isinstance(max_extent, int) and max_extent < 1:
            raise exc.IncorrectTileUsage(f"hl.tile(max_extent={max_extent}) must be at least 1.", loc)
        extent = dim.static_extent
        if isinstance(max_extent, int) and extent is not None and extent > max_extent:
            raise exc.IncorrectTileUsage(
                f"hl.tile(..., max_extent={max_extent}): the loop over '{dim.name}' runs {extent} "
                f"positions ([{dim.begin}, {dim.end})), more than its max_extent.", loc)
        if dim.block_id is not None:
            seen = self._max_extents.setdefault(dim.block_id, max_extent)
            if seen != max_extent:
                raise exc.IncorrectTileUsage(
                    f"Conflicting hl.tile(max_extent=...) values {seen} and {max_extent} for loops sharing "
                    "one block size: every loop of a registered block size takes the same bound.", loc)

    def register_block_size(self, args: tuple, loc=None) -> BlockSize:
        if not args or len(args) > 2:
            raise exc.UnsupportedSyntax("hl.register_block_size(max) or (min, max).")
        extent = int(args[-1])
        block_id = self._new_block_id((getattr(loc, "lineno", None), "register_block_size"))
        size = self.choose_block_size(block_id, extent)
        self.block_dims[block_id] = TileDim(f"block_{block_id}", 0, extent, size, block_id, False)
        return BlockSize(size, block_id)

    def _tile_dim(self, name: str, begin: Any, end: Any, block: Any, kind: str, loc) -> TileDim:
        for bound, which in ((begin, "begin"), (end, "end")):  # the generated code's name of a computed bound
            if isinstance(bound, Value) and not bound.name and bound.producer is not None:
                bound.name = f"{name}_range_{which}"
        static = isinstance(begin, int) and isinstance(end, int)
        extent = max(end - begin, 0) if static else 128
        if not isinstance(block, (int, BlockSize)) and block is not None:
            # `block_size=c * 8` of an int argument c, in host or device code: a constant of the variant
            block = constant_attr(block, "block_size", "hl.tile(..., block_size=...)")
        if kind == "grid":  # block: 1, or a stepped grid's step (hl.grid checked it)
            return TileDim(name, begin, end, block, None, True)
        if block is None:
            block_id = self._new_block_id((getattr(loc, "lineno", None), name))
            size = self.choose_block_size(block_id, extent)
        elif isinstance(block, BlockSize):
            block_id, size = block.block_id, int(block)
        elif isinstance(block, int) and not isinstance(block, bool) and block > 0:
            block_id, size = None, block
        else:
            raise exc.IllegalBlockSize(f"block_size must be a positive int or None, got {block!r}.", loc)
        dim = TileDim(name, begin, end, size, block_id, False)
        if block_id is not None and self.block_dims[block_id] is None:
            self.block_dims[block_id] = dim
        return dim

    def _new_block_id(self, site: tuple) -> int:
        self.block_dims.append(None)
        self.block_sites.append(site)
        return len(self.block_dims) - 1


def static_bound(bound: Any, what: str, loc) -> int:
    """A top-level loop's begin or end: known when compiling (an int argument, and `n - c` of
    ints and int arguments, become constants of the variant, as when they size a tensor:
    `HostScalar.constant_of_variant`)."""
    if isinstance(bound, HostScalar):
        value = bound.constant_of_variant()
        bound = bound if value is None else value
    if isinstance(bound, bool) or not isinstance(bound, int):
        if isinstance(bound, (HostScalar, DeviceTensor)):
            raise exc.UnsupportedSyntax(
                f"The {what} of a top-level device loop must be known when compiling "
                "(a size, or hl.specialize(...) of a scalar argument).", loc
            )
        if isinstance(bound, HostTensor) and not bound.symbol.shape and not bound.symbol.dtype.is_floating_point:
            raise exc.UnsupportedSyntax(
                f"The {what} of a top-level device loop is a tensor's element (a 0-d tensor): the grid must be known when compiling. Read its value on the host with .item() "
                f"(e.g. hl.grid(be[0].item(), be[1].item()): the kernel compiles a variant for the value), or "
                "loop over the data's range inside a device loop (hl.tile(be[0], be[1]) nested in hl.grid(1) or "
                "a tile loop), whose bounds may be device values.", loc)
        raise exc.UnsupportedSyntax(f"Loop {what} must be an int, got {bound!r}.", loc)
    return bound if isinstance(bound, SymbolicSize) else int(bound)


def inner_bound(recorder: OpRecorder) -> Callable[[Any, str, Any], Any]:
    """An inner loop's begin or end: an int or an integer device scalar."""

    def bound_of(bound: Any, what: str, loc) -> Any:
        if isinstance(bound, bool):
            raise exc.UnsupportedSyntax(f"Loop {what} must be an int, got {bound!r}.", loc)
        if isinstance(bound, int):
            return bound
        if isinstance(bound, (DeviceTensor, HostScalar)):
            value = recorder.device_operand(bound)
            if value.shape != () or value.dtype.is_floating_point:
                source = value.producer.tensor.name if isinstance(getattr(value, "producer", None), Load) else ""
                raise exc.UnsupportedSyntax(
                    f"Loop {what} must be an integer scalar, got a {str(value.dtype).replace('torch.', '')} "
                    f"{'scalar' if value.shape == () else f'tensor of shape {list(value.shape)}'}"
                    + (f" read from '{source}' (pass it as an int32 tensor)" if source else "") + ".", loc)
            return value
        raise exc.UnsupportedSyntax(f"Loop {what} must be an int or a device scalar, got {bound!r}.", loc)

    return bound_of
