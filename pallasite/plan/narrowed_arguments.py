"""Which int64 tensor arguments the host may narrow to int32: those read only as indices.

A TPU has no 64-bit vectors, yet offsets, labels and indices are int64 by default in
torch. The tracer sees such an argument as int32 (`TensorSymbol.caller_dtype` keeps the
caller's int64); this analysis decides whether that is exact. The host converts the
tensor before the call, checking that every value fits int32, so each value the kernel
reads is the caller's. The results agree with torch's as long as the kernel uses them as
positions: indices and gathers, offsets and loop bounds, masks, and — converted to a
float — a length dividing a sum (jagged mean). Where the kernel would produce int64 data
from them, the narrowing would show: values of the tensor (or integers computed from
them) stored into a tensor, the tensor itself written, or copied to another device. Those
are `exc.UnsupportedDtype` at the user's line.

Host code may compute positions from such a tensor (`torch.where(idx < 0, idx + n, idx)`):
in torch the result is int64, here int32, and the two agree while no step overflows int32.
Each integer step (`+`, `-`, `*`, `//` and `%` by a number, min/max/clamp, neg/abs, where,
casts) is recorded as a `RangeStep`; before each call the host takes the argument's
smallest and largest value and follows them through the steps (interval arithmetic), and
a step that could leave int32 is an `exc.KernelArgumentError` naming it. A step with an
operand of unknown range (another int tensor, a runtime scalar) stays refused. The runtime
(`CompiledKernel`) converts the arguments this analysis lists and nothing else.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import torch

from .. import exc
from ..ir.sizes import pin
from ..ir.intervals import value_interval
from ..ir import (
    DeviceLoopCall, HostOp, HostStore, IfBlock, KernelIR, Load, Node, RemoteCopy, Store, TensorSymbol, TileLoop,
    Value, ops, unmoved_coordinate,
)


_INT32 = torch.iinfo(torch.int32)


@dataclass(frozen=True)
class RangeStep:
    """One integer step host code computes from a narrowed argument: `op` on `operands`,
    each the argument itself (`ARGUMENT`), an earlier step's result (its position in
    `NarrowedArgument.computed`), a number, `(WITHIN, lo, hi)` (positions, whose values
    planning bounds), or `None` (a where's condition, whose values do not matter); `kwargs` the
    op's number attributes (alpha=, clamp's min=/max=, a cast's
    dtype). `text`/`location`: the user's line, for the error."""

    op: str
    operands: tuple
    kwargs: tuple
    text: str
    location: Any

    def interval(self, ranges: list[tuple[int, int]], scalars: Mapping[str, int] | None = None) -> tuple[int, int]:
        """The result's [lo, hi] given every earlier value's (`ranges`, the argument's last) and
        the call's runtime int arguments (`scalars`, by name)."""
        values = [_range_of(operand, ranges, scalars or {}) for operand in self.operands]
        kwargs = dict(self.kwargs)
        if self.op in ("add", "sub", "rsub"):
            a, b = values if self.op != "rsub" else values[::-1]
            alpha = kwargs.get("alpha", 1)
            b = _corners(lambda v: v * alpha, b)
            return _corners(lambda x, y: x + y if self.op == "add" else x - y, a, b)
        if self.op in _CORNER_OPS:
            return _corners(_CORNER_OPS[self.op], *values)
        if self.op == "remainder":
            divisor = values[1][0]
            return (0, divisor - 1) if divisor > 0 else (divisor + 1, 0)
        if self.op in ("neg", "abs", "pos"):
            (lo, hi), = values
            if self.op == "neg":
                return -hi, -lo
            if self.op == "abs" and lo < 0:
                return (0 if hi >= 0 else -hi), max(-lo, hi)
            return lo, hi
        if self.op == "where":
            return min(values[1][0], values[2][0]), max(values[1][1], values[2][1])
        if self.op == "sum":  # device code: up to `count` values (a partial tile's padding adds 0)
            count, (lo, hi) = kwargs["count"], values[0]
            return min(0, count * lo), max(0, count * hi)
        if self.op == "clamp":  # min/max: numbers among the operands or the attributes, or None
            bounds = [*self.operands[1:3], None, None][:2]
            low, high = (kwargs.get(key, bound) for key, bound in zip(("min", "max"), bounds))
            return _corners(lambda v: _clamped(v, low, high), values[0])
        dtype = kwargs["dtype"]  # "to": a cast to an integer dtype (a narrower one wraps, as torch's does)
        info = torch.iinfo(dtype)
        lo, hi = values[0]
        return (lo, hi) if info.min <= lo and hi <= info.max else (info.min, info.max)


