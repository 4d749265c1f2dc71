"""The kernel language, imported as `hl` (Helion-compatible).

Every function here is meaningful only while pallasite traces a kernel or
runs it in reference mode; it delegates to the active tracer (the frontend's
`Tracer`, or `pallasite.reference.ReferenceRunner`). Outside a kernel they
raise a clear error.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from .. import exc
from .atomics import (
    ATOMIC_SEMANTICS, atomic_add, atomic_and, atomic_cas, atomic_index_tensor_error, atomic_max, atomic_min,
    atomic_or, atomic_xchg, atomic_xor,
)
from .memory_ops import load, store
from .tracing import _tracer, active_tracer, set_active_tracer
from .tunables import BooleanFragment, EnumFragment, Fragment, IntegerFragment, PowerOfTwoFragment

__all__ = [
    "tile", "grid", "zeros", "full", "arange", "specialize", "register_block_size",
    "constexpr", "dot", "rand", "load", "store", "atomic_add", "atomic_and", "atomic_or", "atomic_xor",
    "atomic_max", "atomic_min", "atomic_xchg", "atomic_cas", "Tile", "TileIterable", "static_range",
    "register_tunable", "Fragment", "IntegerFragment", "PowerOfTwoFragment", "EnumFragment",
    "BooleanFragment",
    "make_async_remote_copy", "remote_barrier", "all_reduce",
    "tile_begin", "tile_end", "tile_block_size", "tile_id", "tile_index", "subscript",
    "barrier", "signal", "wait", "StackTensor", "stacktensor_like", "inline_asm_elementwise",
    "inline_triton", "triton_kernel",
    "associative_scan", "cumsum", "cumprod", "reduce", "jagged_tile", "vtile",
    "split", "join",
    "register_reduction_dim", "randint", "dot_scaled", "device_print",
]


@dataclass
class TileIterable:
    """What `hl.tile(...)` / `hl.grid(...)` return: the loop's bounds, not yet a loop.

    The tracer turns a `for` over one of these into a device loop.
    """

    kind: str  # "tile" | "grid"
    begins: list[Any]
    ends: list[Any]
    block_sizes: list[Any]  # per dim: int, None (tunable) or a registered block size
    multi: bool  # called with a list of dims: the loop variable is a tuple
    max_extent: Any = None  # hl.tile(..., max_extent=n): a bound on a 1-D loop's extent
    jagged: Any = None  # hl.jagged_tile(lengths): the lengths, whose implicit mask the loop's accesses get

    def __iter__(self):
        raise exc.UnsupportedSyntax(
            f"hl.{self.kind}(...) is a device loop: use it as the iterable of a for "
            "loop inside a @pallasite.kernel function."
        )


def _as_list(value: Any) -> tuple[list[Any], bool]:
    if isinstance(value, (list, tuple, torch.Size)):
        return list(value), True
    return [value], False


def tile(begin_or_end: Any, end_or_none: Any = None, block_size: Any = None,
         max_extent: Any = None) -> TileIterable:
    """Iterate over tiles of one or more dimensions: `hl.tile(n)`, `hl.tile(b, e)`, `hl.tile([m, n])`.

    `max_extent` (Helion's): a compile-time int bounding a one-dimensional loop's extent
    (`end - begin`), for ranges only known at run time. pallasite plans such loops without
    it; it checks the promise where the range is known when compiling
    (`exc.IncorrectTileUsage` if the loop runs longer) and that every loop of one
    registered block size gives the same bound."""
    if end_or_none is None:
        ends, multi = _as_list(begin_or_end)
        begins = [0] * len(ends)
    else:
        begins, multi_b = _as_list(begin_or_end)
        ends, multi_e = _as_list(end_or_none)
        multi = multi_b or multi_e
        if len(begins) == 1 and len(ends) > 1:
            begins = begins * len(ends)
        if len(begins) != len(ends):
            raise exc.UnsupportedSyntax("hl.tile(begin, end): begin and end have different lengths.")
    if isinstance(block_size, (list, tuple)):
        sizes = list(block_size)
        if len(sizes) != len(ends):
            raise exc.UnsupportedSyntax(
                f"hl.tile got {len(sizes)} block sizes for {len(ends)} dimensions."
            )
    else:
        sizes = [block_size] * len(ends)
    if max_extent is not None and len(ends) != 1:
        raise exc.IncorrectTileUsage(
            f"hl.tile(max_extent=...) bounds one-dimensional tile loops; this loop has {len(ends)} dims. "
            "Give each dim its own hl.tile loop.")
    return TileIterable("tile", begins, ends, sizes, multi, max_extent)


def grid(begin_or_end: Any, end_or_none: Any = None, step: Any = None) -> TileIterable:
    """Iterate over single indices: `for g in hl.grid(n)`, `hl.grid(b, e)`, `hl.grid(b, e, step)`
    (as `range`: b, b + step, ... below e, step a positive compile-time int); the loop
    variable is a scalar. A stepped grid is a tile loop of blocks of `step` whose variable
    is each block's begin."""
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step <= 0):
        got = (f"the runtime argument '{step.symbol.name}'" if hasattr(step, "symbol") else repr(step))
        raise exc.IncorrectTileUsage(
            f"hl.grid(begin, end, step): the step must be a positive compile-time int (an int, or "
            f"hl.specialize of an argument); got {got}.")
    spec = tile(begin_or_end, end_or_none, block_size=1 if step is None else step)
    spec.kind = "grid"
    return spec


