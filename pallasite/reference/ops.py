"""Torch ops on device values in reference mode: the language's extent and dtype rules.

`DeviceSemantics` is a `TorchFunctionMode` active for a whole reference run.
Host code passes through untouched. Inside a device loop every torch call is
routed here:

- elementwise ops whose operands disagree on an axis's extent (neither is a
  broadcast axis) compute on the shorter extent: the longer operands are
  sliced to their first lanes (`agree`);
- reductions of bf16/f16 accumulate in f32; matmuls (`mm`, `bmm`, `matmul`,
  `@`, `addmm`, `baddbmm`, `hl.dot`) accumulate in f32 (int32 for integers)
  and return the promoted dtype (an `addmm` its input's dtype);
- int64 results narrow to int32 (device index arithmetic is 32-bit); a float cast to an
  integer saturates (`lanes.saturated`), as the compiled kernel's does;
- `x += v` on a device value is `x = x + v` (no aliasing, as in the compiled kernel);
  other in-place methods on device values and whole host tensors are rejected, as there.

Lanes (see `lanes.py`) are tracked through every op here: a one-index tile never broadcasts.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

from .. import exc
from .. import language as hl
from ..ir.ops import (
    FILL_ARGUMENT, OPS, OpKind, check_dot_accumulator, dtype_refusal, new_tensor_size_and_fill,
    refuses_dtype,
)
from ..ir.exact_ints import wrapped_to
from ..ir.ops.statistics import STATISTIC_DEFINITIONS
from ..frontend.torch_names import display_name
from ..frontend.walker import remember_under_operator
from . import in_place, indexing, int64, lanes, scans, views
from .operands import check_operands, current_runner, generic
from .views import VIEWS
from .extents import agree, describe_mark, partial_tiles, tile_axes

_LOW_PRECISION = (torch.bfloat16, torch.float16)


def _torch_names(ops) -> frozenset[str]:
    """The names torch calls the registry entries `ops` by: their spellings and Python operators."""
    names = set()
    for op in ops:
        names.update(spelling.name for spelling in op.spellings)
        if op.operator is not None:
            names.update(name for name in (op.operator.dunder, op.operator.reflected) if name)
    return frozenset(names)


def _of_kind(kind: OpKind) -> list:
    return [op for op in OPS.values() if op.kind is kind]


# Lane by lane, under the extent rule: the registry's elementwise ops but casts (`x.to(y)` takes
# only y's dtype, so y is no operand whose extent counts), and torch functions pallasite has
# no op for, which reference mode still runs lane by lane.
_CASTS = _torch_names([OPS["to"]])
_POINTWISE = (_torch_names(_of_kind(OpKind.ELEMENTWISE)) - _CASTS) | frozenset({
    "positive", "special_expit", "erfinv", "sgn", "isposinf", "isneginf", "selu", "celu", "logit",
    "fmax", "fmin", "masked_fill", "__div__", "__rdiv__", "__rlshift__", "__rrshift__"})
# 16-bit floats are reduced in float32 (`Accumulator.widens_half_floats`), as the kernel does;
# nansum and nanmean have no op, and do so too.
_ACCUMULATING = _torch_names(op for op in _of_kind(OpKind.REDUCTION)
                             if op.reduction.accumulator.widens_half_floats) | {"nansum", "nanmean"}
_REDUCTIONS = _torch_names(_of_kind(OpKind.REDUCTION)) | _ACCUMULATING
_STATISTICS = frozenset(spelling for composite in STATISTIC_DEFINITIONS for spelling in composite.spellings)
_MATMULS = _torch_names(_of_kind(OpKind.CONTRACTION))
# Contractions adding their product to an operand (addmm's input), which comes first.
_ADDING_MATMULS = _torch_names(op for op in _of_kind(OpKind.CONTRACTION) if op.contraction.addend is not None)


class DeviceSemantics(TorchFunctionMode):
    """Routes torch calls made inside device loops through the language's rules."""

    def __init__(self, runner: Any):
        super().__init__()
        self.runner = runner  # in_device, augmented, name_of(tensor)
        self._paused = False

    @contextlib.contextmanager
    def paused(self):
        """Plain PyTorch for reference mode's own bookkeeping (and for the compiler it may call)."""
        previous, self._paused = self._paused, True
        try:
            yield
        finally:
            self._paused = previous

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self._paused:
            return func(*args, **kwargs)
        if not self.runner.in_device:
            if any(lanes.is_device(item) for item in lanes.leaves((args, kwargs))):
                raise exc.DeviceValueInHostCode(
                    "A value from inside a device loop is used in host code; store it into a "
                    "tensor inside the loop instead.")
            indexing.refuse_tiles_in_host_code(func, args, self.runner.name_of)
            return func(*args, **kwargs)
        return device_call(func, args, kwargs, self.runner)


