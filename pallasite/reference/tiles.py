"""Tiles of reference mode: concrete runs of indices, and the loops that yield them."""
from __future__ import annotations

import itertools
import operator
from typing import Any, Callable, Iterator

import torch

from .. import exc
from .. import language as hl
from . import lanes


class BlockSize(int):
    """`tile.block_size` in reference mode: the int, remembering the tiles whose block
    sizes it is the product of. As a size in device code (`v.reshape(tb.block_size *
    th.block_size, d)`, written for whole blocks) it stands for those tiles' extents, as
    a tile does (`v.view(tile, -1)`); any other arithmetic gives a plain int."""

    tiles: tuple

    def __new__(cls, value: int, tiles: tuple) -> "BlockSize":
        size = super().__new__(cls, value)
        size.tiles = tiles
        return size

    @property
    def extent(self) -> int:
        extent = 1
        for tile in self.tiles:
            extent *= tile.extent
        return extent

    def __mul__(self, other):
        if isinstance(other, BlockSize):
            return BlockSize(int(self) * int(other), self.tiles + other.tiles)
        return int(self) * other

    def __rmul__(self, other):
        return other * int(self)


def _as_operands(value, scalar: bool):
    """`value` (an argument of a torch call, lists and dicts walked) with each run-time int or
    bool a plain Python one (`scalar`) or a 0-d tensor, as the compiled kernel's device scalar."""
    if isinstance(value, RuntimeBool):
        return bool(value) if scalar else torch.tensor(bool(value))
    if isinstance(value, RuntimeInt):
        return int(value) if scalar else torch.tensor(int(value), dtype=torch.int32)
    if isinstance(value, (list, tuple)):
        return type(value)(_as_operands(item, scalar) for item in value)
    if isinstance(value, dict):
        return {key: _as_operands(item, scalar) for key, item in value.items()}
    return value