def jagged_tile(lengths: Any, block_size: Any = None) -> TileIterable:
    """Helion's ragged inner loop: `for tile_k in hl.jagged_tile(lengths)` under a tile
    `tile_b` of rows, `lengths` a vector over `tile_b` (each row's own length). It is
    `for tile_k in hl.tile(0, lengths.amax())` whose accesses (hl.load, hl.store and
    subscripts of kernel tensors) that tile_k and tile_b index are masked where
    `tile_k.index >= lengths` along them: a masked load reads 0, a masked store writes
    nothing (frontend/jagged.py). An access tile_k indexes without tile_b is an error."""
    spec = tile(0, lengths.amax(), block_size=block_size)
    spec.jagged = lengths
    return spec


vtile = jagged_tile


class Tile:
    """Type of a tile loop variable (for annotations); the tracer creates the real ones."""


def static_range(*args: Any) -> range:
    """`for i in hl.static_range(4):` a loop unrolled when the kernel is compiled: `i` is a
    Python int in each copy of the body (so `blk[i]` is a constant index). Bounds are ints
    (an int argument is made a constant of the variant, as `hl.specialize` makes it); a
    runtime bound needs `hl.tile`/`hl.grid`."""
    if not 1 <= len(args) <= 3:
        raise exc.UnsupportedSyntax("hl.static_range takes 1 to 3 ints, like range().")
    # an int argument (or ints and int arguments combined: `k - 1`) is a constant of the
    # variant, as hl.specialize makes it
    tracer = active_tracer()
    if tracer is not None:
        args = tuple(arg if isinstance(arg, int) else tracer.static_int(arg) for arg in args)
    for arg in args:
        if isinstance(arg, bool) or not isinstance(arg, int):
            raise exc.UnsupportedOperation(
                f"hl.static_range bounds must be compile-time ints; got {type(arg).__name__}. Use "
                "hl.specialize(...) for a size, or hl.tile/hl.grid for a runtime range.")
    return range(*args)


def tile_begin(tile: Any) -> Any:
    """`tile.begin`: the first index of the tile (Helion's function form)."""
    return tile.begin


def tile_end(tile: Any) -> Any:
    """`tile.end`: one past the tile's last valid index (the range's end for the last tile)."""
    return tile.end


def tile_block_size(tile: Any) -> Any:
    """`tile.block_size`: the tile's block size."""
    return tile.block_size


def tile_id(tile: Any) -> Any:
    """`tile.id`: the tile's position among the loop's tiles (`begin // block_size`)."""
    return tile.id


def tile_index(tile: Any) -> Any:
    """`tile.index`: the tile's indices as a vector (`begin + arange(block_size)`)."""
    return tile.index


