"""Binders: how a call of one spelling becomes an op's (operands, attrs, meta result).

A binder is attached to an op definition (its default) or to one spelling of
it (`transpose` binds to `permute`). This is the one place a torch spelling is
rewritten to the IR's form.
"""
from __future__ import annotations

import functools
import re
from dataclasses import replace
from typing import Any, Callable

import torch

from ... import exc
from .definition import Accumulator, Bound, Call, Earlier, OpDef, OpKind, Redirect
from ..sizes import SymbolicSize, broadcast_shape, exact_quotient, keep_symbolic


def by_signature(op: OpDef, call: Call) -> Bound:
    """Operands and attrs from the op's signature; the shape from the op's own rule,
    else from the function the user called."""
    operands, attrs = op.signature.bind(op.name, call.args, call.kwargs)
    shape_rule = op.meta or call.function or getattr(torch, op.name)
    if op.kind is OpKind.ELEMENTWISE:
        shape_rule = on_probes(shape_rule)
    elif op.kind is OpKind.CONTRACTION:
        shape_rule = on_probes(shape_rule, shape_of=functools.partial(product_shape, _FACTOR_RANK.get(op.name)))
    return operands, attrs, call.run_meta(shape_rule, call.args, dict(call.kwargs))


def on_probes(function: Callable, shape_of: Callable[..., tuple[int, ...]] | None = None) -> Callable:
    """An elementwise op's shape rule that does not run torch's function on meta tensors
    (a reduction's too, given `shape_of`: the result's shape from the meta arguments).

    On meta tensors, torch runs an elementwise op through its Python reference, whose
    first call in a process imports torch._dynamo: ~0.9 s, most of a kernel's first call.
    The rule instead runs `function` on one-element CPU tensors of the operands' dtypes and
    ranks (so torch's own type promotion decides the dtype, 0-d operands still counting as
    scalars), and gives the result the operands' broadcast shape, as a meta tensor. If the
    probe fails (a dtype the CPU lacks a kernel for, shapes that do not broadcast), the op
    runs on the meta tensors as before, and torch's error there is the one reported."""

    def rule(*args: Any, **kwargs: Any) -> Any:
        try:
            if shape_of is None:
                shape = broadcast_shape(*[a.shape for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)])
            else:
                shape = shape_of(*args, **kwargs)
            out = function(*_probes(args), **{k: _probes(v) for k, v in kwargs.items()})
        except Exception as err:  # noqa: BLE001 - torch's own message comes from the meta run below
            if refuses_dtype(err):  # which a meta run, checking no dtype, would not say
                raise
            return function(*args, **kwargs)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (1,) * len(shape):
            return function(*args, **kwargs)  # not elementwise after all: no shortcut
        return torch.empty(shape, dtype=out.dtype, device="meta")

    return rule


# torch's refusals of an operand's dtype (its CPU kernels are dispatched by dtype; a few ops
# check the dtype themselves). A 16-bit float named there may be a gap of torch's CPU build
# that a TPU does not have, so it is no refusal.
_DTYPE_REFUSAL = re.compile(r"not implemented for '(\w+)'|Integers to negative integer powers|with (?:a|two) bool "
                            r"tensors? is not supported|Integer division with addcdiv|not yet implemented for tensors "
                            r"with different dtypes|"
                            r"Input dtype must be either a floating point|does not support bool (?:input|dtypes)|"
                            r"Expected a floating point or complex tensor|dtype should be floating point or complex|"
                            r"cannot be converted to type [\w:]+ without overflow|Expected dtype int32/int64 for index")
_CPU_GAPS = ("Half", "BFloat16")


def refuses_dtype(err: BaseException) -> bool:
    """Whether torch's error `err` refuses its operands' dtype (both modes report it so)."""
    match = _DTYPE_REFUSAL.search(str(err)) if isinstance(err, RuntimeError) else None
    return match is not None and match.group(1) not in _CPU_GAPS