class _RuntimeScalar(int):
    """An int or bool the compiled kernel knows only at run time. Torch takes it where it takes
    a number; where only a tensor will do (`torch.where(g > 5, g - 6, g)`, `torch.clamp(g - 2,
    min=0)`), as a 0-d tensor, which the compiled kernel's device scalar is."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        try:
            return func(*_as_operands(args, True), **_as_operands(kwargs, True))
        except TypeError:
            return func(*_as_operands(args, False), **_as_operands(kwargs, False))

    def __getattr__(self, name: str):
        """A tensor method (`(g > 0).to(torch.int32)`, `g.float()`) of the 0-d tensor it stands for."""
        if name.startswith("__") or not hasattr(torch.Tensor, name):
            raise AttributeError(name)
        return getattr(_as_operands(self, False), name)


class RuntimeBool(_RuntimeScalar):
    """A comparison of `RuntimeInt`s (`g > 5`): a Python bool in an `if`, a 0-d bool tensor where
    torch needs a tensor (bool itself cannot be subclassed)."""

    def __new__(cls, value: bool) -> "RuntimeBool":
        return super().__new__(cls, bool(value))

    def __repr__(self) -> str:
        return repr(bool(self))

    def __invert__(self):
        return RuntimeBool(not self)

    def __and__(self, other):
        return RuntimeBool(bool(self) and bool(other)) if isinstance(other, (bool, RuntimeBool)) else NotImplemented

    def __or__(self, other):
        return RuntimeBool(bool(self) or bool(other)) if isinstance(other, (bool, RuntimeBool)) else NotImplemented

    __rand__, __ror__ = __and__, __or__


def _compared(name: str):
    def compare(self, other):
        result = getattr(int(self), name)(other)
        return RuntimeBool(result) if isinstance(result, bool) else result
    return compare


def _arith(op: Callable[[Any, Any], Any], reflected: bool = False):
    """`g op other` of a `RuntimeInt`: an int result keeps the mark. A tensor takes the call
    itself (its reflected method), so the op sees the runtime int, never a compile-time one:
    `g * K + tile.index` is then an index tensor checked against the tensor's size, as
    compiled, not a tile shifted by a constant (which reads 0 past the tensor)."""
    def arith(self, other):
        if isinstance(other, torch.Tensor):
            return NotImplemented
        value = op(other, int(self)) if reflected else op(int(self), other)
        return RuntimeInt(value) if isinstance(value, int) and not isinstance(value, bool) else value
    return arith


class RuntimeInt(_RuntimeScalar):
    """An int the compiled kernel knows only at run time: an `hl.grid` index, a tile's begin,
    and ints computed from them (arithmetic keeps the mark, a comparison gives a `RuntimeBool`).
    As an index it does not count from the end when negative, as the compiled kernel's range
    check refuses it (reference/indexing.py); a Python int written in the kernel does."""

    __lt__, __le__, __gt__, __ge__ = (_compared(name) for name in ("__lt__", "__le__", "__gt__", "__ge__"))
    __eq__, __ne__ = _compared("__eq__"), _compared("__ne__")
    __hash__ = int.__hash__

    __add__, __sub__, __mul__ = _arith(operator.add), _arith(operator.sub), _arith(operator.mul)
    __floordiv__, __mod__ = _arith(operator.floordiv), _arith(operator.mod)
    __radd__, __rsub__, __rmul__ = (_arith(op, reflected=True) for op in (operator.add, operator.sub, operator.mul))

    def __neg__(self):
        return RuntimeInt(-int(self))


class TileBegin(RuntimeInt):
    """`tile.begin` in reference mode: an int that knows its tile, so a subscript of a size-1
    axis reads index 0 as the compiled kernel does (reference/indexing.py); arithmetic on it
    gives a `RuntimeInt`."""

    tile: "RefTile"

    def __new__(cls, value: int, tile: "RefTile"):
        begin = super().__new__(cls, value)
        begin.tile = tile
        return begin


class RefTile(hl.Tile):
    """One tile of an `hl.tile` loop: the indices [begin, end) of one dimension.

    `end` is clamped to the loop's end, so the last tile of a range that the
    block size does not divide is shorter than `block_size`; `x[tile]` is the
    slice `x[begin:end]`.
    """

    def __init__(self, begin: int, end: int, block_size: int, tile_id: int, count: int, name: str,
                 in_device: Callable[[], bool] = lambda: False):
        """`in_device()`: whether the runner is in device code (where a tile as a size is its extent)."""
        self._in_device = in_device
        self.begin = TileBegin(begin, self)
        self.end = end
        self._block_size = block_size
        self.id = tile_id
        self.count = count
        self.name = name
        self._index: torch.Tensor | None = None
        # the loop's range when host ints give it (None when read from data): a loop within
        # [0, 1) tiles a size-1 axis, any other broadcasts it (reference/indexing.py)
        self.static_range: tuple[int, int] | None = None

    @property
    def extent(self) -> int:
        return int(self.end) - int(self.begin)  # a size: a plain int, not a RuntimeInt

    @property
    def block_size(self) -> BlockSize:
        return BlockSize(self._block_size, (self,))

    @property
    def single_lane(self) -> bool:
        """A one-index tile of a wider block: its axis is a lane, never a broadcast axis."""
        return self.extent == 1 and self.block_size > 1

    @property
    def index(self) -> torch.Tensor:
        """`torch.arange(begin, end)` as int32 (device indices are 32-bit)."""
        if self._index is None:
            index = torch.arange(self.begin, self.end, dtype=torch.int32)
            self._index = lanes.mark_run(lanes.mark(index, {0} if self.single_lane else ()), 0)
        return self._index

    def __add__(self, other: Any) -> torch.Tensor:
        """`tile + c`: the tile moved by c (reading 0 outside the tensor): in a subscript an
        axis, as the tile is (reference/indexing.py), in arithmetic the positions tile.index + c."""
        return _moved(self.index + self._offset(other, "+"))

    def __radd__(self, other: Any) -> torch.Tensor:
        return _moved(self.index + self._offset(other, "+"))

    def __sub__(self, other: Any) -> torch.Tensor:
        return _moved(self.index - self._offset(other, "-"))

    def _offset(self, other: Any, symbol: str) -> int:
        if isinstance(other, (bool, RuntimeInt)) or not isinstance(other, int):  # a grid index: run time
            raise exc.UnsupportedSyntax(
                f"{self.name} {symbol} {other!r}: a tile shifts by a compile-time int; for other "
                f"arithmetic use {self.name}.index (a vector of indices) or {self.name}.begin.")
        return other

    def __index__(self) -> int:
        # A tile as a size in device code (`v.view(tile, -1)`, as the compiler takes its block
        # size) stands for its extent. torch's argument parser asks for it before any torch
        # function mode could see the call, so this is the one place to answer.
        if self._in_device():
            return self.extent
        raise exc.UnsupportedSyntax(
            f"Tile '{self.name}' is a run of indices; use {self.name}.begin or "
            f"{self.name}.index for numbers."
        )

    def __repr__(self) -> str:
        return f"RefTile({self.name}: {self.begin}:{self.end}/{self.block_size})"


def as_bound(value: Any, what: str) -> int:
    """A loop begin/end as a Python int: ints, and integer scalars read from tensors."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.dtype.is_floating_point or value.dtype == torch.bool:
            raise exc.UnsupportedSyntax(f"Loop {what} must be an integer scalar, got a {value.dtype} "
                                        f"tensor of shape {list(value.shape)}.")
        return int(value.reshape(()).item())
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise exc.UnsupportedSyntax(f"Loop {what} must be an int or an integer scalar, got {value!r}.")
    return int(value.__index__())