def subscript(tensor: Any, index: Sequence[Any]) -> Any:
    """`tensor[index]` for a device value (`hl.subscript(x, [None, slice(None)])`)."""
    return tensor[tuple(index)]


REFUSED_ANCHOR = "refused-hl-names"  # the supported-forms page's section listing them


def _no_tpu_equivalent(name: str, why: str, instead: str):
    """A Helion name a TPU has no equivalent of: calling it raises, saying `why` and what to
    write `instead`; both are also the function's attributes, which the supported-forms page
    lists (`is_refused`)."""
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise exc.UnsupportedOperation(f"hl.{name} has no TPU equivalent: {why}. {instead}",
                                       forms_anchor=REFUSED_ANCHOR)
    refuse.__name__ = refuse.__qualname__ = name
    refuse.__doc__ = f"Not on a TPU: {why}. {instead}"
    refuse.why, refuse.instead = why, instead
    return refuse


def is_refused(item: Any) -> bool:
    """Whether an `hl` name is one a TPU has no equivalent of (`_no_tpu_equivalent`)."""
    return hasattr(item, "why") and hasattr(item, "instead")


_ONE_CALL_PER_LOOP = ("Each top-level device loop of a kernel is its own pallas_call, which finishes "
                      "before the next one starts: put the work after the barrier in a second "
                      "`for ... in hl.tile(...)` loop.")
_SYMMETRIC_MEMORY = ("Copy between devices with hl.make_async_remote_copy(...) and synchronize with "
                     "hl.remote_barrier(...) in a kernel run under jax.shard_map.")
BARRIER_IN_DEVICE_CODE = (
    "hl.barrier() inside a device loop has no TPU equivalent: it synchronizes the programs of a "
    "persistent GPU grid, and a TPU runs a grid's programs one after another on each core. "
    + _ONE_CALL_PER_LOOP)


def barrier() -> None:
    """Between two top-level device loops (in host code): every program of the loop before
    has finished, and its stores have landed, before any program of the loop after starts.
    Each top-level loop of a pallasite kernel is its own pallas_call, run in order, so this
    holds already and the barrier emits nothing; it is accepted so that Helion programs
    that write it between their phases run unchanged. Inside a device loop (a GPU grid's
    programs meeting) it is refused: a TPU has no equivalent."""
    _tracer("barrier").barrier()

signal = _no_tpu_equivalent("signal", "it signals through GPU symmetric memory", _SYMMETRIC_MEMORY)
wait = _no_tpu_equivalent("wait", "it waits on GPU symmetric memory", _SYMMETRIC_MEMORY)
StackTensor = _no_tpu_equivalent("StackTensor", "it addresses GPU symmetric memory", _SYMMETRIC_MEMORY)
stacktensor_like = _no_tpu_equivalent("stacktensor_like", "it allocates GPU symmetric memory", _SYMMETRIC_MEMORY)
_NO_INLINE = "Write the computation with torch ops on tiles; pallasite lowers them to Pallas."
inline_asm_elementwise = _no_tpu_equivalent("inline_asm_elementwise", "it inlines GPU (PTX) assembly",
                                            _NO_INLINE)
inline_triton = _no_tpu_equivalent("inline_triton", "it inlines Triton code", _NO_INLINE)
triton_kernel = _no_tpu_equivalent("triton_kernel", "it calls a Triton kernel", _NO_INLINE)


# `device=` of the creation functions: Helion programs pass their tensors' device (`x.device`)
# so one kernel serves every backend. A device value lives where the kernel runs (the TPU's
# VMEM, or interpret mode's simulation of it), so the argument is accepted and has nothing to
# choose.


def zeros(shape: Sequence[Any], dtype: torch.dtype = torch.float32, device: Any = None) -> Any:
    """A device tensor of zeros; `shape` may hold tiles (their block size) and ints."""
    return _tracer("zeros").full(shape, 0, dtype)