def dtype_refusal(display: str, operands: Any, err: BaseException) -> exc.UnsupportedDtype:
    """The error for a call torch refuses for its operands' dtypes (`refuses_dtype`)."""
    dtypes = []
    for item in operands if isinstance(operands, (list, tuple)) else (operands,):
        dtype = getattr(item, "dtype", None)
        if isinstance(dtype, torch.dtype) and str(dtype).removeprefix("torch.") not in dtypes:
            dtypes.append(str(dtype).removeprefix("torch."))
    of = f" of {' and '.join(dtypes)}" if dtypes else ""
    text = str(err).splitlines()[0]
    if "without overflow" in text:  # a number the result's dtype cannot hold
        return exc.UnsupportedDtype(f"{display}{of}: torch refuses the number ({text}); use one the dtype holds, "
                                    "or cast the tensor to a wider dtype first.")
    casts = "`.float()`" if "int32" in dtypes else "`.float()`, `.to(torch.int32)`"
    return exc.UnsupportedDtype(f"{display}{of}: torch refuses this dtype ({text}); cast "
                                f"the operand (e.g. {casts}) where torch would need it.")


def number_refusal(op: str, number: Any, dtype: torch.dtype, bound: str = "max") -> str | None:
    """torch's error when `op` converts `number` into `dtype`, each op by its own rule (`where` of
    float16 turns 1e5 into inf; `clamp` (its `bound`), `full_like`, `masked_fill`, a `pow`'s
    exponent, `threshold`'s value, `hardshrink`'s lambda and `logit`'s eps refuse it), or None.
    Run on two elements: torch skips the check for one."""
    runs = {"where": lambda values, pick: torch.where(pick, values, number),
            "clamp": lambda values, pick: torch.clamp(values, **{bound: number}),
            "full_like": lambda values, pick: torch.full_like(values, number),
            "masked_fill": lambda values, pick: values.masked_fill(pick, number),
            "pow": lambda values, pick: torch.pow(values, number),
            "threshold": lambda values, pick: torch.nn.functional.threshold(values, 0, number),  # its value
            "hardshrink": lambda values, pick: torch.nn.functional.hardshrink(values, number),
            "logit": lambda values, pick: torch.logit(values, number)}
    try:
        with torch._C.DisableTorchFunction():  # plain torch, also while a kernel is traced
            runs[op](torch.zeros((2,), dtype=dtype), torch.tensor([True, False]))
    except (RuntimeError, OverflowError) as err:
        return str(err)
    return None


def check_number_fits(target: str, number: Any, dtype: torch.dtype) -> None:
    """A number stored into a tensor of `dtype` that cannot hold it (300 into int8, NaN into int32)
    is torch's own store error, `exc.UnsupportedDtype`, in both modes."""
    try:
        with torch._C.DisableTorchFunction():
            torch.empty((1,), dtype=dtype)[0] = number
    except (RuntimeError, OverflowError) as err:
        raise exc.UnsupportedDtype(f"{target} = {number!r}: {err} (as torch's store refuses it).") from None


def check_dot_accumulator(a: torch.dtype, b: torch.dtype, acc: torch.dtype | None) -> None:
    """`hl.dot(a, b, acc=...)` of float factors adds into a float accumulator only."""
    if acc is not None and torch.promote_types(a, b).is_floating_point and not acc.is_floating_point:
        raise exc.UnsupportedDtype(
            f"hl.dot: the factors are {str(torch.promote_types(a, b)).removeprefix('torch.')} but acc is "
            f"{str(acc).removeprefix('torch.')}: a float product is accumulated in a float acc (hl.zeros(..., "
            "dtype=torch.float32)); cast the result where an integer is needed.")


# The factors' rank where torch's function takes no other (torch.matmul takes 1-D to N-D).
_FACTOR_RANK = {"mm": 2, "addmm": 2, "bmm": 3, "baddbmm": 3}


