"""The kernel language, imported as `hl` (Helion-compatible).

Every function here is meaningful only while pallasite traces a kernel or
runs it in reference mode; it delegates to the active tracer (the frontend's
`Tracer`, or `pallasite.reference.ReferenceRunner`). Outside a kernel they
raise a clear error.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from .. import exc
from .tunables import BooleanFragment, EnumFragment, Fragment, IntegerFragment, PowerOfTwoFragment

__all__ = [
    "tile", "grid", "zeros", "full", "arange", "specialize", "register_block_size",
    "constexpr", "dot", "rand", "load", "store", "atomic_add", "atomic_and", "atomic_or", "atomic_xor",
    "atomic_max", "atomic_min", "atomic_xchg", "atomic_cas", "Tile", "TileIterable", "static_range",
    "register_tunable", "Fragment", "IntegerFragment", "PowerOfTwoFragment", "EnumFragment",
    "BooleanFragment",
    "make_async_remote_copy", "remote_barrier",
    "tile_begin", "tile_end", "tile_block_size", "tile_id", "tile_index", "subscript",
    "barrier", "signal", "wait", "StackTensor", "stacktensor_like", "inline_asm_elementwise",
    "inline_triton", "triton_kernel",
    "associative_scan", "cumsum", "cumprod", "reduce",
    "register_reduction_dim", "randint", "dot_scaled", "device_print",
]

ATOMIC_SEMANTICS = ("relaxed", "acquire", "release", "acq_rel")

_active_tracer = None


def _tracer(what: str):
    if _active_tracer is None:
        raise exc.UnsupportedSyntax(
            f"hl.{what} can only be used inside a function decorated with @pallasite.kernel."
        )
    return _active_tracer


def set_active_tracer(tracer) -> Any:
    """Install `tracer` for the duration of a trace (or a reference run); returns the previous one."""
    global _active_tracer
    previous, _active_tracer = _active_tracer, tracer
    return previous


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

    def __iter__(self):
        raise exc.UnsupportedSyntax(
            f"hl.{self.kind}(...) is a device loop: use it as the iterable of a for "
            "loop inside a @pallasite.kernel function."
        )


def _as_list(value: Any) -> tuple[list[Any], bool]:
    if isinstance(value, (list, tuple, torch.Size)):
        return list(value), True
    return [value], False


def tile(begin_or_end: Any, end_or_none: Any = None, block_size: Any = None) -> TileIterable:
    """Iterate over tiles of one or more dimensions: `hl.tile(n)`, `hl.tile(b, e)`, `hl.tile([m, n])`."""
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
    return TileIterable("tile", begins, ends, sizes, multi)


def grid(begin_or_end: Any, end_or_none: Any = None) -> TileIterable:
    """Iterate over single indices: `for g in hl.grid(n)`; the loop variable is a scalar."""
    spec = tile(begin_or_end, end_or_none, block_size=1)
    spec.kind = "grid"
    return spec


class Tile:
    """Type of a tile loop variable (for annotations); the tracer creates the real ones."""


def static_range(*args: Any) -> range:
    """`for i in hl.static_range(4):` a loop unrolled when the kernel is compiled: `i` is a
    Python int in each copy of the body (so `blk[i]` is a constant index). Bounds are ints
    (or `hl.specialize`d values); a runtime bound needs `hl.tile`/`hl.grid`."""
    if not 1 <= len(args) <= 3:
        raise exc.UnsupportedSyntax("hl.static_range takes 1 to 3 ints, like range().")
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


def _no_tpu_equivalent(name: str, why: str, instead: str):
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise exc.UnsupportedOperation(f"hl.{name} has no TPU equivalent: {why}. {instead}")
    refuse.__name__ = refuse.__qualname__ = name
    refuse.__doc__ = f"Not on a TPU: {why}. {instead}"
    return refuse


_ONE_CALL_PER_LOOP = ("Each top-level device loop of a kernel is its own pallas_call, which finishes "
                      "before the next one starts: put the work after the barrier in a second "
                      "`for ... in hl.tile(...)` loop.")
_SYMMETRIC_MEMORY = ("Copy between devices with hl.make_async_remote_copy(...) and synchronize with "
                     "hl.remote_barrier(...) in a kernel run under jax.shard_map.")
_barrier_in_a_loop = _no_tpu_equivalent(
    "barrier", "inside a device loop it would synchronize the programs of a persistent GPU grid, and a "
    "TPU runs a grid's programs one after another on each core", _ONE_CALL_PER_LOOP)


def barrier() -> None:
    """`hl.barrier()` between two top-level device loops: every program of the first loop
    finishes before the second starts. Each top-level loop is its own `pallas_call`, and
    one call finishes before the next begins, so here the order already holds and the
    barrier is nothing more. Inside a device loop a TPU has no equivalent (an error)."""
    if _tracer("barrier").in_device:
        _barrier_in_a_loop()
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
    """A device tensor filled with `value`."""
    return _tracer("full").full(shape, value, dtype)


def arange(*args: Any, dtype: torch.dtype = torch.int32, device: Any = None) -> Any:
    """`hl.arange(end)` / `hl.arange(begin, end[, step])` as a device vector."""
    return _tracer("arange").arange(args, dtype)


def specialize(value: Any) -> Any:
    """Make a size or scalar argument a compile-time constant (the kernel recompiles per value)."""
    if _active_tracer is None:
        return value
    return _active_tracer.specialize(value)


def register_block_size(*args: Any) -> Any:
    """Declare a tunable block size for a dimension of the given extent (`min`, `max`)."""
    return _tracer("register_block_size").register_block_size(args)


def register_reduction_dim(size: Any) -> Any:
    """Declare a dimension each program holds whole, to reduce over it (Helion's
    `hl.register_reduction_dim(n)`): returns its extent, a compile-time int usable in shapes
    (`hl.zeros([tile_m, n])`) and host arithmetic. The whole dimension is one block (a full
    array dim is always a legal TPU block); the `reduction_loops` config knob may still
    chunk a reduction over it."""
    if _active_tracer is None:
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
    """Annotate a kernel parameter as a compile-time constant: `n: hl.constexpr`."""

    def __init__(self, value: Any = None):
        self.value = value


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


def _is_index_vector(item: Any) -> bool:
    """An index tensor in a subscript (not a tile, an int, a slice or a 0-d scalar)."""
    shape = getattr(item, "shape", None)  # tiles (the tracer's and reference mode's) have none
    return shape is not None and len(shape) > 0 and not isinstance(getattr(type(item), "block_size", None),
                                                                     property)


def load(tensor: Any, index: Sequence[Any], extra_mask: Any = None, eviction_policy: Any = None) -> Any:
    """`hl.load(x, [tile_m, tile_n])` is `x[tile_m, tile_n]`.

    `extra_mask` (a bool tensor shaped like the result) keeps the loaded values where it
    is true and gives 0 elsewhere, as Helion's masked load does; an index tensor the mask
    broadcasts to reads row 0 where the mask is false, so masked-off lanes may hold any
    index (a jagged row past its segment). `eviction_policy` is a GPU cache hint: a TPU
    kernel moves whole blocks, so it changes nothing."""
    if extra_mask is None:
        return tensor[tuple(index)]
    mask_shape = tuple(getattr(extra_mask, "shape", ()))
    key = tuple(torch.where(extra_mask, item, 0) if _is_index_vector(item) and _covers(item.shape, mask_shape)
                else item for item in index)
    return torch.where(extra_mask, tensor[key], 0)


def _covers(shape: Sequence[int], mask_shape: Sequence[int]) -> bool:
    """Whether a mask of `mask_shape` broadcasts to `shape` (so it masks each index)."""
    try:
        return tuple(torch.broadcast_shapes(tuple(shape), tuple(mask_shape))) == tuple(shape)
    except RuntimeError:
        return False


def store(tensor: Any, index: Sequence[Any], value: Any, extra_mask: Any = None) -> None:
    """`hl.store(x, [tile], v)` is `x[tile] = v`.

    `extra_mask` (a bool tensor shaped like the stored window) stores `v` where it is true
    and keeps the old contents elsewhere. Not through an index tensor: a masked-off lane
    would still name a row, and rewriting it with its old contents could undo another
    lane's write."""
    key = tuple(index)
    if extra_mask is None:
        tensor[key] = value
        return
    if any(_is_index_vector(item) for item in key):
        raise exc.UnsupportedOperation(
            "hl.store(x, [idx, ...], v, extra_mask=m) through an index tensor is not supported: a "
            "masked-off lane still names a row, and writing it back could undo another lane's store. "
            "Scatter only the lanes that write: give them their own index tensor, or write "
            "`x[idx, ...] = v` with every lane's index valid.")
    tensor[key] = torch.where(extra_mask, value, tensor[key])