def full(shape: Sequence[Any], value: Any, dtype: torch.dtype = torch.float32, device: Any = None) -> Any:
    """A device tensor filled with `value`; a number `dtype` cannot hold (`-inf` as int32)
    is refused, as torch.full refuses it, in compiled and reference mode alike."""
    if isinstance(value, (int, float)) and isinstance(dtype, torch.dtype):
        try:
            with torch._C.DisableTorchFunction():  # torch's own check, past the tracer's mode
                torch.full((1,), value, dtype=dtype)
            if dtype.is_floating_point and math.isfinite(value) and abs(value) > torch.finfo(dtype).max:
                # torch.full's check of a float dtype's range, which the call above skips
                raise RuntimeError(f"value cannot be converted to type {dtype} without overflow")
        except (RuntimeError, OverflowError) as err:
            raise exc.UnsupportedDtype(f"hl.full(..., {value!r}, dtype={dtype}): {err}.") from None
    return _tracer("full").full(shape, value, dtype)


def arange(*args: Any, dtype: torch.dtype = torch.int32, device: Any = None) -> Any:
    """`hl.arange(end)` / `hl.arange(begin, end[, step])` as a device vector."""
    return _tracer("arange").arange(args, dtype)


def specialize(value: Any) -> Any:
    """Make a size or scalar argument a compile-time constant (the kernel recompiles per value)."""
    tracer = active_tracer()
    if tracer is None:
        return value
    return tracer.specialize(value)


def register_block_size(*args: Any) -> Any:
    """Declare a tunable block size for a dimension of the given extent (`min`, `max`)."""
    return _tracer("register_block_size").register_block_size(args)


def register_reduction_dim(size: Any) -> Any:
    """Declare a dimension each program holds whole, to reduce over it (Helion's
    `hl.register_reduction_dim(n)`): returns its extent, a compile-time int usable in shapes
    (`hl.zeros([tile_m, n])`) and host arithmetic. The whole dimension is one block (a full
    array dim is always a legal TPU block); the `reduction_loops` config knob may still
    chunk a reduction over it."""
    if active_tracer() is None:
        raise exc.UnsupportedSyntax(
            "hl.register_reduction_dim can only be used inside a function decorated with @pallasite.kernel.")
    if isinstance(size, bool) or isinstance(size, float) or getattr(size, "shape", None):
        raise exc.UnsupportedOperation(f"hl.register_reduction_dim takes a size (an int), got {size!r}.")
    return specialize(size)


def register_tunable(name: str, fragment: Fragment) -> Any:
    """Declare a user tunable (e.g. `hl.register_tunable("split_k", hl.PowerOfTwoFragment(1, 8))`):
    it joins the kernel's config space, and returns the config's value (a host value)."""
    return _tracer("register_tunable").register_tunable(name, fragment)


class constexpr:  # noqa: N801 - Helion's spelling
    """A compile-time constant: annotate a kernel parameter (`n: hl.constexpr`), or wrap the
    value a call passes (`kernel(x, hl.constexpr(4))`); either way the kernel is specialized
    to the value and its code sees the plain value."""

    def __init__(self, value: Any = None):
        self.value = value

    def __repr__(self) -> str:
        return f"hl.constexpr({self.value!r})"


def constexpr_value(value: Any) -> Any:
    """The value an argument passed as `hl.constexpr(v)` stands for (others unchanged)."""
    return value.value if isinstance(value, constexpr) else value


def dot(a: Any, b: Any, acc: Any = None, out_dtype: torch.dtype | None = None) -> Any:
    """Matrix product of two device tiles with f32 accumulation (`acc + a @ b`)."""
    return _tracer("dot").dot(a, b, acc, out_dtype)


def rand(shape: Sequence[Any], seed: Any, device: Any = None) -> Any:
    """Uniform float32 numbers in [0, 1) of `shape` (tiles and ints), from `seed` (an int, an
    int kernel argument or an integer device scalar).

    An element's number depends only on the seed and its coordinates (a tile
    axis counts the tensor's indices, an int axis 0..n-1, and loops that size
    no axis count their tile's begin), so it does not change with block sizes
    or loop strategy, and the same seed gives the same numbers.

    `torch.rand_like(v)` of a device value also works: it takes its seed from
    torch's default generator on every call of the kernel (`torch.manual_seed`
    reproduces it), and its numbers depend on the block sizes.
    """
    return _tracer("rand").rand(shape, seed)


