"""The kernel IR.

A traced kernel is a `KernelIR`: a host program (a list of `HostStep`s) whose
`DeviceLoopCall` steps each hold one top-level device loop. A device loop is a
`TileLoop` whose body is a list of `Node`s in SSA form over `Value`s.

Inner loops (the next layer of the language) are `TileLoop`s nested inside a
body; the per-dimension facts every strategy needs (begin, end, block size,
whether the tail is partial) live on `TileDim`, so the planner treats grid
dimensions and inner dimensions alike.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Union

import torch

from ..exc import SourceLocation
from .index_forms import IndexForm
from .ops import scalar_arithmetic
from .sizes import SymbolicSize

_ids = itertools.count()


def cdiv(a: int, b: int) -> int:
    """Ceiling division of ints: how many blocks of `b` cover `a` (also `pallasite.cdiv`, as
    Helion's `helion.cdiv`)."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two at least `n` (1 for n <= 1): `pallasite.next_power_of_2`, as
    Helion's `helion.next_power_of_2` (block sizes of host code)."""
    n = int(n)
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


@dataclass(eq=False)
class Value:
    """An SSA value of device or host code: a tensor (shape) or a scalar (shape ())."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    name: str = ""
    producer: Node | None = field(default=None, repr=False)
    id: int = field(default_factory=lambda: next(_ids))
    # torch computes this integer in int64 where the device holds int32 (an integer sum,
    # `.long()`): the frontend marks where torch's result is; plan/int64_values.py follows it
    int64: bool = False

    def __repr__(self) -> str:
        return f"%{self.name or self.id}:{tuple(self.shape)}:{self.dtype}"


# An operand is a Value, a Python constant, or a (nested) tuple/list of them.
Operand = Union[Value, int, float, bool, None, tuple, list, torch.dtype]


@dataclass(eq=False)
class TensorSymbol:
    """A host tensor buffer: a kernel argument, a host allocation or a host op result.

    `fill` tells what an allocation holds before any device loop writes it:
    None for `torch.empty` (undefined), else the fill value.
    """

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    origin: str  # "arg" | "alloc" | "host_op"
    fill: float | int | bool | None = None
    id: int = field(default_factory=lambda: next(_ids))
    # An argument the caller passes in another dtype than `dtype`, the kernel's: an int64
    # index tensor the host narrows to int32 (plan/narrowed_arguments.py decides whether it may)
    caller_dtype: torch.dtype | None = None
    requires_grad: bool = False  # an argument's: the caller's tensor's flag (`x.requires_grad` in host code)

    def __repr__(self) -> str:
        return f"{self.name}{list(self.shape)}:{self.dtype}"


@dataclass(eq=False)
class ScalarSymbol:
    """A runtime scalar kernel argument (int or float); its value never recompiles."""

    name: str
    dtype: torch.dtype  # torch.int32 or torch.float32
    id: int = field(default_factory=lambda: next(_ids))


# ---------------------------------------------------------------- indexing --


@dataclass(frozen=True)
class TileSlice:
    """`x[tile]` / `x[tile.index]`: the run [tile.begin, tile.begin + block)."""

    dim: TileDim
    FORM: ClassVar[IndexForm] = IndexForm(
        "tile", ("x[tile]", "x[tile_m, tile_n]", "x[tile.index]", "out[tile] = v", "x[tile] += v",
                 "A[start + tile_m.index, tk]  # start = offsets[g] before the loop",
                 "x[b, tile_c.begin * K + tile_m.index, h, :]  # tile_m inside [0, K), K | x.size(1)"),
        "the tile's block (a BlockSpec block, or a DMA'd or pipelined block in an inner loop); a partial last "
        "tile is masked on load and never written past the tensor's end; an inner tile whose every access is "
        "moved by one device scalar read before its loop (Helion's grouped GEMM) is the window at that "
        "offset, streamed like `hl.tile(start, end)` (any other use of the tile keeps it an index vector); "
        "`c * K + tile.index` with K dividing the axis and the tile's range inside [0, K) (Helion's Mamba2) is "
        "the tile of row c of the axis seen as [n // K, K], a host view made before the loop")


@dataclass(frozen=True)
class FullSlice:
    """`x[:]`: the whole dimension."""

    FORM: ClassVar[IndexForm] = IndexForm(
        "full slice", ("x[tile, :]", "x[:, tile]", "x[..., tile]", "x[tile]  # x is 2-D: x[tile, :]"),
        "the whole axis, resident in VMEM; axes the subscript does not name are whole too")


@dataclass(frozen=True)
class ScalarIndex:
    """`x[3]`, `x[g]`, `x[tile.begin + 5]`: one position; the axis disappears."""

    index: Operand  # int or a scalar Value
    # a narrowing read's negative int (`v[:, -1]`), counted here from the value's end: planning
    # refuses it on an axis a partial tile pads (the value's end is not the tile's there)
    from_end: bool = False
    FORM: ClassVar[IndexForm] = IndexForm(
        "scalar", ("x[3]", "x[-1]", "x[g, tile]", "x[tile_m.begin + 5]", "x[b, h, tile, :]  # b = bh // heads",
                   "x[offsets[g]]"),
        "one position, the axis disappears; a runtime scalar (a grid index, a kernel argument, a value read "
        "from a tensor) picks the block through scalar prefetch (a read-only row of a 2-D table: the group of "
        "8/16/32 rows holding it, so a huge embedding stays in HBM); an int counts from the end when negative")


@dataclass(frozen=True)
class NewAxis:
    """`x[None]`: a new unit axis."""

    FORM: ClassVar[IndexForm] = IndexForm("new axis", ("x[None, tile]", "x[tile, None]"), "a unit axis, as in torch")


@dataclass(frozen=True)
class GatherIndex:
    """`table[idx, :]` with `idx` a 1-D int32 device value (`indices[tile]`): a gather.

    As in torch advanced indexing, the index's axis replaces the tensor's axis
    in place; each position of `value` picks one element along it."""

    value: Value
    FORM: ClassVar[IndexForm] = IndexForm(
        "index vector (gather, scatter)",
        ("table[idx[tile], :]", "x[tile.index + off]", "table[idx2d[tile_m, tile_n]]", "out[idx[tile], :] = v"),
        "an int32 device value (int64 arguments used only as indices are narrowed on the host); its values are "
        "range-checked in interpret mode; a load gathers rows (index tiles of any rank): from a table past the "
        "VMEM threshold by one DMA per index, of the whole row or of a tile's block of it (`table[idx[tb], te]`, "
        "te's blocks dividing the dim); a flat index `rows[:, None] * w + hl.arange(w)` (or + a tile's positions "
        "over [0, w)) into a 1-D view reads whole rows of it seen as [n // w, w] (a store takes that index "
        "flattened: `flat[i.reshape(-1)] = v.reshape(-1)`); a store scatters float32, bfloat16, float16 or "
        "int32 values through a 1-D index (lanes naming one row: the last lane wins, in every mode; torch "
        "leaves duplicates undefined, so a kernel should not rely on which)")


# the dtypes a store through an index vector writes (plan/scatters.py lowers them; an atomic through
# an index tensor, which gathers and scatters its rows, takes these only: language/atomics.py)
SCATTER_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int32)


@dataclass(frozen=True)
class ShiftedTile:
    """`x[tile + c]`, `x[tile.index - 3]` (c a compile-time int, not 0): the positions
    tile.begin + c + i of the axis for the tile's lanes i. A lane whose position lies outside
    the tensor reads 0 (masked as a tile's tail is); lanes past the tile's end are its
    padding, as for `TileSlice`. c is 0 for a masked load's tile that runs past the tensor's
    end (`hl.load(x, [t], extra_mask=...)`, `indexing.normalize_subscript`)."""

    FORM: ClassVar[IndexForm] = IndexForm(
        "shifted tile", ("x[tile - 3]", "x[tile.index + 128]", "out[tile + 1] = v", "x[tm - 1, tn + 1]",
                         "y[tm.index + 64, tn + 64]", "hl.load(x, [tm, tn], extra_mask=tn.index < x.size(1))"),
        "the tile's positions moved by a compile-time int (an int argument `c` in `x[t + c]`, "
        "`x[t.index - c]` or `x[t.index - (2 * c + 1)]` becomes a constant of the variant); a position outside the tensor reads 0 on a load "
        "and is not written on a store (as a tile's tail is masked); `tile + c` is an axis like the tile "
        "(several in one subscript read a moved block, never paired), `tile.index + c` an index tensor "
        "(two of them pair as in torch, and beside any other index tensor, `x[t.index, t.index + 1]`, its "
        "positions outside the tensor still read 0); the axis stays resident and each "
        "access reads the two block-aligned runs holding its lanes, rotated by pltpu.roll. A masked load's "
        "tile that runs past the tensor's end (Helion's concatenation) is a shift by 0: it reads 0 there")

    dim: TileDim
    offset: int

    def text(self) -> str:
        """`t.index + 3` as the user wrote it; `t.index` for a masked load's (offset 0)."""
        if self.offset == 0:
            return f"{self.dim.name}.index"
        return f"{self.dim.name}.index {'+' if self.offset > 0 else '-'} {abs(self.offset)}"


@dataclass(frozen=True)
class StaticSlice:
    """`x[t, a:b]`, `out[..., :112]`: the static window [start, stop) of one axis (step 1,
    bounds normalized as Python's slices are, non-empty, inside the axis). The axis keeps
    the window's length; planning reads the window out of a block holding it."""

    FORM: ClassVar[IndexForm] = IndexForm(
        "static slice", ("x[tile, :half]", "x[tile, half:]", "out[..., :112] = v", "x[tile, a:b]"),
        "a window of one axis with int (or hl.specialize'd) bounds, step 1, bounds as Python reads them "
        "(an int argument in a bound, `x[t, n - h:]`, becomes a constant of the variant); "
        "a static sub-view of the whole-axis block; static shapes only")

    start: int
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class Run:
    """A narrowing read of a device value (`blk[1:3]`, `blk[tile_s.index]`): the contiguous
    positions [start, start + size) of one axis of the value.

    `dim`: the tile whose run it is (`blk[tile_s.index]`); lanes past that tile's end are
    padding, masked like a partial tile's. None for a constant slice."""

    start: Operand  # int or a scalar Value
    size: int
    dim: "TileDim | None" = None
    from_end: bool = False  # a negative slice bound, counted from the value's end (as ScalarIndex's)
    FORM: ClassVar[IndexForm] = IndexForm(
        "narrowing read of a device value",
        ("blk[1:3]", "blk[tile_s.index]", "blk[tile_s.begin]", "blk[i]  # i of hl.static_range", "c[:, -1]",
         "c[:, -3:]"),
        "a part of a block already loaded (`blk = x[tile, :]`), read in an inner loop: a `pl.ds` read of "
        "its VMEM ref, or a static slice of the value (plan/subviews.py decides); a constant, a constant "
        "slice, tile.begin or tile.index; a negative int or bound counts from the end of an axis no partial "
        "tile pads")


IndexItem = Union[TileSlice, FullSlice, ScalarIndex, NewAxis, GatherIndex, StaticSlice, ShiftedTile]
# a subview's items (`subview` node, kwargs["index"]): one per axis of the narrowed value
NarrowItem = Union[FullSlice, ScalarIndex, NewAxis, Run]


# ------------------------------------------------------------------ loops --


@dataclass(eq=False)
class TileDim:
    """One dimension of an `hl.tile` / `hl.grid` loop.

    `begin`/`end` are ints or scalar Values; `block_id` indexes the config's
    `block_sizes` (None for grid dims and fixed block sizes).
    """

    name: str
    begin: Operand
    end: Operand
    block_size: int
    block_id: int | None
    is_grid: bool  # hl.grid: block size 1, the loop variable is a scalar
    begin_value: Value | None = None  # scalar Value: this tile's first index
    # the device scalar s every access of this tile was moved by (`x[s + tile.index]`): its range
    # is the moved one, [s + begin, s + end) (frontend/moved_tiles.py); messages spell it as written
    moved_by: Value | None = None
    # why accesses at `s + tile.index` stayed gathers (another use of the tile), for messages
    kept_gathers: str = ""
    id: int = field(default_factory=lambda: next(_ids))

    @property
    def static_extent(self) -> int | None:
        if isinstance(self.begin, int) and isinstance(self.end, int):
            return self.end - self.begin
        return None

    @property
    def static_trips(self) -> int | None:
        """How many tiles the loop runs, when both bounds are known."""
        extent = self.static_extent
        return None if extent is None else cdiv(max(extent, 0), self.block_size)

    @property
    def has_partial_tail(self) -> bool:
        """Whether the last tile may run past `end` (so its tail must be masked). A
        data-dependent range has none when both ends are provably block multiples
        (`hl.tile(0, min(s, tile_q.end))` with blocks dividing s and tile_q's block)."""
        extent = self.static_extent
        if isinstance(extent, SymbolicSize):
            return True  # a dynamic size (static_shapes=False): masked, so every size is served
        if extent is None:
            return not (self.begin_aligned and known_multiple(self.end) % self.block_size == 0)
        return extent % self.block_size != 0

    @property
    def begin_aligned(self) -> bool:
        """Whether every tile starts at a multiple of the block size, so tiles are whole
        blocks of the tensor: a static begin the block divides, or a data-dependent one
        provably a multiple of it (`max(0, tile_q.begin - 128)` with blocks dividing 128)."""
        return known_multiple(self.begin) % self.block_size == 0

    def __repr__(self) -> str:
        return f"TileDim({self.name}, {self.begin}:{self.end}/{self.block_size})"


def known_multiple(operand: Operand) -> int:
    """A number every value of the int scalar `operand` is a multiple of (0: it is 0;
    1: nothing is known), from its expression: constants, tile begins (`begin + j *
    block`), tile ends, +, -, *, min and max of those."""
    if isinstance(operand, (bool, SymbolicSize)):  # a dynamic size (static_shapes=False): any int
        return 1
    if isinstance(operand, int):
        return abs(operand)
    node = operand.producer if isinstance(operand, Value) else None
    if node is None or isinstance(node, (Load, Store)):
        return 1
    if node.op in ("tile_begin", "tile_end"):
        dim = node.args[0]
        step = math.gcd(known_multiple(dim.begin), dim.block_size)
        return step if node.op == "tile_begin" else math.gcd(step, known_multiple(dim.end))
    arithmetic = scalar_arithmetic(node.op)
    symbol = arithmetic.spelling if arithmetic is not None and len(node.args) >= 2 else None
    if symbol in ("+", "-", "min", "max"):
        right = known_multiple(node.args[1]) * abs(node.kwargs.get("alpha", 1))
        return math.gcd(known_multiple(node.args[0]), right)
    if symbol == "*":
        return known_multiple(node.args[0]) * known_multiple(node.args[1])
    return 1


@dataclass(eq=False)
class Node:
    """One operation. `op` keys the lowering table; `args` are operands."""

    op: str
    args: tuple
    kwargs: dict[str, Any]
    outputs: list[Value]
    location: SourceLocation | None
    id: int = field(default_factory=lambda: next(_ids))
    # What torch means here, where the op alone does not say (plan/int64_values.py reads them):
    # the composite (`cumsum`, `softmax`) this node is a step of; whether it is the user's
    # `x op= v` (torch keeps x's dtype); and, for a composite's last step, the torch call whose
    # int64 result it is, as (spelling, operands, attrs), to recompute it
    composite: str = field(default="", repr=False)
    in_place: bool = field(default=False, repr=False)
    int64_of: tuple | None = field(default=None, repr=False)

    @property
    def output(self) -> Value:
        (out,) = self.outputs
        return out

    def __repr__(self) -> str:
        outs = ", ".join(map(repr, self.outputs))
        return f"{outs} = {self.op}{self.args}"


@dataclass(eq=False)
class Load(Node):
    """Read `tensor[index]` into a value."""

    tensor: TensorSymbol | None = None
    index: tuple[IndexItem, ...] = ()


@dataclass(eq=False)
class Store(Node):
    """Write `value` (args[0]) into `tensor[index]`.

    Through an index vector (a scatter), args[1], when present, is a 1-D bool Value over
    the index's lanes: lanes where it is false write nothing (`hl.store(..., extra_mask=m)`)."""

    tensor: TensorSymbol | None = None
    index: tuple[IndexItem, ...] = ()


@dataclass(eq=False)
class Carried:
    """A variable updated across iterations of an inner loop (an accumulator).

    `init` is its value before the loop, `param` its value at the start of an
    iteration (a placeholder the body reads), `result` its value at the end of
    the body, `out` its value after the loop.
    """

    name: str
    init: Value
    param: Value
    result: Value | None = None
    out: Value | None = None


@dataclass(eq=False)
class TileLoop:
    """A `for ... in hl.tile(...)/hl.grid(...)` loop.

    A top-level loop is the pallas_call grid; a loop nested in a body is an
    inner loop, lowered by the strategy the config chooses.
    """

    dims: list[TileDim]
    body: list[Node | TileLoop | IfBlock]
    location: SourceLocation | None
    carried: list[Carried] = field(default_factory=list)
    id: int = field(default_factory=lambda: next(_ids))

    @property
    def own_dims(self) -> list[TileDim]:
        """The dims whose tiles are this loop's steps (a partial tile's padding stops at its
        carried values)."""
        return self.dims


@dataclass(eq=False)
class FoldedSteps(TileLoop):
    """An inner loop planning folded into its call's grid (`pallas_loop_type="outer_pipeline"`,
    plan/folded_loops.py): `dims` is empty, its tiles being grid steps now, and `folded`
    holds those dims (the innermost grid axes, in grid order). One program runs one step of the body; the
    carried values persist across the steps of one outer tile (VMEM scratch), and the
    statements after this loop in the device loop run at its last step only."""

    folded: list[TileDim] = field(default_factory=list)

    @property
    def own_dims(self) -> list[TileDim]:
        return self.folded


@dataclass(eq=False)
class Merged:
    """A name an `IfBlock` assigns and the code after it reads: `then_value` when the
    condition holds, else `else_value` (the other branch's, or the value before the if);
    `out` is the value after the if."""

    name: str
    then_value: Value
    else_value: Value
    out: Value


@dataclass(eq=False)
class IfBlock:
    """`if <device scalar>:` inside a device loop: both branches are traced once.

    `condition` is a bool scalar Value; `outputs` the names the branches
    define for the code after the if (a `lax.cond`'s results). A body with
    no outputs only stores (a `pl.when`). Planning walks both bodies, like a
    loop body; bodies hold nodes, nested IfBlocks and inner tile loops (Helion's
    `if rows != 0: for tile in hl.tile(...)`), which `walk_loops` finds.
    """

    condition: Value
    then_body: list[Node | TileLoop | IfBlock]
    else_body: list[Node | TileLoop | IfBlock]
    location: SourceLocation | None
    outputs: list[Merged] = field(default_factory=list)
    id: int = field(default_factory=lambda: next(_ids))

    @property
    def bodies(self) -> tuple[list, list]:
        return self.then_body, self.else_body


# ------------------------------------------------------------ host program --


@dataclass(eq=False)
class HostOp:
    """A torch op of host code, on whole tensors and scalars.

    Arguments refer to `TensorSymbol`s and `ScalarSymbol`s; `view_of` marks
    ops whose result is a view of their first argument (reshape, transpose,
    basic slicing; not `clone` or indexing with an index tensor, which copy).
    """

    op: str
    args: tuple
    kwargs: dict[str, Any]
    result: TensorSymbol | ScalarSymbol | tuple
    location: SourceLocation | None
    view_of: TensorSymbol | None = None
    id: int = field(default_factory=lambda: next(_ids))


@dataclass(eq=False)
class HostStore:
    """`tensor[key] = value` in host code: the whole tensor updated at `key`.

    `key` is the subscript as Python items (ints, slices, None, Ellipsis, int
    lists) with `TensorSymbol` index tensors and int `ScalarSymbol`s — the same
    form as a host `getitem`'s key; `value` is a symbol or a Python number, and
    `shape` the shape of `tensor[key]` (which `value` broadcasts to).
    """

    tensor: TensorSymbol
    key: tuple
    value: Any
    shape: tuple[int, ...]
    location: SourceLocation | None
    id: int = field(default_factory=lambda: next(_ids))


@dataclass(eq=False)
class Allocate:
    """`torch.empty/zeros/full/...` in host code, or `torch.arange` (`ramp`: its start and
    step, element i holding start + i * step; the symbol's fill is then None)."""

    symbol: TensorSymbol
    location: SourceLocation | None
    ramp: tuple[int | float, int | float] | None = None

    @property
    def defines_values(self) -> bool:
        """Whether the tensor holds data before any device loop writes it."""
        return self.symbol.fill is not None or self.ramp is not None


@dataclass(eq=False)
class DeviceLoopCall:
    """A top-level device loop: one `pallas_call` in the generated code."""

    loop: TileLoop
    index: int  # position among the kernel's device loops
    scalars: list[ScalarSymbol]  # runtime scalars the loop reads
    # ids of the dims of `loop` an inner loop gave when planning folded it into the grid
    # (`pallas_loop_type="outer_pipeline"`, plan/folded_loops.py); empty as traced
    folded_dims: frozenset[int] = frozenset()
    # a folded dim whose bounds are values of the outer tiles (a causal `hl.tile(0, min(s,
    # tile_q.end))`, a window `hl.tile(max(0, tile_q.begin - w), tile_q.end)`): dim id -> the
    # steps of its grid axis, the most tiles any program's range holds; a program's steps past
    # its own range skip (plan/folded_loops.py decides it)
    folded_trips: dict[int, int] = field(default_factory=dict)

    def grid_blocks(self, dim: TileDim) -> int:
        """How many steps the grid axis of `dim`, a dim of `loop`, has."""
        if dim.id in self.folded_trips:
            return self.folded_trips[dim.id]
        return cdiv(dim.static_extent, dim.block_size)


HostStep = Union[HostOp, HostStore, Allocate, DeviceLoopCall]


@dataclass(frozen=True)
class JaggedMask:
    """How an access inside `hl.jagged_tile` loops is masked (frontend/jagged.py decides;
    reference mode reads the decision back by the access's site): for each enclosing
    jagged loop it depends on, (the loop's position among the enclosing jagged loops,
    outermost first; the result axis its row tile indexes, or None when the lengths hold
    one row; the result axis its jagged tile indexes), in a result of rank `rank`."""

    rank: int
    parts: tuple[tuple[int, int | None, int], ...]


@dataclass(eq=False)
class KernelIR:
    """Everything tracing learned about one kernel at one signature and config."""

    name: str
    source_file: str
    params: list[str]
    arguments: list[TensorSymbol | ScalarSymbol | Any]  # per parameter
    steps: list[HostStep]
    result: Any  # nested structure of TensorSymbol / ScalarSymbol / constants
    block_dims: list[TileDim]  # dims with a config block size, by block_id
    device_loops: list[DeviceLoopCall]
    # The last of `params`: tensors the kernel reads from its enclosing scope (globals,
    # closure variables), passed by the runtime as implicit arguments.
    captured: tuple[str, ...] = ()
    # torch.rand_like's seed: a hidden last argument of the host function, drawn from
    # torch's default generator on every call (None: the kernel draws no seed)
    random_seed: ScalarSymbol | None = None
    # The kernel's `collective_id=` setting (remote barriers); None: derived from the kernel
    collective_id: int | None = None
    # hl.jagged_tile: each masked access's decision, by (line, column, ordinal in its statement)
    jagged_sites: dict[tuple[int, int, int], JaggedMask] = field(default_factory=dict)
    # each block_id's source site (line, loop variable): slots of one site came from one
    # hl.tile line traced again by a host loop (frontend/tile_dims.py)
    block_sites: list[tuple] = field(default_factory=list)

    def host_computations(self) -> list[HostOp | HostStore]:
        """The host steps that compute on whole tensors (not allocations, not views, not
        scalar arithmetic): each runs as its own XLA op of the host function, outside every
        Pallas kernel (what `exc.TensorOperationInWrapper` tells the user)."""
        found: list[HostOp | HostStore] = []
        for step in self.steps:
            if isinstance(step, HostStore):
                found.append(step)
            elif isinstance(step, HostOp) and step.view_of is None:
                results = step.result if isinstance(step.result, tuple) else (step.result,)
                if any(isinstance(r, TensorSymbol) for r in results):
                    found.append(step)
        return found