def product_shape(rank: int | None, *args: Any, **kwargs: Any) -> tuple:
    """torch.matmul's result shape for the last two tensors of `args` (the factors, of
    `rank` and one batch if it is given; an addend before them must broadcast to the
    product); ValueError if torch would refuse. (torch's meta rules for the matmul family
    import sympy, ~0.3 s of a first call.)"""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    a, b = (t.shape for t in tensors[-2:])
    if not a or not b or rank is not None and (len(a), len(b), a[:-2]) != (rank, rank, b[:-2]):
        raise ValueError("factors of another rank or batch than torch's function takes")
    rows, a_inner = ((), a[0]) if len(a) == 1 else ((a[-2],), a[-1])
    b_inner, cols = (b[0], ()) if len(b) == 1 else (b[-2], (b[-1],))
    if a_inner != b_inner:
        raise ValueError("the contracted sizes differ")
    batch = broadcast_shape(a[:-2], b[:-2])
    product = (*batch, *rows, *cols)
    if len(tensors) > 2 and broadcast_shape(tensors[0].shape, product) != product:
        raise ValueError("the addend does not broadcast to the product")
    return product


def matmul_rule(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch.matmul's shape rule on meta tensors, run on probes (hl.dot's)."""
    return on_probes(torch.matmul, shape_of=functools.partial(product_shape, None))(a, b)


def _probes(item: Any) -> Any:
    """Meta tensors in `item` as one-element CPU tensors of their dtype and rank."""
    if isinstance(item, torch.Tensor):
        return torch.ones((1,) * item.ndim, dtype=item.dtype)
    if isinstance(item, (list, tuple)) and not isinstance(item, torch.Size):
        return type(item)(_probes(i) for i in item)
    return item


def one_sided_clamp(side: str) -> Callable:
    """`x.clamp_min(lo)`, `torch.clamp_max(x, hi)`: a clamp with one bound."""

    def bind(op: OpDef, call: Call) -> Bound:
        bound = call.args[1] if len(call.args) > 1 else call.kwargs.get(side)
        if bound is None or len(call.args) > 2 or set(call.kwargs) - {side}:
            raise exc.UnsupportedOperation(f"{call.display}(x, {side}) takes exactly one bound, {side}.")
        return by_signature(op, replace(call, args=(call.args[0],), kwargs={side: bound}, function=None))

    return bind


def reduction(tuple_dims: bool) -> Callable:
    """`dim` normalized to a sorted tuple of axes (None: all); `dtype=` casts first.
    `tuple_dims`: torch's function takes several dims at once (sum does, argmax does not)."""

    def bind(op: OpDef, call: Call) -> Bound:
        return _bind_reduction(op, call, tuple_dims)

    return bind


def _bind_reduction(op: OpDef, call: Call, tuple_dims: bool) -> Bound | Redirect:
    dtype = call.kwargs.get("dtype")
    cast = dtype is not None and op.reduction.accumulator is Accumulator.RESULT
    held = torch.int32 if dtype == torch.int64 else dtype  # device code holds an int64 cast in int32
    if cast and getattr(call.meta_of(call.args[0]), "dtype", None) not in (dtype, held):
        # torch casts the input to `dtype`, then reduces (in it: an int32 sum stays int32): two ops here
        return Redirect((("to", (call.args[0], dtype), {}),
                         (call.spelling, (Earlier(0), *call.args[1:]), dict(call.kwargs))), _last)
    operands, attrs = op.signature.bind(op.name, call.args, call.kwargs)
    rank = call.rank_of(operands[0])
    attrs["dim"] = normalize_dims(attrs["dim"], rank)
    if attrs.pop("dtype", None) is not None and not cast:
        raise exc.UnsupportedOperation(f"{call.display}(dtype=...) is not supported; cast with .to first.")
    meta_kwargs: dict[str, Any] = {"keepdim": attrs["keepdim"], **({"dtype": dtype} if cast else {})}
    if attrs["dim"] is None:
        meta_kwargs = {"dtype": dtype} if cast else {}
        if attrs["keepdim"]:
            attrs["dim"] = tuple(range(rank))
    if attrs["dim"] is not None:
        if tuple_dims:
            meta_kwargs["dim"] = attrs["dim"]
        elif len(attrs["dim"]) == 1:
            meta_kwargs["dim"] = attrs["dim"][0]
        else:
            raise exc.UnsupportedOperation(f"{call.display} reduces over one dim at a time.")
    rule = on_probes(getattr(torch, op.name), shape_of=_reduced_shape)
    return operands, attrs, call.run_meta(rule, (operands[0],), meta_kwargs)