_RANDINT_SPAN = 2**24  # float32 holds every integer up to here: wider spans would skip values


def randint(shape: Sequence[Any], low: int, high: int, seed: Any, device: Any = None) -> Any:
    """Uniform int32 numbers in [low, high) of `shape`, from `seed`: `hl.rand`'s numbers
    scaled to the range, so an element's number depends only on the seed and its
    coordinates, as there. `high - low` may be at most 2**24 (float32 holds every integer
    up to it)."""
    for name, bound in (("low", low), ("high", high)):
        if isinstance(bound, bool) or not isinstance(bound, int):
            raise exc.UnsupportedOperation(f"hl.randint({name}={bound!r}): the range's bounds are ints known "
                                           "when compiling.")
    if not 0 < high - low <= _RANDINT_SPAN:
        raise exc.UnsupportedOperation(
            f"hl.randint(low={low}, high={high}): expected low < high and high - low <= 2**24 (the numbers "
            "are drawn in float32, which holds every integer only up to 2**24).")
    span = high - low
    scaled = torch.floor(rand(shape, seed) * float(span))
    return torch.clamp(scaled, max=float(span - 1)).to(torch.int32) + low


def dot_scaled(*args: Any, **kwargs: Any) -> Any:
    """Not on a TPU: `hl.dot_scaled` multiplies microscaling (MX) operands, low-precision
    blocks each with a shared power-of-two scale, which the MXU has no instruction for."""
    raise exc.UnsupportedOperation(
        "hl.dot_scaled has no TPU equivalent: it multiplies microscaling (MX: e2m1/e4m3 blocks with shared "
        "e8m0 scales) operands, and the TPU's MXU has no block-scaled matmul. Dequantize each operand tile "
        "(`a.to(torch.bfloat16) * a_scale`) and use hl.dot(a, b, acc=acc).")


def device_print(prefix: str, *values: Any) -> None:
    """Print `prefix` and device values from inside a device loop, each program as it runs
    (`pl.debug_print`: TPU interpret mode prints on the host; on a TPU it goes to the
    runtime's log). int32 scalars print together on one line; any other value (a vector,
    a float) prints on its own line after the prefix, as Mosaic logs one vector at a time.
    Constants print as device scalars."""
    if not isinstance(prefix, str):
        raise exc.UnsupportedOperation(f"hl.device_print's first argument is its text, got {prefix!r}.")
    _tracer("device_print").device_print(prefix, values)


def make_async_remote_copy(src: Any, src_index: Any, device_id: Any, dst: Any = None,
                           dst_index: Any = None) -> Any:
    """A copy of `src[src_index]` into `dst[dst_index]` on the device whose flat rank is
    `device_id` (row-major over every mesh axis: on a 2x2 mesh, `x * 2 + y`).

    `dst` defaults to `src` and `dst_index` to `src_index` (a symmetric push).
    Each index selects leading dims (an int, a runtime scalar, or a tuple of
    them); the rest of the tensor is copied as one contiguous region, so source
    and destination must agree in dtype and element count. Returns a descriptor:
    `.start()`, then `.wait()` (sent and the matching receive landed here),
    or `.wait_send()` / `.wait_recv()` separately. Runs only in a kernel launched
    on every device of a mesh (`kernel.jax_fn` under `jax.shard_map`).
    """
    return _tracer("make_async_remote_copy").remote_copy(src, src_index, device_id, dst, dst_index)


def remote_barrier(device_ids: Any, rank: Any = None) -> None:
    """Wait until every device in `device_ids` (a flat rank, a list of them, or a 1-D
    slice of an int tensor) has reached its matching barrier; what each did before it
    happens before what this device does after. Peers must name each other, barrier for
    barrier (ring neighbours do): each waits for one signal from each peer it names, so a
    peer that never names this device back leaves it waiting. The barrier may be passed
    again every hop and every call (docs/design/remote-copies.md: the ring barrier protocol).
    With `rank` (this device's flat rank), `device_ids` name every other device of the mesh
    once: their count is checked when traced, and interpret mode checks the values (each
    device once, `rank` this device's) before any signal; a violation fails the run."""
    _tracer("remote_barrier").remote_barrier(device_ids, rank)


