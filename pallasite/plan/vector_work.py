"""Vector-unit work of one IR node, in vregs: what the cost model charges the VPU and EUP.

A TPU vector register (vreg) holds 8 sublanes x 128 lanes of 32 bits: an
(8, 128) tile of float32, (16, 128) of bfloat16, (32, 128) of int8. A value of
shape (..., m, n) occupies `prod(...) * cdiv(m, 8 * packing) * cdiv(n, 128)`
vregs, padding included: a row vector (1, n) fills a whole vreg per 128 lanes
with 1 of its 8 sublanes used, a column (n, 1) one vreg per 8 rows. The cost
model charges padded vregs because the hardware pays for them.

Per node (`VectorCounter.work`):
- elementwise and creation ops: one VALU op per vreg of the widest of their
  result and operands (a cast reads bf16 vregs and writes f32 ones; a 16-bit result
  computed in float32, `ops.computes_in_float32`, is as wide as its f32 values); the
  transcendental ones (`OpDef.transcendental`, stated by each registry entry: exp,
  log, tanh, rsqrt, division's reciprocal, ...) also push each vreg through the
  EUP, the one transcendental unit;
- reductions: one combining op per vreg of the operand, plus one per result vreg;
- contractions: the MXU flops are `schedule.node_flops`; the vector side pops
  each result vreg from the MXU result buffer (and adds an `acc=` addend).
  When the product's f32 result rows (one (8, side) accumulator per 8 rows)
  outgrow one MXU's accumulators (JAX's `num_accumulators`) and the
  contraction takes several side-deep passes, every pass but the last is
  popped, re-added and stored;
- `permute` of the last two axes: a transpose through the XLU, a vreg each;
- `cat`: a vreg copied each where Mosaic concatenates whole tiles, else an iota
  compare, a select and a sum per vreg of each piece's (result x piece positions)
  one-hot, as torch.gather;
  other views (broadcasts, subscripts, reshapes of leading axes) are folded
  into their consumers' operand reads and cost nothing here;
- stores to a block: one vector store per vreg; loads cost nothing (three load
  slots per bundle keep them off the critical path).

`VectorWork.stores` also counts each result vreg of a value that must sit in
VMEM: bigger than the vreg file (`VREG_FILE` = 64 vregs) and not consumed vreg
by vreg by one elementwise successor (read twice, by a contraction, carried
across steps, or not read in the body). A chain of single-use elementwise ops
(`qk * scale` then `where`) stays in registers, vreg by vreg.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..ir import IfBlock, Load, Store, TileLoop, Value, cdiv
from ..ir.ops import OPS, computes_in_float32
from ..ir.ops.definition import OpKind, ViewRule
from .tpu_tiling import LANES, SUBLANES, aligned_concatenation
from .vmem import sublane_tile

VREG_FILE = 64  # vregs per TensorCore (every generation so far)


@dataclass(frozen=True)
class VectorWork:
    valu: int = 0  # vector ALU ops, one per vreg
    eup: int = 0  # vregs pushed through the transcendental unit
    stores: int = 0  # vregs written to VMEM (spilled results and stores)

    def __add__(self, other: "VectorWork") -> "VectorWork":
        return VectorWork(self.valu + other.valu, self.eup + other.eup, self.stores + other.stores)

    def __mul__(self, times: int) -> "VectorWork":
        return VectorWork(self.valu * times, self.eup * times, self.stores * times)


NONE = VectorWork()


def vregs(shape, dtype) -> int:
    """Vregs a value of `shape` and `dtype` occupies: one per native tile (`vmem.sublane_tile`
    rows x 128 lanes), padding included."""
    dims = [1 if d is None else int(d) for d in shape] or [1]
    rows = dims[-2] if len(dims) >= 2 else 1
    return math.prod(dims[:-2]) * cdiv(rows, sublane_tile(dtype)) * cdiv(dims[-1], LANES)


def _value_vregs(value) -> int:
    if not isinstance(value, Value) or not value.shape:
        return 0
    return vregs(value.shape, value.dtype)


class VectorCounter:
    """Counts `vector_work` for the nodes of one pallas_call body.

    `mxu` = (side, accumulators): the MXU's width and its f32 accumulator buffers of
    (8, side) per MXU (JAX's `TpuInfo.mxu_column_size`, `num_accumulators`; 0 when
    unknown, which disables the result-buffer rule below)."""

    def __init__(self, body: list, mxu: tuple[int, int] = (128, 0)):
        self.side, self.accumulators = mxu
        self.uses: dict[int, list] = {}
        self.carried: set[int] = set()
        self._index(body)

    def _index(self, body: list) -> None:
        for item in body:
            if isinstance(item, TileLoop):
                self.carried.update(id(c.result) for c in item.carried if c.result is not None)
                self._index(item.body)
            elif isinstance(item, IfBlock):
                self._index(item.then_body)
                self._index(item.else_body)
            else:
                for arg in (*item.args, *item.kwargs.values()):
                    if isinstance(arg, Value):
                        self.uses.setdefault(id(arg), []).append(item)

    def materialized(self, value) -> bool:
        """Whether `value` is written to VMEM: bigger than the vreg file and not consumed
        vreg by vreg by one elementwise successor (read twice, by a contraction, carried
        across loop steps, or read by nothing in the body)."""
        if _value_vregs(value) <= VREG_FILE:
            return False
        users = self.uses.get(id(value), [])
        if id(value) in self.carried or len(users) != 1:
            return True
        (user,) = users
        if isinstance(user, Store):  # the store writes it (counted there)
            return False
        definition = OPS.get(getattr(user, "op", None))
        return definition is None or definition.kind is OpKind.CONTRACTION

    def work(self, node) -> VectorWork:
        """The vector-unit work of one run of `node` (see the module docstring)."""
        if isinstance(node, Store):
            return VectorWork(stores=_value_vregs(node.args[0])) if node.args else NONE
        if isinstance(node, Load):
            return NONE
        definition = OPS.get(getattr(node, "op", None))
        if definition is None or not node.outputs:
            return NONE
        out = max((_value_vregs(v) for v in node.outputs), default=0)
        stored = sum(_value_vregs(v) for v in node.outputs if self.materialized(v))
        kind = definition.kind
        if kind in (OpKind.ELEMENTWISE, OpKind.CREATION):
            width = max([out, *(_value_vregs(a) for a in node.args)])
            scalars = tuple(a.dtype if isinstance(a, Value) and a.shape == () else None for a in node.args)
            if computes_in_float32(node.op, node.kwargs, node.outputs[0].dtype, scalars):  # f32 math, 16-bit
                width = max(width, vregs(node.outputs[0].shape, torch.float32))
            eup = width if definition.transcendental else 0
            return VectorWork(valu=width, eup=eup, stores=stored)
        if kind is OpKind.REDUCTION:
            source = _value_vregs(node.args[0]) if node.args else 0
            eup = source if definition.transcendental else 0
            return VectorWork(valu=source + out, eup=eup, stores=stored)
        if kind is OpKind.CONTRACTION:
            addend = sum(_value_vregs(a) for a in node.args[2:])
            spill = self._result_buffer_spill(node, definition)
            return VectorWork(valu=out + addend + spill, stores=stored + spill)
        if kind is OpKind.INDEXED:  # torch.gather: an iota compare, a select and a sum per one-hot vreg
            source, index = node.args
            dim = node.kwargs["dim"]
            hot = (*index.shape[:dim], source.shape[dim] * index.shape[dim], *index.shape[dim + 1:])
            return VectorWork(valu=3 * vregs(hot, index.dtype), stores=stored)
        if kind is OpKind.VIEW and definition.view is ViewRule.CONCATENATE:
            return _concatenation_work(node, out, stored)
        if kind is OpKind.VIEW and definition.view is ViewRule.PERMUTE:
            perm = tuple(node.kwargs.get("perm", ()))
            rank = len(perm)
            if rank >= 2 and perm[-2:] != (rank - 2, rank - 1):
                return VectorWork(valu=out, stores=stored)
        return NONE

    def _result_buffer_spill(self, node, definition) -> int:
        """Vregs of partial sums popped and re-added when a product's f32 result rows
        (one (8, side) accumulator per 8 rows of each `side`-wide column slab) outgrow one
        MXU's accumulators while its contraction takes several `side`-deep passes: every
        pass but the last is popped to vregs, added and stored."""
        lhs = node.args[definition.contraction.lhs]
        if not self.accumulators or not isinstance(lhs, Value) or len(lhs.shape) < 2:
            return 0
        passes = cdiv(lhs.shape[-1], self.side)
        if passes <= 1 or cdiv(lhs.shape[-2], SUBLANES) <= self.accumulators:
            return 0
        return (passes - 1) * max(_value_vregs(v) for v in node.outputs)


def _concatenation_work(node, out: int, stored: int) -> VectorWork:
    """torch.cat: a copy of each vreg where Mosaic concatenates whole tiles; else, per piece,
    an iota compare, a select and a sum over (result positions x piece positions) along the
    axis (`pallasite/runtime/relayout.py`)."""
    dim = node.kwargs["dim"]
    dtype = node.outputs[0].dtype
    if aligned_concatenation([tuple(arg.shape) for arg in node.args], dtype, dim):
        return VectorWork(valu=out, stores=stored)
    total = node.outputs[0].shape[dim]
    hot = sum(vregs((*arg.shape[:dim], total * arg.shape[dim], *arg.shape[dim + 1:]), torch.int32) for arg in node.args)
    return VectorWork(valu=3 * hot, stores=stored)
