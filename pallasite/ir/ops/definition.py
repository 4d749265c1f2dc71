"""What an op definition says: its kind, its torch spellings, its arguments, its shape rule.

An `OpDef` is the one home of everything pallasite knows about an IR op
except its lowering (a rule per canonical name in `codegen/lowering.py`). The
frontend binds a torch call through the spelling's binder; the mask planner
reads `kind` and its payload (`reduction`, `contraction`, `view`, `tiles`);
the kernel emitter reads `kind` to tell structural ops from lowered ones. The
per-op facts other stages read live in the payloads too, never in tables of op
names: `Elementwise` (the cost model's EUP ops, the lowering's predicates) and
`Reduction` (its accumulator dtype, how chunk partials combine for
`reduction_loops`), `ScalarArithmetic` (what the op does to the int scalars of
loop bounds and block indices, which the planner evaluates and prints);
reference mode routes torch calls by `kind`.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

import torch

from ... import exc


class OpKind(enum.Enum):
    """How an op treats the padded tail of a partial tile; the mask planner's one dispatch."""

    ELEMENTWISE = "elementwise"  # lane by lane: the result is padded where a (broadcast) operand is
    REDUCTION = "reduction"  # mixes lanes along `dim`: padded lanes become the op's identity first
    CONTRACTION = "contraction"  # matmul family: padded contracted lanes become 0 first
    VIEW = "view"  # moves lanes without computing; its `ViewRule` says where the padding goes
    # reads its input at positions an index operand holds (torch.gather): the result is padded
    # where the index is; the indexed axis of the input must hold no padding, and the index's
    # values are checked against it in interpret mode
    INDEXED = "indexed"
    CREATION = "creation"  # a new value: padded along the axes a partial tile sizes
    STRUCTURAL = "structural"  # tile attributes and scalar reads, written by the kernel emitter


class ViewRule(enum.Enum):
    """Where a view moves the padded axes of its source."""

    BROADCAST = "broadcast"  # expand, identity: axes right-aligned with the source's
    PERMUTE = "permute"  # axis j of the result is axis perm[j] of the source
    RESHAPE = "reshape"  # whole axes only: merging or splitting a padded axis is rejected
    SUBSCRIPT = "subscript"  # getitem: an int drops an axis, None adds one
    # shift_lanes: lanes move along one axis, wrapping around. Only scans record it, and they
    # select past the lanes it wraps (ir/ops/scans.py), so the result counts as padded where
    # its source is
    SHIFT = "shift"
    # cat (and stack, its composite): the operands' axes side by side along `dim`. Padding along
    # the other axes is kept (every operand has their size); along `dim` it would sit inside the
    # result, so the mask planner refuses it
    CONCATENATE = "concatenate"
    # pad (F.pad, constant mode): each axis gains fill lanes before and after its own. Lanes
    # after a partial tile's padding would not follow its valid lanes, so padding an axis
    # that holds a partial tile's padding is refused (plan/masks.py); other axes keep theirs
    PAD = "pad"


@dataclass(frozen=True)
class ScalarArithmetic:
    """A binary op as integer arithmetic on Python scalars: the planner evaluates the int
    scalars of device code with it (`plan/schedule.py`, `plan/bounds.py`, `ir/nodes.py`),
    rebuilds them as index-map expressions (`plan/grid_exprs.py`) and prints them in
    messages (`bounds.describe`). Its Python `spelling` and `function` agree, and agree
    with the torch op on ints (`tests/test_op_registry.py`)."""

    spelling: str  # Python's: an infix operator ("+", "//") or a builtin called on both ("min")
    function: Callable[[Any, Any], Any]  # the same on Python numbers

    @property
    def infix(self) -> bool:
        """Written between its operands (`a + b`), not called (`min(a, b)`)."""
        return not self.spelling.isidentifier()


@dataclass(frozen=True)
class Elementwise:
    """An elementwise op's facts. Every entry states each one (no defaults)."""

    # evaluated through the EUP, the one transcendental unit (exp, log, tanh, division's
    # reciprocal, ...): the cost model charges each vreg there too (plan/vector_work.py)
    transcendental: bool
    # a bool result computed from its operands in their promoted dtype (isnan, logical_and,
    # comparisons), not in the result's dtype like arithmetic
    predicate: bool
    # the op on int scalars (add, floor_divide, minimum, ...); None: the planner does not
    # compute with it when it evaluates or rebuilds a scalar
    scalar: ScalarArithmetic | None
    # a 16-bit float result is computed in float32 and rounded once, as torch computes it: a
    # function or a formula of several steps (lerp, addcmul), where rounding each step in 16
    # bits lands an ulp off. False: one correctly rounded step, the same either way (add also
    # widens when its alpha is not 1: codegen/op_calls.py:lower)
    widened: bool