def _reduced_shape(x: torch.Tensor, dim: int | tuple[int, ...] | None = None, keepdim: bool = False,
                   dtype: torch.dtype | None = None) -> tuple:
    """The shape of a reduction of `x` over `dim` (normalized; None: every dim)."""
    dims = range(x.ndim) if dim is None else (dim,) if isinstance(dim, int) else dim
    if dim is None:
        keepdim = False
    return tuple(1 if axis in dims else size for axis, size in enumerate(x.shape) if keepdim or axis not in dims)


def normalize_dims(dim: Any, rank: int) -> tuple[int, ...] | None:
    """`dim` of a reduction as a sorted tuple of non-negative axes (None: all)."""
    if dim is None:
        return None
    dims = dim if isinstance(dim, (list, tuple)) else (dim,)
    out = []
    for d in dims:
        if not isinstance(d, int) and hasattr(d, "__index__"):  # an int argument: a constant of the variant
            d = d.__index__()
        if not isinstance(d, int):
            raise exc.UnsupportedOperation(f"Reduction dim must be a Python int, got {d!r}.")
        if not -max(rank, 1) <= d < max(rank, 1):
            raise exc.ShapeMismatch(f"Reduction dim {d} is out of range for a rank-{rank} value.")
        out.append(d % max(rank, 1))
    return tuple(sorted(set(out)))


def max_min(reduce_op: str, arg_op: str, binary_op: str, result_type: type) -> Callable:
    """torch.max/min: of two tensors (`maximum`), of all elements (`amax`), or along a dim
    (values and indices: `amax` + `argmax`)."""

    def bind(op: OpDef, call: Call) -> Redirect:
        args, kwargs = call.args, call.kwargs
        other = args[1] if len(args) > 1 else kwargs.get("other")
        if isinstance(call.meta_of(other), torch.Tensor):
            return Redirect(((binary_op, (args[0], other), {}),), _first)
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
        if dim is None:
            return Redirect(((reduce_op, (args[0],), {}),), _first)
        reduced = {"dim": dim, "keepdim": keepdim}
        if getattr(call.meta_of(args[0]), "dtype", None) == torch.bool:
            # torch.max of bool has indices, but argmax refuses bool: the indices of its int32 copy
            return Redirect(((reduce_op, (args[0],), reduced), ("to", (args[0], torch.int32), {}),
                             (arg_op, (Earlier(1),), reduced)),
                            lambda results: result_type((results[0], results[2])))
        return Redirect(((reduce_op, (args[0],), reduced), (arg_op, (args[0],), reduced)),
                        lambda results: result_type(tuple(results)))

    return bind


def _first(results: list) -> Any:
    return results[0]


def _last(results: list) -> Any:
    return results[-1]


# ------------------------------------------------------------------ casts --