def _atomic(name: str, target: Any, index: Sequence[Any], combine, sem: str) -> Any:
    """`target[index] = combine(old)` in the program that owns `index`; returns `old`.

    With tile, ':' and scalar indices each element belongs to one program (the one
    owning its tiles), so an atomic is a read-modify-write there, planned like
    `x[tile] += v` (a target combined across programs keeps one resident block and its
    grid axis runs in sequence); `sem` is accepted for Helion compatibility and changes
    nothing. `combine` is torch code on the old values, recorded like the user's own
    (reference mode runs it on the real tensors). Through an index tensor duplicates
    would race, which TPU programs cannot do atomically: an error says what to write.
    """
    if sem not in ATOMIC_SEMANTICS:
        raise exc.UnsupportedOperation(
            f"hl.{name}(sem={sem!r}): sem must be one of {', '.join(map(repr, ATOMIC_SEMANTICS))}.")
    return _tracer(name).atomic_update(name, target, tuple(index), combine)


def _filled_like(old: Any, value: Any) -> Any:
    """`value` as a tensor shaped like `old` when it is a Python number."""
    if isinstance(value, (bool, int, float)):
        return torch.full_like(old, value)
    return value


def atomic_add(target: Any, index: Sequence[Any], value: Any, sem: str = "relaxed") -> Any:
    """`target[index] += value`; returns the values before the add."""
    return _atomic("atomic_add", target, index, lambda old: old + value, sem)