ARGUMENT = "argument"

_CORNER_OPS = {"mul": lambda a, b: a * b, "maximum": max, "minimum": min, "floor_divide": lambda a, b: a // b}


def _clamped(value: int, low: int | None, high: int | None) -> int:
    value = value if low is None else max(low, value)
    return value if high is None else min(high, value)


def _range_of(operand: Any, ranges: list[tuple[int, int]], scalars: Mapping[str, int]) -> tuple[int, int]:
    if operand is None:  # a where's condition, a clamp's missing bound
        return 0, 0
    if operand == ARGUMENT:
        return ranges[-1]
    if isinstance(operand, tuple) and operand[0] == WITHIN:  # (WITHIN, lo, hi): values planning bounds
        return operand[1], operand[2]
    if isinstance(operand, tuple) and operand[0] == WITHIN_AT_CALL:  # bounded by the call's int arguments
        interval = value_interval(operand[1], scalars)
        return interval if interval is not None else (_INT32.min, _INT32.max + 1)
    if isinstance(operand, tuple):  # ("step", position)
        return ranges[operand[1]]
    return operand, operand


WITHIN, WITHIN_AT_CALL = "within", "within at call"


class _AnyInts(Mapping):
    """Every runtime int argument, with a stand-in value: whether an interval is known once a
    call gives their values."""

    def __getitem__(self, name: str) -> int:
        return 1

    def __contains__(self, name: object) -> bool:
        return True

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0


def _within(value: Value) -> tuple | None:
    """(WITHIN, lo, hi) for an integer device value no narrowed argument made whose values
    planning bounds (iotas, a static tile's positions, arithmetic on them: `value_interval`);
    (WITHIN_AT_CALL, value) where a call's runtime int arguments bound them (the positions of
    `hl.tile(max_len)`, max_len an int argument)."""
    if value.dtype.is_floating_point or value.dtype == torch.bool:
        return None
    interval = value_interval(value)
    if interval is not None:
        return WITHIN, int(interval[0]), int(interval[1])
    return (WITHIN_AT_CALL, value) if value_interval(value, _AnyInts()) is not None else None


def _corners(function: Any, *intervals: tuple[int, int]) -> tuple[int, int]:
    """[min, max] of a function monotone in each operand over the intervals' corners."""
    values = [function(*corner) for corner in itertools.product(*intervals)]
    return min(values), max(values)


@dataclass(frozen=True)
class NarrowedArgument:
    """A tensor argument the host converts from `caller_dtype` to `kernel_dtype` before the
    call. `position`: its index among the host function's parameters (the kernel's, then
    the captured tensors). `values_read`: whether the kernel reads its values (not only
    its shape); only then must every value fit `kernel_dtype`, which the host checks."""

    name: str
    position: int
    caller_dtype: torch.dtype
    kernel_dtype: torch.dtype
    values_read: bool
    computed: tuple[RangeStep, ...] = ()  # host code's integer steps from it, in order

    def step_past_int32(self, lo: int, hi: int, scalars: Mapping[str, int] | None = None
                        ) -> tuple[RangeStep, tuple[int, int]] | None:
        """The first computed step that could leave int32 when the argument's values lie in
        [lo, hi] (and the runtime int arguments are `scalars`), with its result's range; None
        when every step stays inside."""
        ranges: list[tuple[int, int]] = []
        for step in self.computed:
            result = step.interval([*ranges, (lo, hi)], scalars)
            if result[0] < _INT32.min or result[1] > _INT32.max:
                return step, result
            ranges.append(result)
        return None


def plan_narrowed_arguments(ir: KernelIR) -> tuple[NarrowedArgument, ...]:
    """The arguments the host narrows; `exc.UnsupportedDtype` where one is used as data."""
    narrowed = {id(symbol): symbol for symbol in ir.arguments
                if isinstance(symbol, TensorSymbol) and symbol.caller_dtype is not None}
    if not narrowed:
        return ()
    flow = _Provenance(narrowed)
    for step in ir.steps:
        if isinstance(step, DeviceLoopCall):
            flow.device_loop(step.loop)
        else:
            flow.host_step(step)
    flow.returned(ir.result)
    return tuple(NarrowedArgument(symbol.name, position, symbol.caller_dtype, symbol.dtype,
                                  symbol.name in flow.read, tuple(flow.computed.get(symbol.name, ())))
                 for position, symbol in enumerate(ir.arguments) if id(symbol) in narrowed)


class _Provenance:
    """Follows the values of narrowed arguments forward through the program: `origin` maps
    each host symbol or device value holding (integers computed from) such an argument's
    values to that argument."""

    def __init__(self, narrowed: dict[int, TensorSymbol]):
        self.origin: dict[int, TensorSymbol] = dict(narrowed)
        self.arguments = set(narrowed)
        self.read: set[str] = set()
        self.computed: dict[str, list[RangeStep]] = {}  # argument name -> its host steps
        self.step_of: dict[int, int] = {}  # a host symbol's (or device value's) id -> its step's position
        self.stepped: set[int] = set()  # device nodes seen (the propagation repeats to a fixed point)
        self.unbounded: dict[int, str] = {}  # device values computed without a range rule -> the op

    def _of(self, item: Any) -> TensorSymbol | None:
        return self.origin.get(id(item))

    # ------------------------------------------------------------------ host --

    def host_step(self, step: Any) -> None:
        if isinstance(step, HostStore):
            self._key_read(step.key)
            for item, what in ((step.tensor, "writes it in host code"), (step.value, "stores its values in host code")):
                if self._of(item) is not None:
                    raise _data_use(self._of(item), what, step.location)
        elif isinstance(step, HostOp):
            self._host_op(step)

    def _host_op(self, step: HostOp) -> None:
        base, *rest = step.args or (None,)
        if step.op in ops.OPS and ops.OPS[step.op].kind is ops.OpKind.VIEW:  # views, parts, copies
            self._key_read(step.kwargs.get("key", ()))  # an index tensor in a host subscript: a position
            source = self._of(base)
            if source is not None and isinstance(step.result, TensorSymbol):
                self.origin[id(step.result)] = source  # a view or a part of it: still its values
                return
        operands = tuple(_flat((base, *rest, *step.kwargs.values()))) if step.op != "getitem" else tuple(_flat(rest))
        sources = {id(self._of(item)): self._of(item) for item in operands if self._of(item) is not None}
        if sources:
            self._host_arithmetic(step, list(sources.values()))

    def _host_arithmetic(self, step: HostOp, sources: list[TensorSymbol]) -> None:
        """Host code computes with a narrowed argument's values: a position (`RangeStep`)
        when the step has an interval rule and every other operand a known range."""
        source = sources[0]
        results = step.result if isinstance(step.result, tuple) else (step.result,)
        if len(sources) == 1 and len(results) == 1 and isinstance(results[0], TensorSymbol):
            dtype = results[0].dtype
            cast = step.kwargs.get("dtype") if step.op == "to" else None
            if not _is_integer(dtype) or (cast is not None and cast != source.caller_dtype):
                # a comparison, a float of exact integer values, or an explicit cast (`idx.int()`):
                # torch computes on from there in that dtype too
                self.read.add(source.name)
                return
            recorded = self._range_step(step, source)
            if recorded is not None:
                steps = self.computed.setdefault(source.name, [])
                self.step_of[id(results[0])] = len(steps)
                steps.append(recorded)
                self.origin[id(results[0])] = source
                self.read.add(source.name)
                return
        raise _data_use(source, "computes with it in host code in a way whose int32 result could differ from "
                                "torch's int64 one (an operand of unknown range, or an op without an interval "
                                "rule)", step.location)

    def _range_step(self, step: HostOp, source: TensorSymbol) -> RangeStep | None:
        if step.op not in _STEP_OPS:
            return None
        operands = []
        for position, item in enumerate(step.args):
            if (step.op == "where" and position == 0) or (step.op == "clamp" and item is None):
                operands.append(None)
            elif self._of(item) is source:
                # the argument, or a view or part of it (its values lie in the argument's range)
                operands.append(("step", self.step_of[id(item)]) if id(item) in self.step_of else ARGUMENT)
            elif isinstance(item, int) and not isinstance(item, bool):
                operands.append(pin(item))
            else:
                return None
        kwargs = []
        for key, value in step.kwargs.items():
            if key == "dtype" and isinstance(value, torch.dtype) and _is_integer(value):
                kwargs.append((key, value))
            elif isinstance(value, int) and not isinstance(value, bool) or (value is None and key in ("min", "max")):
                kwargs.append((key, pin(value)))
            else:
                return None
        if step.op in ("floor_divide", "remainder") and (not isinstance(operands[1], int) or operands[1] == 0):
            return None  # a number divisor, not zero
        if step.op == "clamp" and not all(bound is None or isinstance(bound, int) for bound in operands[1:]):
            return None  # number bounds
        return RangeStep(step.op, tuple(operands), tuple(kwargs), f"its {step.op}", step.location)

    def _key_read(self, key: Any) -> None:
        for item in _flat(key if isinstance(key, (tuple, list)) else (key,)):
            if self._of(item) is not None:
                self.read.add(self._of(item).name)

    def returned(self, result: Any) -> None:
        for item in _flat(result if isinstance(result, (tuple, list)) else (result,)):
            source = self._of(item)
            if source is not None and id(item) not in self.arguments:
                raise _data_use(source, "returns a part or view of it, which would be int32", None)

    # ---------------------------------------------------------------- device --

    def device_loop(self, loop: TileLoop) -> None:
        """Values computed from narrowed tensors, to a fixed point (an inner loop's carried
        value or an if's merged one may take them on in its body), then the stores."""
        before = -1
        while before != len(self.origin):
            before = len(self.origin)
            self._propagate(loop.body)
        self._check_writes(loop.body)

    def _propagate(self, body: list) -> None:
        for item in body:
            if isinstance(item, TileLoop):
                for carried in item.carried:
                    self._merge(carried.param, carried.init, carried.result, carried=True)
                self._propagate(item.body)
                for carried in item.carried:
                    self._merge(carried.out, carried.init, carried.result, carried=True)
            elif isinstance(item, IfBlock):
                for body_of_branch in item.bodies:
                    self._propagate(body_of_branch)
                for merged in item.outputs:
                    self._merge(merged.out, merged.then_value, merged.else_value)
            elif isinstance(item, Load):
                source = self._of(item.tensor)
                if source is not None:
                    self.read.add(source.name)
                    self.origin[id(item.output)] = source
                    if id(item.tensor) in self.step_of:  # a host step's values: that step's range
                        self.step_of[id(item.output)] = self.step_of[id(item.tensor)]
            elif _exact_cast(item) or getattr(item, "op", None) in _POSITIONS or unmoved_coordinate(item):
                continue  # the user's int32 of the caller's int64 values; or positions, not values
            elif isinstance(item, Node):
                sources = [self._of(arg) for arg in _flat(_value_operands(item)) if isinstance(arg, Value)]
                source = next((s for s in sources if s is not None), None)
                if source is not None:
                    self._device_step(item, source, {s.name for s in sources if s is not None})
                    for out in item.outputs:
                        if _is_integer(out.dtype):  # a comparison or a float result leaves the positions
                            self.origin[id(out)] = source

    def _device_step(self, node: Node, source: TensorSymbol, names: set[str]) -> None:
        """Device code computes with a narrowed argument's values: an integer result is a
        `RangeStep` (checked before each call to stay within int32, so int32 arithmetic gives
        torch's int64 result) where the op has an interval rule and its other operands are
        numbers; else it is unbounded, and a comparison or a float made from it is refused
        (torch would compute it from int64 values the kernel's int32 ones may have wrapped)."""
        if id(node) in self.stepped:
            return
        self.stepped.add(id(node))
        integer = [out for out in node.outputs if _is_integer(out.dtype)]
        if not integer and node.op in _HASHED:  # only the low 32 bits count, which int32 arithmetic keeps
            return
        if not integer:  # the values leave as a comparison or a float: exact if nothing wrapped
            wrapped = next((arg for arg in _flat(_value_operands(node)) if id(arg) in self.unbounded), None)
            if wrapped is not None:
                use = "stores" if isinstance(node, Store) else f"converts (its {node.op})"
                raise _data_use(source, f"{use} integers computed from its values (with "
                                        f"{self.unbounded[id(wrapped)]}), which int32 may not hold where torch's "
                                        "int64 does", node.location)
            return
        first = node.args[0] if node.args else None
        if _keeps_values(node) and isinstance(first, Value) and len(integer) == 1:  # a view: the same values
            if id(first) in self.step_of:
                self.step_of[id(integer[0])] = self.step_of[id(first)]
            elif id(first) in self.unbounded:
                self.unbounded[id(integer[0])] = self.unbounded[id(first)]
            return
        step = self._device_range_step(node, source) if len(names) == 1 and len(integer) == 1 else None
        if step is None:
            for out in integer:
                self.unbounded[id(out)] = f"its {node.op}" + _positions_hint(node)
            return
        steps = self.computed.setdefault(source.name, [])
        self.step_of[id(integer[0])] = len(steps)
        steps.append(step)

    def _device_range_step(self, node: Node, source: TensorSymbol) -> RangeStep | None:
        op = "sum" if node.op == "sum" and _is_integer(node.output.dtype) else node.op
        if op not in _STEP_OPS | {"sum"}:
            return None
        operands = []
        for position, item in enumerate(node.args):
            if (op == "where" and position == 0) or (op == "clamp" and item is None):
                operands.append(None)
            elif isinstance(item, Value) and self._of(item) is source and id(item) not in self.unbounded:
                operands.append(("step", self.step_of[id(item)]) if id(item) in self.step_of else ARGUMENT)
            elif isinstance(item, int) and not isinstance(item, bool):
                operands.append(pin(item))
            elif isinstance(item, Value) and self._of(item) is None and (within := _within(item)) is not None:
                operands.append(within)  # positions (`hl.arange`, a tile's index) whose range is known
            elif op == "sum" and position > 0:
                continue  # the dims and keepdim: the lane count below bounds the sum
            else:
                return None
        kwargs = [(key, value) for key, value in node.kwargs.items() if key in ("alpha", "min", "max", "dtype")
                  and (isinstance(value, torch.dtype) or type(value) is int or value is None)]
        if op == "sum":
            kwargs = [("count", max(1, math.prod(node.args[0].shape) // max(1, math.prod(node.output.shape))))]
        if op in ("floor_divide", "remainder") and (not isinstance(operands[1], int) or operands[1] == 0):
            return None
        return RangeStep(op, tuple(operands), tuple(kwargs), f"its {node.op}", node.location)

    def _merge(self, target: Value | None, *values: Value | None, carried: bool = False) -> None:
        """`target` holds one of `values` (an if's branches) or, `carried`, whatever a loop's
        iterations made of them: integers computed from a narrowed argument's values there have
        no range a finite chain of steps bounds."""
        source = next((self._of(v) for v in values if v is not None and self._of(v) is not None), None)
        if target is not None and source is not None:
            self.origin[id(target)] = source
            computed = [v for v in values if v is not None and (id(v) in self.step_of or id(v) in self.unbounded)]
            if _is_integer(target.dtype) and (carried or computed):
                self.unbounded[id(target)] = "a value carried through a loop" if carried else "an if's result"

    def _check_writes(self, body: list) -> None:
        for item in _nodes(body):
            if isinstance(item, Store):
                if self._of(item.tensor) is not None:
                    raise _data_use(self._of(item.tensor), "writes it", item.location)
                value = item.args[0] if item.args else None
                computed = isinstance(value, Value) and (id(value) in self.step_of or id(value) in self.unbounded)
                if computed and self._of(value) is not None:  # its values as read are stored as torch casts them
                    raise _data_use(self._of(value), "stores integers computed from its values as data",
                                    item.location)
            elif isinstance(item, RemoteCopy):
                for tensor in (item.src, item.dst):
                    if self._of(tensor) is not None:
                        raise _data_use(self._of(tensor), "copies it to another device", item.location)


# Host ops a narrowed argument's values may pass through as positions (RangeStep.interval)
_STEP_OPS = frozenset({"add", "sub", "rsub", "mul", "maximum", "minimum", "floor_divide", "remainder", "neg", "abs",
                       "pos", "where", "clamp", "to"})


def _exact_cast(node: Any) -> bool:
    """A cast the user wrote (`ids[t].to(torch.int32)`) straight after a load, to an integer of
    32 bits or fewer: torch casts the caller's int64 values, which the host checked fit int32, so
    the kernel's int32 values cast alike give torch's result, and what is computed from it is
    int32 arithmetic in torch as well."""
    if not (isinstance(node, Node) and node.op == "to" and node.kwargs.get("written")):
        return False
    source, out = node.args[0], node.output
    return (isinstance(source, Value) and isinstance(source.producer, Load) and _is_integer(out.dtype)
            and out.dtype.itemsize <= 4)


# Ops whose results are positions in their operand (not its values): they leave the values
_POSITIONS = frozenset({"argmax", "argmin"})
# Ops that hash an integer operand's 32-bit words (hl.rand's counter: a tile's coordinates in
# mixed radix, whose extents may come from offsets): torch's int64 number is never needed
_HASHED = frozenset({"random_uniform"})


def _keeps_values(node: Node) -> bool:
    """A node whose result holds values of its first operand and no others: a view or part
    of it (`v[:, None]`, a reshape, a narrowing read), a broadcast, a copy, a max or min."""
    if node.op in ("subview", "identity", "clone", "contiguous", "amax", "amin"):
        return True
    definition = ops.OPS.get(node.op)
    return definition is not None and definition.kind is ops.OpKind.VIEW and node.op not in ("cat", "stack")


def _value_operands(node: Node) -> tuple:
    """The operands whose values a node's result holds or computes from: not the positions a
    gather (`x[rows[t], cols[t]]`) or a narrowing read (`blk[i]`) reads at, nor the value a
    `*_like` fill takes only its shape from."""
    if node.op == "subview" or (node.op in ops.OPS and ops.OPS[node.op].kind is ops.OpKind.INDEXED):
        return node.args[:1]
    if node.op == "full":  # `torch.ones_like(ids[t])`: the fill, shaped like its second operand
        return node.args[:1]
    return node.args


def _nodes(body: list) -> Iterable[Node]:
    for item in body:
        if isinstance(item, TileLoop):
            yield from _nodes(item.body)
        elif isinstance(item, IfBlock):
            for branch in item.bodies:
                yield from _nodes(branch)
        else:
            yield item


def _flat(items: Iterable) -> Iterable:
    for item in items:
        if isinstance(item, (tuple, list)):
            yield from _flat(item)
        elif isinstance(item, slice):
            yield from _flat((item.start, item.stop, item.step))
        else:
            yield item


def _is_integer(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def _positions_hint(node: Node) -> str:
    """For a step on a tile's positions whose range data decides (`start + tile.index` over
    `hl.tile(end - start)`): the form that needs no range, comparing the positions themselves."""
    for arg in node.args:
        producer = arg.producer if isinstance(arg, Value) else None
        if producer is not None and (producer.op == "tile_index" or unmoved_coordinate(producer)):
            return (" of a tile's positions, whose loop's range data decides; compare the positions with the "
                    "range's length instead, `tile.index < end - start`")
    return ""


def _data_use(symbol: TensorSymbol, what: str, location: Any) -> exc.UnsupportedDtype:
    wide, narrow = (str(dtype).removeprefix("torch.") for dtype in (symbol.caller_dtype, symbol.dtype))
    if what == "writes it":  # an output passed in: the kernel may allocate it instead
        return exc.UnsupportedDtype(
            f"'{symbol.name}' is an {wide} tensor argument the kernel writes; the kernel holds {wide} as {narrow} "
            f"(TPU has no 64-bit vectors) and cannot write the caller's {wide} tensor. Allocate the output in the "
            f"kernel (`torch.empty([...], dtype=torch.long)` is returned as {wide}) or pass an {narrow} tensor.",
            location)
    return exc.UnsupportedDtype(
        f"'{symbol.name}' is an {wide} tensor, which the kernel can read only as {narrow} (TPU has no 64-bit "
        f"vectors): an {wide} tensor may index, offset and bound loops, but the kernel {what}. Cast the "
        f"values where the kernel reads them ({symbol.name}[...].to(torch.{narrow}): torch computes in "
        f"{narrow} from there too), pass {symbol.name}.to(torch.{narrow}), or convert what it computes to "
        "float32.", location)
