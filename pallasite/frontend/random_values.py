"""`hl.rand` and `torch.rand_like` in device code: the counter each element hashes.

A random number is a pure function of (seed, stream, counter) — the
`random_uniform` op — where the counter numbers the element among all the
elements the kernel could draw there, in mixed radix:

- the begins of the enclosing loop dims that size no axis of the shape
  (outermost first; extent: the dim's end), so every program and inner tile
  draws its own numbers;
- then per axis of the shape: a tile's absolute index (extent: its dim's end),
  or for an int `n` the position 0..n-1.

Along tile axes the counter is an element's coordinate, so `hl.rand([tile_m,
tile_n], seed)` gives the same numbers for every block size and loop
strategy. `torch.rand_like(v)` knows no tiles (a value does not say which tile
sizes which axis), so it numbers positions in the block and folds every
enclosing dim in: its numbers depend on the block sizes. Its seed is drawn
from torch's default generator on each call (`KernelIR.random_seed`), and
each call site is its own stream. Counters wrap in int32; they are unique
while the counted space stays under 2**32 elements.
"""
from __future__ import annotations

from typing import Any

import torch

from .. import exc
from ..ir import ScalarSymbol, TileDim
from . import device_values
from .proxies import DeviceTensor, HostScalar, TileProxy, static_int

_FLOAT_RESULTS = (torch.float32, torch.bfloat16, torch.float16)


def rand(recorder: Any, shape: Any, seed: Any) -> DeviceTensor:
    """`hl.rand(shape, seed)`: float32 uniform in [0, 1); `shape` holds tiles and ints."""
    entries = list(shape) if isinstance(shape, (list, tuple, torch.Size)) else [shape]
    entries = [static_int(entry) for entry in entries]  # int arguments: constants of the variant
    return _uniform(recorder, entries, _seed_operand(recorder, seed), 0, torch.float32)


def rand_like(recorder: Any, args: tuple, kwargs: dict) -> DeviceTensor:
    """`torch.rand_like(v)` of a device value: uniform in [0, 1) of v's (float) dtype."""
    like = args[0] if args else kwargs.get("input")
    if not isinstance(like, DeviceTensor):
        raise exc.UnsupportedOperation(
            "torch.rand_like in device code needs a device value (a loaded or computed tile); "
            "for a shape of tiles write hl.rand([tile_m, tile_n], seed=...).")
    unknown = set(kwargs) - {"input", "dtype", "device", "layout", "memory_format"}
    if len(args) > 1 or unknown:
        raise exc.UnsupportedOperation("torch.rand_like(x, dtype=...) takes no other arguments in device code.")
    dtype = kwargs.get("dtype") or like.dtype
    if dtype not in _FLOAT_RESULTS:
        raise exc.UnsupportedDtype(
            f"torch.rand_like of a {dtype} value: random numbers need a float dtype "
            "(pass dtype=torch.float32).")
    if recorder.random_seed is None:
        recorder.random_seed = ScalarSymbol("random_seed", torch.int32)
    seed = recorder.scalar_value(HostScalar(recorder, recorder.random_seed, int))
    recorder.random_streams += 1
    return _uniform(recorder, list(like.meta.shape), seed, recorder.random_streams, dtype, sized_by_tiles=False)


def _seed_operand(recorder: Any, seed: Any) -> Any:
    if isinstance(seed, int) and not isinstance(seed, bool):
        seed &= 0xFFFFFFFF  # as an int32's bits
        return seed - (1 << 32) if seed >= 1 << 31 else seed
    scalar = isinstance(seed, HostScalar) or isinstance(seed, DeviceTensor) and tuple(seed.shape) == ()
    if scalar and seed.dtype in (torch.int32, torch.int64):
        return recorder.device_operand(seed)
    raise exc.UnsupportedOperation(
        f"hl.rand(shape, seed) needs an int seed (a Python int, an int argument of the kernel or "
        f"an integer device scalar), got {seed!r}.")


def _uniform(recorder: Any, entries: list, seed: Any, stream: int, dtype: torch.dtype,
             sized_by_tiles: bool = True) -> DeviceTensor:
    shape_dims = {entry.dim.id for entry in entries if isinstance(entry, TileProxy)}
    counter = None
    for dim in recorder.active_dims():
        if dim.id not in shape_dims:
            counter = _digit(counter, DeviceTensor(recorder, dim.begin_value), _extent(recorder, dim))
    for axis, entry in enumerate(entries):
        view = [1] * len(entries)
        if isinstance(entry, TileProxy) and sized_by_tiles:
            coordinate, extent, view[axis] = entry.index, _extent(recorder, entry.dim), entry.dim.block_size
        elif isinstance(entry, int) and not isinstance(entry, bool):
            coordinate, extent, view[axis] = device_values.arange(recorder, (entry,), torch.int32), entry, entry
        else:
            raise exc.UnsupportedOperation(f"Shapes of device values are tiles and ints, got {entry!r}.")
        counter = _digit(counter, coordinate.reshape(view), extent)
    if counter is None:
        raise exc.UnsupportedSyntax("Random numbers are drawn inside a device loop.")
    if not counter.value.name:
        counter.value.name = "counter"  # a variable of its own in the generated code
    shape = tuple(_size(entry) for entry in entries)
    value = recorder.record("random_uniform", (counter.value, seed), {"stream": stream}, shape, dtype)
    return DeviceTensor(recorder, value)


def _digit(counter: DeviceTensor | None, coordinate: DeviceTensor, extent: Any) -> DeviceTensor:
    """The counter with one more mixed-radix digit: `counter * extent + coordinate`."""
    return coordinate if counter is None else counter * extent + coordinate


def _extent(recorder: Any, dim: TileDim) -> Any:
    """How many coordinates a dim has: its end (a tile's index runs below it)."""
    return dim.end if isinstance(dim.end, int) else DeviceTensor(recorder, dim.end)


def _size(entry: Any) -> int:
    return entry.dim.block_size if isinstance(entry, TileProxy) else entry