def _to(meta: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return meta.to(dtype)


def cast(op: OpDef, call: Call) -> Bound:
    """`x.to(dtype)`, `x.to(other)`, `x.type(dtype)`: only dtype conversions."""
    attrs = {"dtype": _find_dtype(call)}
    return [call.args[0]], attrs, call.run_meta(_to, (call.args[0],), attrs)


def cast_to(dtype: torch.dtype) -> Callable:
    """`x.float()`, `x.int()`, ...: a cast to a fixed dtype."""

    def bind(op: OpDef, call: Call) -> Bound:
        attrs = {"dtype": dtype}
        return [call.args[0]], attrs, call.run_meta(_to, (call.args[0],), attrs)

    return bind


def _find_dtype(call: Call) -> torch.dtype:
    for item in list(call.args[1:]) + list(call.kwargs.values()):
        if isinstance(item, torch.dtype):
            return item
        meta = call.meta_of(item)
        if isinstance(meta, torch.Tensor):
            return meta.dtype
    raise exc.UnsupportedOperation(
        f"{call.display}: only dtype conversions are supported (e.g. .to(torch.float32))."
    )


# ------------------------------------------------------------------ views --


def view(attrs_of: Callable[[Call, Any], dict]) -> Callable:
    """A view of the call's first argument: its shape from the function the user
    called, its attrs from the call and that result."""

    def bind(op: OpDef, call: Call) -> Bound:
        function = call.function or getattr(torch, call.spelling)
        out = call.run_meta(function, call.args, dict(call.kwargs))
        return [call.args[0]], attrs_of(call, out), out

    return bind


def sized_view(op: OpDef, call: Call) -> Bound:
    """reshape/view/expand/broadcast_to: sizes may be tiles (their block size) or host
    ints; `view(dtype)`, a bitcast, is not a shape change."""
    if any(isinstance(a, torch.dtype) for a in (*call.args[1:], *call.kwargs.values())):
        raise exc.UnsupportedOperation(
            f"{call.display}(dtype) reinterprets the bits of a tensor, which pallasite does not "
            "support; convert values with .to(dtype).")
    args = (call.args[0], *(call.size_of(a) for a in call.args[1:]))
    kwargs = {k: call.size_of(v) if k in ("size", "shape") else v for k, v in call.kwargs.items()}
    function = call.function or getattr(torch, call.spelling)
    out = call.run_meta(function, args, kwargs)
    base = tuple(getattr(call.args[0], "shape", ()))
    return [call.args[0]], {"shape": _requested_sizes(args[1:], kwargs, tuple(out.shape), base)}, out


def unflattened_view(op: OpDef, call: Call) -> Bound:
    """x.unflatten(dim, sizes): the sizes may be tiles (their block size) or host ints."""
    dim = call.args[1] if len(call.args) > 1 else call.kwargs.get("dim")
    sizes = call.args[2] if len(call.args) > 2 else call.kwargs.get("sizes")
    if dim is None or not isinstance(sizes, (list, tuple, torch.Size)):
        raise exc.UnsupportedOperation(f"{call.display}(dim, sizes): give the dim and a list of sizes.")
    sizes = tuple(call.size_of(size) for size in sizes)
    out = call.run_meta(torch.unflatten, (call.args[0], dim, sizes), {})
    return [call.args[0]], {"shape": tuple(out.shape)}, out


def _requested_sizes(sizes: tuple, kwargs: dict, shape: tuple, base: tuple) -> tuple:
    """The result shape with the symbolic sizes (static_shapes=False) the call asked for,
    where torch's meta tensor knows only their values."""
    requested = kwargs.get("size", kwargs.get("shape", sizes))
    if len(requested) == 1 and isinstance(requested[0], (list, tuple)):
        requested = tuple(requested[0])
    if len(requested) != len(shape):
        return shape
    return keep_symbolic(shape, [_inferred_size(tuple(requested), base)])


def _inferred_size(requested: tuple, base: tuple) -> tuple:
    """The requested sizes with a -1 as a formula when the base has symbolic sizes:
    `x.view(-1)` of an [m, n] x is `x_size0 * x_size1` long, the base's element count over
    the other sizes asked for."""
    free = [i for i, extent in enumerate(requested) if type(extent) is int and extent == -1]
    if len(free) != 1 or not any(isinstance(extent, SymbolicSize) for extent in base):
        return requested
    count, known = 1, 1
    for extent in base:
        count = count * extent
    for i, extent in enumerate(requested):
        known = known if i == free[0] else known * extent
    fill = exact_quotient(count, known)
    return requested if fill is None else requested[:free[0]] + (fill,) + requested[free[0] + 1:]


def result_shape(call: Call, out: Any) -> dict:
    """reshape, view, flatten, squeeze, unsqueeze, expand: the result's shape."""
    return {"shape": tuple(out.shape)}


def broadcast_all(op: OpDef, call: Call) -> Redirect:
    """torch.broadcast_tensors(a, b, ...): each operand expanded to their common shape."""
    tensors = call.args if call.args else tuple(call.kwargs.get("tensors", ()))
    shape = tuple(call.run_meta(torch.broadcast_tensors, tensors, {})[0].shape) if tensors else ()
    return Redirect(tuple(("broadcast_to", (t, shape), {}) for t in tensors), tuple)


def moved_dims(call: Call, out: Any) -> dict:
    """x.movedim(source, destination) / moveaxis: the permutation torch applies, read off a
    probe whose sizes name the axes (axis i has size i + 2)."""
    rank = call.rank_of(call.args[0])
    probe = torch.empty(tuple(range(2, rank + 2)), device="meta")
    moved = call.run_meta(torch.movedim, (probe, *call.args[1:]), dict(call.kwargs))
    return {"perm": tuple(size - 2 for size in moved.shape)}


def _dim_argument(call: Call, position: int, default: int = 0) -> int:
    dim = call.args[position] if len(call.args) > position else call.kwargs.get("dim", default)
    return int(dim) % max(call.rank_of(call.args[0]), 1)


def narrowed(op: OpDef, call: Call) -> Redirect:
    """x.narrow(dim, start, length): the view x[..., start:start + length] (a subscript, so
    device code reads it as any narrowing subscript)."""
    dim = _dim_argument(call, 1)
    start = call.args[2] if len(call.args) > 2 else call.kwargs["start"]
    length = call.args[3] if len(call.args) > 3 else call.kwargs["length"]
    call.run_meta(torch.narrow, call.args, dict(call.kwargs))  # torch's own checks of the bounds
    start = int(start) % call.meta_of(call.args[0]).shape[dim] if int(start) < 0 else int(start)
    key = (slice(None),) * dim + (slice(start, start + int(length)),)
    return Redirect((("getitem", (call.args[0], key), {}),), _first)


def pieces(op: OpDef, call: Call) -> Redirect:
    """x.split(size_or_sections, dim) / chunk(n, dim) / unbind(dim): torch's pieces as the
    subscripts they are (views of slices; unbind's drop the axis), in a tuple."""
    position = 1 if call.spelling == "unbind" else 2
    dim = _dim_argument(call, position)
    function = call.function or getattr(torch, call.spelling)
    sizes = [piece.shape[dim] if call.spelling != "unbind" else None
             for piece in call.run_meta(function, call.args, dict(call.kwargs))]
    keys, start = [], 0
    for size in sizes:
        item = start if size is None else slice(start, start + size)
        keys.append((slice(None),) * dim + (item,))
        start += 1 if size is None else size
    return Redirect(tuple(("getitem", (call.args[0], key), {}) for key in keys), tuple)


def no_attrs(call: Call, out: Any) -> dict:
    return {}


def copy(call: Call, out: Any) -> dict:
    """clone(): the identity on values, but a new tensor (not a view) in host code."""
    return {"copy": True}


def subscript_key(call: Call, out: Any) -> dict:
    return {"key": call.args[1]}


def permute_dims(call: Call, out: Any) -> dict:
    """x.permute(1, 0) / x.permute((1, 0)) / torch.permute(x, dims=...)."""
    rank = call.rank_of(call.args[0])
    args = call.args
    dims = args[1:] if len(args) > 2 else (args[1] if len(args) > 1 else call.kwargs["dims"])
    dims = list(dims) if isinstance(dims, (list, tuple)) else [dims]
    return {"perm": tuple(d % rank for d in dims)}


def swap_dims(call: Call, out: Any) -> dict:
    """transpose(x, d0, d1) and its aliases swapaxes/swapdims."""
    rank = call.rank_of(call.args[0])
    d0, d1 = (list(call.args[1:]) + [call.kwargs.get("dim0"), call.kwargs.get("dim1")])[:2]
    perm = list(range(rank))
    d0, d1 = d0 % rank, d1 % rank
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return {"perm": tuple(perm)}


def matrix_transpose(call: Call, out: Any) -> dict:
    """x.t(): swaps the two axes of a matrix, leaves a vector as it is."""
    rank = call.rank_of(call.args[0])
    return {"perm": (1, 0) if rank == 2 else tuple(range(rank))}


def unbound(op: OpDef, call: Call) -> Bound:
    """The binder of an op whose name is no spelling: it binds only through its spellings'
    own binders (views), or the frontend records it itself (hl.full, hl.arange, hl.dot,
    tile attributes)."""
    raise exc.UnsupportedOperation(f"{call.display} is not supported by pallasite.")


def _bind_params(call: Call, params: tuple[str, ...]) -> dict[str, Any]:
    """The call's arguments by parameter name, as Python binds them (positional, then keywords)."""
    if len(call.args) > len(params):
        raise exc.UnsupportedOperation(f"Too many arguments to {call.display}: {len(call.args)}.")
    bound = dict(zip(params, call.args))
    for key, value in call.kwargs.items():
        if key not in params or key in bound:
            raise exc.UnsupportedOperation(f"{call.display}() got an unexpected or repeated argument {key!r}.")
        bound[key] = value
    return bound


def constant_pad(op: OpDef, call: Call) -> Bound:
    """`F.pad(x, pad, mode="constant", value=0)`: attrs `widths`, one (before, after) per axis
    of x, outermost first (torch's `pad` lists the last axis first), and `value` (None: 0).
    Static, non-negative widths only: a negative width crops, which a slice says plainly."""
    params = ("input", "pad", "mode", "value")
    bound = _bind_params(call, params)
    if "pad" not in bound:
        raise exc.UnsupportedOperation(f"{call.display}() is missing argument 'pad'.")
    mode = bound.get("mode", "constant")
    if mode != "constant":
        raise exc.UnsupportedOperation(
            f"{call.display}(mode={mode!r}) is not supported: only mode='constant' (a fill value) is; "
            "build reflected or replicated borders from static slices and torch.cat.")
    pad = bound["pad"]
    if not isinstance(pad, (tuple, list)) or any(isinstance(w, bool) or not isinstance(w, int) for w in pad):
        raise exc.UnsupportedOperation(
            f"{call.display}: the pad widths must be compile-time ints (a tuple of them), got {pad!r}.")
    rank = call.rank_of(bound["input"])
    if len(pad) % 2 or len(pad) // 2 > rank:
        raise exc.ShapeMismatch(
            f"{call.display}: pad {tuple(pad)} must hold (before, after) pairs for at most {rank} axes.")
    if any(w < 0 for w in pad):
        raise exc.UnsupportedOperation(
            f"{call.display}: the negative width in pad {tuple(pad)} crops; slice the value instead "
            "(`v[..., a:b]`) and pad with non-negative widths.")
    value = bound.get("value")
    if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
        raise exc.UnsupportedOperation(f"{call.display}: the fill value must be a Python number, got {value!r}.")
    widths = [(0, 0)] * rank
    for k in range(len(pad) // 2):
        widths[rank - 1 - k] = (int(pad[2 * k]), int(pad[2 * k + 1]))
    out = call.run_meta(torch.nn.functional.pad, (bound["input"], tuple(pad)),
                        {"value": value} if value is not None else {})
    return [bound["input"]], {"widths": tuple(widths), "value": 0 if value is None else value}, out


def gather_dim(op: OpDef, call: Call) -> Bound:
    """`torch.gather(input, dim, index)` / `input.gather(dim, index)`: operands (input, index),
    attr `dim` as a non-negative axis. `sparse_grad` changes nothing in a forward kernel."""
    params = ("input", "dim", "index", "sparse_grad")
    bound = _bind_params(call, params)
    missing = [name for name in params[:3] if name not in bound]
    if missing:
        raise exc.UnsupportedOperation(f"{call.display}() is missing argument {missing[0]!r}.")
    rank = call.rank_of(bound["input"])
    dim = bound["dim"]
    if isinstance(dim, bool) or not isinstance(dim, int) or not -max(rank, 1) <= dim < max(rank, 1):
        raise exc.ShapeMismatch(f"{call.display}: dim {dim!r} is not an axis of a rank-{rank} value.")
    if call.rank_of(bound["index"]) != rank:
        raise exc.ShapeMismatch(
            f"{call.display}: the index has rank {call.rank_of(bound['index'])} and the input rank {rank}; "
            "torch.gather takes an index of the input's rank (reshape the index, e.g. idx[:, None]).")
    index_dtype = getattr(call.meta_of(bound["index"]), "dtype", None)
    if index_dtype not in (torch.int32, torch.int64):  # torch's own refusal (a float index read garbage)
        raise dtype_refusal(call.display, [bound["input"], bound["index"]],
                            RuntimeError("gather(): Expected dtype int32/int64 for index"))
    meta = call.run_meta(lambda x, i: torch.gather(x, dim, i.long()), (bound["input"], bound["index"]), {})
    return [bound["input"], bound["index"]], {"dim": dim % max(rank, 1)}, meta


def concatenated(op: OpDef, call: Call) -> Bound:
    """`torch.cat(tensors, dim=0)` (and its aliases concat/concatenate): the tensors are the
    operands, in order; `dim` a non-negative axis. torch's own checks of the sizes and its
    dtype promotion come from running it on meta tensors."""
    params = ("tensors", "dim")
    bound = _bind_params(call, params)
    tensors, dim = bound.get("tensors"), bound.get("dim", 0)
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise exc.UnsupportedOperation(f"{call.display} takes a non-empty list or tuple of tensors, got {tensors!r}.")
    if any(not isinstance(call.meta_of(t), torch.Tensor) for t in tensors):
        raise exc.UnsupportedOperation(f"{call.display} takes tensors only; make a number a tensor with hl.full.")
    rank = call.rank_of(tensors[0])
    if isinstance(dim, bool) or not isinstance(dim, int) or not -max(rank, 1) <= dim < max(rank, 1):
        raise exc.ShapeMismatch(f"{call.display}: dim {dim!r} is not an axis of a rank-{rank} tensor.")
    meta = call.run_meta(lambda *pieces: torch.cat(pieces, dim), tuple(tensors), {})
    return list(tensors), {"dim": dim % max(rank, 1)}, meta


# ------------------------------------------------------------ x op= v --


def augmented_dtype(target_shape: tuple, target_dtype: torch.dtype, result_shape: tuple,
                    result_dtype: torch.dtype, operator: str, partial: bool = False) -> torch.dtype | None:
    """`x op= v` on a device value, as torch updates x in place: the result keeps x's shape and
    dtype. The dtype to cast `x op v` to (None: it has x's already); ShapeMismatch where torch
    refuses (a result x's dtype cannot hold, `int_tile += 1.5`, or one that broadcasts x).
    `partial`: shapes are reference mode's, where a partial tile's axis may be shorter."""
    fits = (len(result_shape) == len(target_shape)
            and all(r <= t if partial else r == t for r, t in zip(result_shape, target_shape)))
    if not fits:
        raise exc.ShapeMismatch(
            f"x {operator}= v updates x in place: its result has shape {list(result_shape)}, x has "
            f"{list(target_shape)} (torch refuses a result that broadcasts x). Write x = x {operator} v.")
    if result_dtype == target_dtype:
        return None
    if not torch.can_cast(result_dtype, target_dtype):
        raise exc.ShapeMismatch(
            f"x {operator}= v updates x in place: its result is {result_dtype}, which torch does not cast to "
            f"x's {target_dtype}. Write x = x {operator} v (a new value), or cast v first.")
    return target_dtype