def all_reduce(dst: Any, src: Any, peers: Any, rank: Any, algorithm: str | None = None) -> None:
    """`dst` = the sum of `src` over every device of the mesh, in float32 (int32 for
    integers), cast to `dst`'s dtype; the same bits on every device. Called between device
    loops (after the loop that writes `src`); `peers` is a 1-D int tensor of the other
    devices' flat ranks (`peers[0, :]`), `rank` this device's as a one-element tensor.
    `algorithm`: "one_shot" (push `src` to every peer, then sum), "reduce_scatter" (each
    device sums one chunk of the last dim and pushes it to every peer; the dim must divide
    by the device count), or None (chosen by payload). Runs in a kernel launched on every
    device of a mesh (`kernel.jax_fn` under `jax.shard_map`). `peers` must name every other
    device of the mesh once and `rank` this device's own rank: their count is checked when
    traced, and interpret mode checks the values (a violation fails the run; inside
    `pallasite.range_checked()` it is `exc.ShapeMismatch` naming the call); a TPU does not."""
    _tracer("all_reduce").all_reduce(dst, src, peers, rank, algorithm)


def associative_scan(combine_fn: Any, input_tensor: Any, dim: int, reverse: bool = False) -> Any:
    """The inclusive scan of a tile value (or a tuple of them) along `dim` with an associative
    `combine_fn(a, b)` of tile values (`a` the earlier elements; for a tuple input either
    `fn(a_tuple, b_tuple)` or `fn(a0, a1, ..., b0, b1, ...)`). `reverse` scans from the end,
    as torch's flip, scan, flip. A partial tile's padding never reaches the combine."""
    return _tracer("associative_scan").associative_scan(combine_fn, input_tensor, dim, reverse)


def cumsum(input_tensor: Any, dim: int, reverse: bool = False) -> Any:
    """`torch.cumsum(x, dim)` of a tile value; `reverse` sums from the end."""
    return _tracer("cumsum").cumulative("cumsum", input_tensor, dim, reverse)


def cumprod(input_tensor: Any, dim: int, reverse: bool = False) -> Any:
    """`torch.cumprod(x, dim)` of a tile value; `reverse` multiplies from the end."""
    return _tracer("cumprod").cumulative("cumprod", input_tensor, dim, reverse)


def reduce(combine_fn: Any, input_tensor: Any, dim: int | None = None, other: Any = 0,
           keep_dims: bool = False) -> Any:
    """Every element of a tile value (or a tuple of them) along `dim` (None: all dims)
    combined with an associative `combine_fn(a, b)`, `a` the earlier elements (row-major
    order, as a left fold: a combine keeping the earlier of equals, a first-index argmax, is
    answered as written). Only valid elements are
    combined: a partial tile's padding never reaches it, so `other` (Helion's fill for
    masked elements) is accepted and changes nothing."""
    return _tracer("reduce").reduce(combine_fn, input_tensor, dim, other, keep_dims)


def split(tensor: Any) -> tuple[Any, Any]:
    """The two halves of a device value's last dim, which must have size 2: `(x[..., 0],
    x[..., 1])`, each without that dim (Helion's `hl.split`). RoPE's pairs,
    `x.reshape(m, d // 2, 2)` split into the even and odd lanes of x, are gathered from x's
    d lanes directly (frontend/lane_pairs.py): no (m, d // 2, 2) value is built."""
    return _tracer("split").split(tensor)


def join(tensor0: Any, tensor1: Any) -> Any:
    """`torch.stack([tensor0, tensor1], -1)` of two device values, broadcast to one shape
    first: a new last dim of size 2 (Helion's `hl.join`). Reshaped so that dim merges into
    the one before it (`hl.join(a, b).reshape(m, d)`), the result interleaves a's and b's
    lanes (a, b, a, b, ...) without building the pairs (frontend/lane_pairs.py)."""
    return _tracer("join").join(tensor0, tensor1)