class Accumulator(enum.Enum):
    """The dtype a reduction computes in."""

    SOURCE = "source"  # compares or picks values (amax, argmax, all): the source's own dtype
    # adds or multiplies (sum, mean, prod): the result's dtype (`dtype=`, an integer sum's
    # promotion), and float32 for 16-bit floats, rounded once at the end as torch does
    RESULT = "result"
    WIDENED = "widened"  # logsumexp: float32 for 16-bit floats, else the source's dtype

    @property
    def widens_half_floats(self) -> bool:
        """16-bit float sources are reduced in float32 (torch's rule), the result rounded once."""
        return self is not Accumulator.SOURCE


class Partials(enum.Enum):
    """How a reduction's partial results over chunks of its dim combine (`reduction_loops`)."""

    ADD = "add"  # sum, mean (divided by the dim's extent at the end)
    MULTIPLY = "multiply"  # prod
    MAXIMUM = "maximum"  # amax
    MINIMUM = "minimum"  # amin
    # argmax/argmin carry (best value, its index): a chunk's best replaces the carried one
    # where strictly larger (smaller), so the first occurrence wins as in torch
    ARGMAX = "argmax"
    ARGMIN = "argmin"
    # all/any carry whether every (some) chunk so far held only nonzero (a nonzero) element
    ALL = "all"
    ANY = "any"


@dataclass(frozen=True)
class Reduction:
    """A reduction's facts. Every entry states each one (no defaults)."""

    identity: float | bool  # what padded lanes become before reducing
    averages: bool  # divides by the element count, which must count valid lanes only
    # returns the position of its pick (argmax/argmin), an int32 index; without dim a flat
    # one, which must count valid lanes only
    flat_index: bool
    accumulator: Accumulator
    partials: Partials | None  # None: it cannot run as a loop over chunks (logsumexp)
    transcendental: bool  # evaluated through the EUP (logsumexp's exp and log), as `Elementwise`


@dataclass(frozen=True)
class Contraction:
    """A matmul-family op: which operands are multiplied, and which one is added.

    Torch's matmul convention: the last axis of `lhs` is contracted with the
    second-to-last of `rhs`; leading axes of `lhs` are batch axes.
    """

    lhs: int  # operand positions of the two factors
    rhs: int
    addend: int | None = None  # an operand broadcast onto the product (addmm's input)

    @staticmethod
    def contracted_axes(lhs_rank: int, rhs_rank: int) -> tuple[int, int]:
        """The contracted axis of each factor: the lhs's last; the rhs's second to last, or
        its only one (matrix @ vector). Both sides' padding is masked: 0 times a padded
        lane that holds NaN is NaN (a trial: matrix @ vector over a partial tile was NaN)."""
        return lhs_rank - 1, (rhs_rank - 2 if rhs_rank >= 2 else 0)


# ----------------------------------------------------------------- dtypes --
# The dtypes a TPU vector holds (no 64-bit, no complex: `frontend/operands.py:check_dtype`),
# in groups an entry's `dtypes` is written with and the supported-forms page names.
FLOATS = frozenset({torch.float32, torch.bfloat16, torch.float16})
INTEGERS = frozenset({torch.int32, torch.int16, torch.int8, torch.uint8})
BOOL = frozenset({torch.bool})
NUMBERS = FLOATS | INTEGERS
BITS = INTEGERS | BOOL  # bitwise ops
EVERY_DTYPE = FLOATS | INTEGERS | BOOL


REQUIRED = object()  # an attr without a default