def device_call(func: Callable, args: tuple, kwargs: dict, runner: Any) -> Any:
    name, token = getattr(func, "__name__", ""), current_runner.set(runner)  # whose names messages use
    try:
        return _device_value_call(func, args, kwargs, runner, name)
    except exc.PallasiteError as err:  # under an operator method torch turns a TypeError into NotImplemented
        raise remember_under_operator(err)
    finally:
        current_runner.reset(token)


def _device_value_call(func: Callable, args: tuple, kwargs: dict, runner: Any, name: str) -> Any:
    if name in ("__get__", "__getitem__"):  # a view (`s[:, None]`, `c.T`) holds the same int64 numbers
        return int64.viewed(args, _device_call(func, args, kwargs, runner, name), runner.location)
    if name == "__setitem__":
        int64.check_stored(args[0], args[1], args[2], runner.location)
    elif int64.wanted(name, args, kwargs):
        # a value torch holds in int64: its int64 numbers, checked where the compiled kernel checks
        return int64.follow(func, name, args, kwargs, lambda f, a, k: _device_call(f, a, k, runner, name),
                            runner.location)
    return _device_call(func, args, kwargs, runner, name)


def _device_call(func: Callable, args: tuple, kwargs: dict, runner: Any, name: str) -> Any:
    try:
        if name in ("__getitem__", "__setitem__") and runner.jagged_active and not lanes.is_device(args[0]):
            # a kernel tensor inside hl.jagged_tile loops: hl.load/hl.store apply their mask (in
            # the mode again: torch leaves a mode while its handler runs)
            key = args[1] if isinstance(args[1], tuple) else (args[1],)
            with runner.mode:
                if name == "__getitem__":
                    return hl.load(args[0], key)
                return hl.store(args[0], key, args[2])
        if name == "__getitem__":
            return indexing.load(args[0], args[1], runner.name_of)
        if name == "__setitem__":
            indexing.store(args[0], args[1], args[2], runner.name_of, runner.own_view)
            return None
        if in_place.is_in_place(name):
            return in_place.updated(name, args, kwargs, runner, device_call)
        if name == "__get__":
            return views.property_of(func, args)
        if name in _CASTS and args and isinstance(args[0], torch.Tensor) and args[0].dtype.is_floating_point:
            return _float_cast(func, args, kwargs)
        if name in _POINTWISE:
            return _pointwise(func, args, kwargs, name)
        if name in _REDUCTIONS:
            return _reduction(func, name, args, kwargs)
        if name in _STATISTICS:
            return _statistic(func, args, kwargs)
        if name in ("cumsum", "cumprod"):
            check_operands((args, kwargs))
            dim = args[1] if len(args) > 1 else kwargs["dim"]
            return scans.cumulative(name, args[0], dim, dtype=kwargs.get("dtype"))
        if name in scans.ORDERINGS:
            check_operands((args, kwargs))
            return scans.ordering(name, args, kwargs)
        if name in _MATMULS:
            return _matmul(func, name, args, kwargs)
        if name in VIEWS:
            return VIEWS[name](func, args, kwargs)
        if name in _NEW_TENSORS:
            return _new_tensor(name, args, kwargs, runner)
        if name == "rand_like":
            return _rand_like(args, kwargs, runner)
        if name == "empty_like":  # the compiled kernel fills it with zeros: be deterministic
            func = torch.zeros_like
        return generic(func, args, kwargs)
    except exc.PallasiteError:
        raise
    except IndexError as err:  # torch's IndexError of a reduction over nothing is a shape error
        if name in ("__getitem__", "__setitem__"):
            raise exc.IndexingError(f"indexing: {err}") from None
        raise exc.ShapeMismatch(f"{_display(func, name)}: {err}") from None
    except (RuntimeError, TypeError, ValueError) as err:
        if refuses_dtype(err):
            raise dtype_refusal(_display(func, name), [*args, *kwargs.values()], err) from None
        raise exc.ShapeMismatch(f"{_display(func, name)}: {err}") from None