def check_block_size(block: Any) -> int:
    if isinstance(block, bool) or not isinstance(block, int) or block <= 0:
        raise exc.IllegalBlockSize(f"block_size must be a positive int or None, got {block!r}.")
    return int(block)


def dim_tiles(name: str, begin: int, end: int, block: int, in_device: Callable[[], bool]) -> list[RefTile]:
    """The tiles of one dimension, in order; none if the range is empty."""
    count = max(0, -(-(end - begin) // block))
    return [
        RefTile(begin + i * block, min(begin + (i + 1) * block, end), block, i, count, name, in_device)
        for i in range(count)
    ]


def iterate(kind: str, names: list[str], begins: list[int], ends: list[int], blocks: list[int],
            multi: bool, order=None, in_device: Callable[[], bool] = lambda: False,
            static: list[bool] | None = None) -> Iterator[Any]:
    """The loop variable of each iteration, the last dimension fastest (as the Pallas grid runs),
    or in the grid order `order` (a config's `loop_orders` entry: grid axis a walks dim order[a]).

    `hl.tile` yields `RefTile`s, `hl.grid` plain ints; a loop over a list of
    dimensions yields a tuple. `static`: per dim, whether host ints give its range.
    """
    per_dim = []
    for dim, (name, begin, end, block) in enumerate(zip(names, begins, ends, blocks)):
        if kind == "grid":  # block: 1, or hl.grid's step
            per_dim.append([RuntimeInt(i) for i in range(begin, end, block)])
        else:
            per_dim.append(dim_tiles(name, begin, end, block, in_device))
            if static is not None and static[dim]:
                for tile in per_dim[-1]:
                    tile.static_range = (begin, end)
    order = list(order) if order is not None else list(range(len(per_dim)))
    for permuted in itertools.product(*(per_dim[dim] for dim in order)):
        items = [None] * len(order)
        for axis, dim in enumerate(order):
            items[dim] = permuted[axis]
        yield tuple(items) if multi else items[0]


MOVED_TILE = "tile_axis"  # the attribute the tracer's DeviceTensor has too (frontend/proxies.py)


def _moved(positions: torch.Tensor) -> torch.Tensor:
    """Mark `tile + c`'s positions as an axis of a subscript (never an index tensor)."""
    setattr(positions, MOVED_TILE, True)
    return positions