@dataclass(frozen=True)
class Signature:
    """An op's IR arguments: operands (values, in this order) and attrs (with defaults).

    `bind` turns a torch call's positional/keyword arguments into this form, so
    `x.sum(1, True)` and `torch.sum(x, dim=1, keepdim=True)` record the same node.
    """

    operands: tuple[str, ...] = ("input",)
    attrs: Mapping[str, Any] = field(default_factory=dict)
    optional: frozenset[str] = frozenset()  # operands that default to None (clamp's min/max)

    def __post_init__(self) -> None:
        object.__setattr__(self, "attrs", MappingProxyType(dict(self.attrs)))

    def bind(self, op: str, args: tuple, kwargs: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """Bind `args`/`kwargs` of a call of `op` to (operands, attrs)."""
        params = list(self.operands) + list(self.attrs)
        if len(args) > len(params):
            raise exc.UnsupportedOperation(f"Too many arguments to {op}: {len(args)}.")
        bound: dict[str, Any] = dict(zip(params, args))
        for key, value in kwargs.items():
            if key == "out":
                raise exc.UnsupportedOperation(f"{op}(out=...) is not supported in kernels.")
            if key not in params:
                raise exc.UnsupportedOperation(f"{op}() got an unsupported argument {key!r}.")
            if key in bound:
                raise exc.UnsupportedOperation(f"{op}() got {key!r} twice.")
            bound[key] = value
        operands = []
        for param in self.operands:
            if param not in bound and param not in self.optional:
                raise exc.UnsupportedOperation(f"{op}() is missing argument {param!r}.")
            operands.append(bound.get(param))
        attrs = {}
        for param, default in self.attrs.items():
            value = bound.get(param, default)
            if value is REQUIRED:
                raise exc.UnsupportedOperation(f"{op}() is missing argument {param!r}.")
            attrs[param] = value
        if attrs.get("inplace"):
            raise exc.UnsupportedOperation(f"{op}(inplace=True) is not supported; assign the result.")
        attrs.pop("inplace", None)
        return operands, attrs


UNARY = Signature()
BINARY = Signature(("input", "other"))
REDUCE = Signature(attrs={"dim": None, "keepdim": False, "dtype": None})


@dataclass(frozen=True)
class Call:
    """One call of a spelling, as its binder sees it.

    `args`/`kwargs` are what the user passed (traced values, constants);
    `function` is the callable they called, whose result on meta tensors is
    the default shape rule (None when pallasite records the op itself). The
    frontend lends three services: `meta_of` (an argument's meta tensor, or the
    argument itself if it is not traced), `run_meta` (run a shape rule on
    the meta tensors of its arguments, turning torch's errors into ours),
    `size_of` (the int a size argument stands for: a tile is its block size; a
    value known only at run time is an error saying so) and `constant_of(value, key)`
    (a composite's number parameter, `F.celu(x, alpha)`: a kernel argument there is made a
    constant of the variant, as an op's attrs are; lists item by item) and `fewest_valid`.
    """

    spelling: str
    args: tuple
    kwargs: Mapping[str, Any]
    function: Callable | None
    display: str
    meta_of: Callable[[Any], Any]
    run_meta: Callable[[Callable, tuple, dict], Any]
    size_of: Callable[[Any], Any] = lambda item: item
    constant_of: Callable[[Any, str], Any] = lambda item, key: item
    # the fewest valid elements a tile of a device value may hold along an axis a partial tile
    # pads (the last tile's count; 1 where the range is read from data), None along a whole axis
    fewest_valid: Callable[[Any, int], "int | None"] = lambda item, axis: None

    def rank_of(self, item: Any) -> int:
        meta = self.meta_of(item)
        return meta.ndim if isinstance(meta, torch.Tensor) else 0


Bound = tuple[list, dict, Any]  # operands, attrs, the meta result (its shape and dtype)


@dataclass(frozen=True)
class Redirect:
    """A spelling that is one of several ops, or several at once (torch.max: `maximum`,
    `amax`, or `amax` + `argmax`). The frontend applies each call in order (an `Earlier`
    argument is an earlier call's result) and packs the results."""

    calls: tuple[tuple[str, tuple, dict], ...]  # (spelling, args, kwargs)
    pack: Callable[[list], Any]


@dataclass(frozen=True)
class Earlier:
    """An argument of a `Redirect`'s call: the result of one of its earlier calls
    (`x.sum(1, dtype=torch.float32)`: the cast's result is the sum's operand)."""

    index: int


Binder = Callable[["OpDef", Call], "Bound | Redirect"]
# record(spelling, *args, **kwargs): apply one spelling, return its result; also
# record.internal(op, operand, **attrs) for an op no spelling names, and record.arange(n)
Record = Callable[..., Any]


@dataclass(frozen=True)
class Composite:
    """A torch function that is a small program of registry ops (softmax: amax, sub, exp,
    sum, div). It is no IR op: the frontend records its steps, so the mask planner, the
    lowering rules and reference mode (which runs torch's own function) need nothing new."""

    name: str
    spellings: tuple[str, ...]
    expand: Callable[[Call, Record], Any]  # the steps, each through `record`; returns the result
    # What the supported-forms page says of it, as `OpDef.dtypes` / `OpDef.note`
    dtypes: frozenset[torch.dtype] | None = None
    note: str = ""


@dataclass(frozen=True)
class Spelling:
    """A name the frontend resolves to an op: a torch function, Tensor method,
    torch.nn.functional or torch.special function, or an alias of one."""

    name: str
    bind: Binder | None = None  # None: the op's own binder


@dataclass(frozen=True)
class PythonOperator:
    """The Python operator spelling of an op (`a + b`); `function` on meta tensors is its shape rule."""

    function: Callable
    dunder: str
    reflected: str | None = None  # `2 + a` calls `a.__radd__(2)`


@dataclass(frozen=True)
class OpDef:
    """Everything pallasite knows about one IR op, but its lowering rule."""

    name: str
    kind: OpKind
    bind: Binder
    spellings: tuple[Spelling, ...] = ()
    signature: Signature = UNARY
    meta: Callable | None = None  # the shape/dtype rule, when the called torch function does not fit
    operator: PythonOperator | None = None
    elementwise: Elementwise | None = None  # ELEMENTWISE
    reduction: Reduction | None = None  # REDUCTION
    contraction: Contraction | None = None  # CONTRACTION
    view: ViewRule | None = None  # VIEW
    # CREATION / STRUCTURAL: the tile dim sizing each result axis (args, attrs) -> dims or None
    tiles: Callable[[tuple, Mapping[str, Any]], tuple] | None = None
    tile_attribute: str | None = None  # STRUCTURAL: the `tile.<attribute>` this op reads
    # What the supported-forms page (docs/supported-forms.md, `python -m pallasite forms`)
    # says of an op a user spells: the input dtypes it accepts on a TPU (torch's rule, within
    # EVERY_DTYPE; tests/test_supported_forms.py checks torch accepts each) and a short note
    # where its behaviour needs one (ties, rounding, NaN, how a TPU computes it). Every op
    # with a torch spelling or Python operator states `dtypes`; None only for ops no user
    # spells (`hl`'s own and structural ones, documented with `hl`).
    dtypes: frozenset[torch.dtype] | None = None
    note: str = ""

    def __post_init__(self) -> None:
        payloads = {
            OpKind.ELEMENTWISE: self.elementwise, OpKind.REDUCTION: self.reduction,
            OpKind.CONTRACTION: self.contraction,
            OpKind.VIEW: self.view,
        }
        for kind, payload in payloads.items():
            if (kind is self.kind) != (payload is not None):
                raise ValueError(f"op {self.name!r} ({self.kind.name}) and its {kind.name.lower()} payload disagree")
        if self.tiles is not None and self.kind not in (OpKind.CREATION, OpKind.STRUCTURAL):
            raise ValueError(f"op {self.name!r}: only created values are sized by tiles")
        if self.tile_attribute is not None and self.kind is not OpKind.STRUCTURAL:
            raise ValueError(f"op {self.name!r}: only structural ops read tile attributes")

    @property
    def scalar(self) -> ScalarArithmetic | None:
        """The op as integer arithmetic on scalars (see `Elementwise.scalar`), or None."""
        return self.elementwise.scalar if self.elementwise is not None else None

    @property
    def transcendental(self) -> bool:
        """Whether its evaluation goes through the EUP (see `Elementwise.transcendental`)."""
        payload = self.elementwise or self.reduction
        return payload is not None and payload.transcendental

    def tiles_of(self, args: tuple, attrs: Mapping[str, Any]) -> tuple:
        return self.tiles(args, attrs) if self.tiles is not None else ()


@dataclass(frozen=True)
class Factory:
    """A torch allocation. Host code records an `Allocate`; device code's `*_like` forms
    record a `full`, the others are rejected (device values are shaped by tiles)."""

    name: str
    fill: Any  # the contents: a value, None (uninitialized), or FILL_ARGUMENT
    form: str  # "size": torch.zeros(size); "like": torch.zeros_like(x); "new": x.new_zeros(size)


FILL_ARGUMENT = object()  # torch.full(size, fill_value) and friends: the fill is an argument



def new_tensor_size_and_fill(rest: tuple, kwargs: dict, fill: Any) -> tuple[Any, Any]:
    """The size and fill of `t.new_zeros(...)` and friends from the arguments after `t`
    (`fill` is the factory's: a value, or FILL_ARGUMENT for new_full's own argument)."""
    if fill is FILL_ARGUMENT:
        return (rest[0] if rest else kwargs.get("size"),
                rest[1] if len(rest) > 1 else kwargs.get("fill_value"))
    if len(rest) == 1 and isinstance(rest[0], (list, tuple, torch.Size)):
        return rest[0], fill
    return (rest or kwargs.get("size")), fill