def _display(func: Callable, name: str) -> str:
    qualname = getattr(func, "__qualname__", name) or name
    if (getattr(func, "__module__", "") or "").startswith("torch._C._"):  # F.softshrink, torch.linalg.*
        return display_name(func)
    return "torch." + qualname.replace("TensorBase.", "Tensor.").replace("_VariableFunctionsClass.", "")


# ---------------------------------------------------------------- results --


def _float_cast(func: Callable, args: tuple, kwargs: dict) -> Any:
    """A float value cast to an integer dtype saturates, as the kernel's does (`lanes.saturated`)."""
    result = generic(func, args, kwargs)
    if not isinstance(result, torch.Tensor) or result.dtype.is_floating_point or result.dtype == torch.bool:
        return result
    return lanes.marked_as(lanes.saturated(args[0], result.dtype), result)


def _pointwise(func: Callable, args: tuple, kwargs: dict, name: str) -> Any:
    if name == "where" and len(args) + len(kwargs) == 1:
        return generic(func, args, kwargs)
    check_operands((args, kwargs))
    slots = [("arg", i) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    slots += [("kwarg", k) for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
    args, kwargs = list(args), dict(kwargs)
    tensors = [args[key] if kind == "arg" else kwargs[key] for kind, key in slots]
    sliced, axes = agree(tensors)
    for (kind, key), tensor in zip(slots, sliced):
        if kind == "arg":
            args[key] = tensor
        else:
            kwargs[key] = tensor
    result = lanes.finish(_int32_division_safe(func, name, args, kwargs), axes)
    if isinstance(result, torch.Tensor):
        tile_axes(tensors, result)
    offset = _shifted_run(name, args, kwargs)
    if offset is not None:  # `tile.index + c` stays a tile's shifted positions
        lanes.mark_run(result, offset)
    return result


def _int32_division_safe(func: Callable, name: str, args: list, kwargs: dict) -> Any:
    """`func(*args, **kwargs)`; a rounded integer division in int64 (torch's int32 kernel stops
    the process on int32 min // -1, which the compiled kernel wraps), cast back to its dtype."""
    integers = [a for a in args if isinstance(a, torch.Tensor) and not a.dtype.is_floating_point]
    if name != "div" or kwargs.get("rounding_mode") is None or len(integers) != len(
            [a for a in args if isinstance(a, torch.Tensor)]) or not integers:
        return func(*args, **kwargs)
    dtype = func(*(a.reshape(-1)[:0] if isinstance(a, torch.Tensor) else a for a in args), **kwargs).dtype
    wide = [a.to(torch.int64) if isinstance(a, torch.Tensor) else  # a number as torch converts it: uint8 -3 is 253
            wrapped_to(a, dtype) if type(a) is int else a for a in args]
    return func(*wide, **kwargs).to(dtype)


def _shifted_run(name: str, args: list, kwargs: dict) -> int | None:
    """The new shift when the call adds an int to (or subtracts one from) a tile's positions."""
    if name not in ("add", "sub", "__add__", "__radd__", "__sub__") or kwargs.get("alpha", 1) != 1 or len(args) != 2:
        return None
    runs = [lanes.run_offset(a) for a in args if lanes.is_run(a)]
    ints = [a for a in args if type(a) is int]
    if len(runs) != 1 or len(ints) != 1 or (name in ("sub", "__sub__") and not lanes.is_run(args[0])):
        return None
    return runs[0] + (-ints[0] if name in ("sub", "__sub__") else ints[0])


# ------------------------------------------------------------- reductions --


def _reduction(func: Callable, name: str, args: tuple, kwargs: dict) -> Any:
    source = args[0]
    other = args[1] if len(args) > 1 else kwargs.get("other")
    if name in ("max", "min") and isinstance(other, torch.Tensor):
        return _pointwise(func, args, kwargs, name)
    check_operands((args, kwargs))
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    if name in _ACCUMULATING and source.dtype in _LOW_PRECISION and kwargs.get("dtype") is None:
        result = func(source.float(), *args[1:], **kwargs)  # accumulate in f32, as the kernel does
        result = result.to(source.dtype)
    else:
        result = func(*args, **kwargs)
    return lanes.finish(result, _kept_lanes(source, dim, keepdim))


def _statistic(func: Callable, args: tuple, kwargs: dict) -> Any:
    """var/std/var_mean/std_mean: 16-bit floats in float32, rounded once, as the kernel does."""
    check_operands((args, kwargs))
    source = args[0]
    if getattr(func, "__name__", "") == "layer_norm":  # the shape kept; weight and bias in float32 too
        wide = source.dtype in _LOW_PRECISION
        result = func(*(a.float() if wide and isinstance(a, torch.Tensor) else a for a in args),
                      **{k: v.float() if wide and isinstance(v, torch.Tensor) else v for k, v in kwargs.items()})
        return lanes.finish(result.to(source.dtype), lanes.of(source))
    positional = list(args[1:])
    if positional and isinstance(positional[0], bool):  # var(x, unbiased)
        positional = []
    dim = positional[0] if positional else kwargs.get("dim")
    keepdim = positional[2] if len(positional) > 2 else kwargs.get("keepdim", False)
    if source.dtype in _LOW_PRECISION:
        result = func(source.float(), *args[1:], **kwargs)
        result = tuple(r.to(source.dtype) for r in result) if isinstance(result, tuple) else result.to(source.dtype)
    else:
        result = func(*args, **kwargs)
    axes = _kept_lanes(source, dim, keepdim)
    if isinstance(result, tuple):
        return tuple(lanes.finish(r, axes) for r in result)
    return lanes.finish(result, axes)


def _kept_lanes(source: torch.Tensor, dim: Any, keepdim: bool) -> set[int]:
    """The lane axes of a reduction's result: the source's lanes on the axes it keeps."""
    rank = source.ndim
    if dim is None:
        reduced = set(range(rank))
    else:
        dims = dim if isinstance(dim, (tuple, list)) else (dim,)
        reduced = {d % max(rank, 1) for d in dims}
    axes, out_axis = set(), 0
    for axis in range(rank):
        if axis in reduced:
            out_axis += 1 if keepdim else 0
            continue
        if axis in lanes.of(source):
            axes.add(out_axis)
        out_axis += 1
    return axes


# ----------------------------------------------------------------- matmul --


def _accumulator(tensor: torch.Tensor) -> torch.Tensor:
    """The operand in its accumulation dtype (f32, or int64 narrowed at the end), lanes kept."""
    wide = tensor.float() if tensor.dtype.is_floating_point else tensor.long()
    return wide if wide is tensor else lanes.mark(wide, lanes.of(tensor))


def product(a: torch.Tensor, b: torch.Tensor, func: Callable = torch.matmul) -> tuple[torch.Tensor, set[int]]:
    """`a @ b` accumulated in f32 (int64 for integers, narrowed later) and its lane axes.

    A contraction whose two extents differ only as a short tile and its block's
    size (a block-sized operand against a short tile) contracts over the shorter
    one; any other pair, two tiles' axes of different extents included, is
    torch's error.
    """
    check_operands((a, b))
    axes = set()
    rows_lane = a.ndim >= 2 and a.ndim - 2 in lanes.of(a)
    columns_lane = b.ndim >= 2 and b.ndim - 1 in lanes.of(b)
    a_axis, b_axis = a.ndim - 1, (b.ndim - 2 if b.ndim >= 2 else 0)
    ka, kb = lanes.real_extent(a, a_axis), lanes.real_extent(b, b_axis)
    tile_a, tile_b = lanes.tiles_of(a).get(a_axis), lanes.tiles_of(b).get(b_axis)
    if ka is not None and kb is not None and ka != kb and tile_a and tile_b and tile_a != tile_b:
        raise exc.ShapeMismatch(f"A matmul contracts {describe_mark(tile_a)} ({ka} positions) with "
                                f"{describe_mark(tile_b)} ({kb}): their extents differ (eager PyTorch raises).")
    if ka is not None and kb is not None and ka != kb and (min(ka, kb), max(ka, kb)) not in partial_tiles():
        raise exc.ShapeMismatch(f"A matmul contracts {ka} positions of one operand with {kb} of the other "
                                "(eager PyTorch raises).")
    if ka is not None and kb is not None and ka != kb:
        a = lanes.mark(a.narrow(a_axis, 0, min(ka, kb)), lanes.of(a))
        b = lanes.mark(b.narrow(b_axis, 0, min(ka, kb)), lanes.of(b))
    batch_axes: set[int] = set()
    if a.ndim > 2 and b.ndim > 2:
        (a, b), batch_axes = agree([a, b], trailing=2)
    result = func(_accumulator(a), _accumulator(b))
    if result.ndim >= 2:
        if rows_lane:
            axes.add(result.ndim - 2)
        if columns_lane:
            axes.add(result.ndim - 1)
        shift = result.ndim - 2 - max(a.ndim, b.ndim, 2) + 2
        axes |= {axis + shift for axis in batch_axes}
    return result, axes


def accumulate(acc: torch.Tensor, result: torch.Tensor, axes: set[int], scale_acc: Any = 1,
               scale_product: Any = 1) -> tuple[torch.Tensor, set[int]]:
    """`scale_acc * acc + scale_product * result` in the accumulator's precision, under the extent rule."""
    lanes.mark(result, axes)
    (bias, result), axes = agree([_accumulator(acc), result])
    if scale_product != 1:
        result = result * scale_product
    if scale_acc == 0:
        return result, axes
    return (bias if scale_acc == 1 else bias * scale_acc) + result, axes


def _matmul(func: Callable, name: str, args: tuple, kwargs: dict) -> Any:
    """`out_dtype=` (torch's `.dtype` overloads, also their next positional argument) sets the
    result's dtype; the products accumulate in f32 either way."""
    out_dtype = kwargs.get("out_dtype")
    positional = 3 if name in _ADDING_MATMULS else 2
    if name not in ("matmul", "__matmul__", "__rmatmul__") and len(args) > positional:
        out_dtype = args[positional]
    if name in _ADDING_MATMULS:
        bias, a, b = args[:3]
        beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
        result, axes = product(a, b, torch.mm if name == "addmm" else torch.bmm)
        if isinstance(bias, torch.Tensor):
            check_operands(bias)
            result, axes = accumulate(bias, result, axes, beta, alpha)
            return lanes.finish(result.to(out_dtype or bias.dtype), axes)
        return lanes.finish((result * alpha).to(out_dtype or torch.promote_types(a.dtype, b.dtype)), axes)
    a, b = (args[1], args[0]) if name == "__rmatmul__" else args[:2]
    multiply = {"mm": torch.mm, "bmm": torch.bmm}.get(name, torch.matmul)
    result, axes = product(a, b, multiply)
    return lanes.finish(result.to(out_dtype or torch.promote_types(a.dtype, b.dtype)), axes)


def dot(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor | None, out_dtype: torch.dtype | None) -> torch.Tensor:
    """`hl.dot`: `acc + a @ b` accumulated in f32; the result has `out_dtype`, else acc's dtype,
    else f32 for float operands (int32 for integers)."""
    check_dot_accumulator(a.dtype, b.dtype, None if acc is None else acc.dtype)
    if out_dtype is None:
        if acc is not None:
            out_dtype = acc.dtype
        else:
            out_dtype = torch.float32 if torch.promote_types(a.dtype, b.dtype).is_floating_point else torch.int32
    result, axes = product(a, b)
    if acc is not None:
        check_operands(acc)
        result, axes = accumulate(acc, result, axes)
    return lanes.finish(result.to(out_dtype), axes)


# ------------------------------------------------------------ allocations --

_NEW_TENSORS = {"new_zeros": 0, "new_ones": 1, "new_empty": 0, "new_full": None}


def _new_tensor(name: str, args: tuple, kwargs: dict, runner: Any) -> torch.Tensor:
    """`x.new_zeros([tile, n])` in device code is `hl.zeros` of x's dtype (uninitialized: zeros,
    as compiled)."""
    source, rest = args[0], args[1:]
    fill = _NEW_TENSORS[name]
    size, fill = new_tensor_size_and_fill(rest, kwargs, FILL_ARGUMENT if fill is None else fill)
    return runner.full(size, fill, kwargs.get("dtype") or source.dtype)


def _rand_like(args: tuple, kwargs: dict, runner: Any) -> torch.Tensor:
    like = args[0] if args else kwargs.get("input")
    dtype = kwargs.get("dtype") or like.dtype
    if not lanes.is_device(like):
        raise exc.UnsupportedOperation("torch.rand_like in device code needs a device value.")
    if dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise exc.UnsupportedDtype(f"torch.rand_like of a {dtype} value: random numbers need a float dtype.")
    return runner.rand_like(like, dtype)