def atomic_and(target: Any, index: Sequence[Any], value: Any, sem: str = "relaxed") -> Any:
    """`target[index] &= value` (integers and bools); returns the values before."""
    return _atomic("atomic_and", target, index, lambda old: old & value, sem)


def atomic_or(target: Any, index: Sequence[Any], value: Any, sem: str = "relaxed") -> Any:
    """`target[index] |= value` (integers and bools); returns the values before."""
    return _atomic("atomic_or", target, index, lambda old: old | value, sem)


def atomic_xor(target: Any, index: Sequence[Any], value: Any, sem: str = "relaxed") -> Any:
    """`target[index] ^= value` (integers and bools); returns the values before."""
    return _atomic("atomic_xor", target, index, lambda old: old ^ value, sem)


def atomic_max(target: Any, index: Sequence[Any], value: Any, sem: str = "relaxed") -> Any:
    """`target[index] = torch.maximum(target[index], value)`; returns the values before."""
    return _atomic("atomic_max", target, index, lambda old: torch.maximum(old, _filled_like(old, value)), sem)


def atomic_min(target: Any, index: Sequence[Any], value: Any, sem: str = "relaxed") -> Any:
    """`target[index] = torch.minimum(target[index], value)`; returns the values before."""
    return _atomic("atomic_min", target, index, lambda old: torch.minimum(old, _filled_like(old, value)), sem)


def atomic_xchg(target: Any, index: Sequence[Any], value: Any, sem: str = "relaxed") -> Any:
    """`target[index] = value`; returns the values before."""
    return _atomic("atomic_xchg", target, index, lambda old: _filled_like(old, value), sem)


def atomic_cas(target: Any, index: Sequence[Any], expected: Any, value: Any, sem: str = "relaxed") -> Any:
    """Compare and swap: `value` where `target[index] == expected`, the old value elsewhere;
    returns the values before."""
    return _atomic("atomic_cas", target, index,
                   lambda old: torch.where(old == expected, _filled_like(old, value), old), sem)


def atomic_index_tensor_error(name: str, target: str) -> exc.UnsupportedOperation:
    """The error for `hl.<name>(target, [idx, ...], v)` with an index tensor (tracer and
    reference mode)."""
    if name != "atomic_add":
        return exc.UnsupportedOperation(
            f"hl.{name}({target}, [...], v) through an index tensor is not supported: lanes naming "
            "the same element would race, and a TPU has no atomic scatter. Index the target with "
            "tiles (each element then belongs to one program), or loop over tiles of the destination "
            f"rows and combine the sources that hit them: `hit = idx[tile_i][None, :] == "
            f"tile_r.index[:, None]`, then reduce `torch.where(hit[:, :, None], v[tile_i, :][None], "
            f"identity)` over the sources' axis.")
    return exc.UnsupportedOperation(
        f"hl.atomic_add({target}, [...], v) through an index tensor is not supported: duplicate indices "
        "would have to add up, and a TPU has no atomic scatter-add. If the indices are unique, write "
        f"the scatter `{target}[idx, ...] = {target}[idx, ...] + v`; otherwise loop over tiles of the "
        "destination rows and add the sources that hit them with a one-hot matmul: "
        "`hit = idx[tile_i][None, :] == tile_r.index[:, None]; "
        f"{target}[tile_r, :] += torch.where(hit, 1.0, 0.0) @ v[tile_i, :]`.")


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


def remote_barrier(device_ids: Any) -> None:
    """Wait until every device in `device_ids` (a flat rank, a list of them, or a 1-D
    slice of an int tensor) has reached its matching barrier; what each did before it
    happens before what this device does after. Peers must name each other, barrier for
    barrier (ring neighbours do): each waits for one signal from each peer it names, so a
    peer that never names this device back leaves it waiting. The barrier may be passed
    again every hop and every call (docs/design/remote-copies.md: the ring barrier protocol)."""
    _tracer("remote_barrier").remote_barrier(device_ids)


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
    combined with an associative, commutative `combine_fn(a, b)`. Only valid elements are
    combined: a partial tile's padding never reaches it, so `other` (Helion's fill for
    masked elements) is accepted and changes nothing."""
    return _tracer("reduce").reduce(combine_fn, input_tensor, dim, other, keep_dims)
