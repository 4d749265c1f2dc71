"""Emit a planned `LoopedReduction` (`reduction_loops`): a `lax.fori_loop` over chunks
of the reduced dim, recomputing the reduction's region per chunk and carrying its partial."""
from __future__ import annotations

import torch

from ..ir import Load, Node, Value, walk_nodes
from ..ir.ops import OPS, Accumulator, Partials
from ..plan.plans import LoopedReduction
from .frames import typed_fill
from .lowering import NARROW_EXTREMES, Arg, OpCall, jnp_dtype, literal, lower

_LOW_PRECISION = (torch.bfloat16, torch.float16)
# How each kind of partial (the registry's `Reduction.partials`) is reduced over a chunk and combined.
_PARTIAL = {Partials.ADD: "jnp.sum", Partials.MULTIPLY: "prod_by_halves", Partials.MAXIMUM: "jnp.max",
            Partials.MINIMUM: "jnp.min"}
_COMBINE = {Partials.ADD: "{a} + {b}", Partials.MULTIPLY: "{a} * {b}",
            Partials.MAXIMUM: "jnp.maximum({a}, {b})", Partials.MINIMUM: "jnp.minimum({a}, {b})"}
# all/any carry 0/1 in int32 (a chunk's answer, combined by min/max; a float source is never cast)
_LOGICAL = {Partials.ALL: ("jnp.all", "jnp.minimum({a}, {b})"), Partials.ANY: ("jnp.any", "jnp.maximum({a}, {b})")}
# argmax/argmin carry (best value, its index): how a chunk's best is found and beats the carried one
_ARG = {Partials.ARGMAX: ("jnp.max", "jnp.argmax", ">"), Partials.ARGMIN: ("jnp.min", "jnp.argmin", "<")}


def emit_looped_reduction(k, node: Node, looped: LoopedReduction) -> None:
    source, out = node.args[0], node.output
    op, axis, chunk = node.op, looped.axis, looped.chunk
    reduction = OPS[op].reduction
    partials = reduction.partials
    accumulates = reduction.accumulator is Accumulator.RESULT
    if partials in _LOGICAL:
        acc_dtype = torch.int32
    elif accumulates:
        acc_dtype = torch.float32 if source.dtype in _LOW_PRECISION else out.dtype
    else:  # Mosaic reduces 32-bit values only: narrow extremes are carried in int32
        acc_dtype = torch.int32 if source.dtype in NARROW_EXTREMES else source.dtype
    counter = k.names.fresh("chunk")
    body = k.names.fresh(f"{op}_chunks")
    partial = k.names.fresh("partial")
    tail = f", tail masked with {typed_fill(looped.fill, source.dtype)}" if looped.tail_masked else ""
    k.comment(f"{looped.reason} of {chunk}{tail}")
    producers = {n.id: n for n in _region_nodes(k, looped)}
    for region_node in producers.values():  # a data-read scalar index is checked before the loop
        if isinstance(region_node, Load):
            k.emit_index_checks(region_node)
    with k.block(f"def {body}({counter}, {partial}):"):
        k.reduction_chunks[node.id] = counter
        saved = {}
        try:
            _emit_chunk_body(k, node, looped, producers, saved, counter, partial, acc_dtype)
        finally:
            for value_id, previous in saved.items():
                if previous is None:
                    k.env.pop(value_id, None)
                else:
                    k.env[value_id] = previous
            del k.reduction_chunks[node.id]
    init = f"jnp.full({literal(tuple(out.shape))}, {typed_fill(looped.fill, acc_dtype)}, {jnp_dtype(acc_dtype)})"
    if partials in _ARG:  # (best value, its index): the index is the result
        init = f"({init}, jnp.zeros({literal(tuple(out.shape))}, jnp.int32))"
    result = f"lax.fori_loop(0, {looped.trips}, {body}, {init})"
    if partials in _ARG:
        result = f"{result}[1]"
    if reduction.averages:
        result = f"{result} / {looped.extent}"
    if acc_dtype != out.dtype:
        result = f"({result}).astype({jnp_dtype(out.dtype)})"
    name = k.bind(out, op)
    k.emit(f"{name} = {result}")


def _emit_chunk_body(k, node: Node, looped: LoopedReduction, producers: dict, saved: dict, counter: str,
                     partial: str, acc_dtype) -> None:
    """One chunk: the region's ops on chunk shapes, the tail mask, the partial combined."""
    source, axis, chunk = node.args[0], looped.axis, looped.chunk
    partials = OPS[node.op].reduction.partials
    for region_id in looped.region:
        region_node = producers[region_id]
        value = region_node.outputs[0]
        saved[value.id] = k.env.get(value.id)
        text = _chunk_text(k, region_node, looped)
        if any(text == k.render(operand) for operand in region_node.args if isinstance(operand, Value)):
            k.set_value(value, text)  # a no-op (same-dtype cast)
            continue
        hint = region_node.tensor.name if isinstance(region_node, Load) else value.name or region_node.op
        name = k.names.fresh(f"{hint}_chunk")
        k.emit(f"{name} = {text}")
        k.bind_name(value, name)
    text = k.render(source)
    chunk_shape = _chunk_shape(source, looped)
    if looped.tail_masked:
        valid = (f"{counter} * {chunk} + lax.broadcasted_iota(jnp.int32, {literal(chunk_shape)}, {axis}) "
                 f"< {looped.extent}")
        text = f"jnp.where({valid}, {text}, {typed_fill(looped.fill, source.dtype)})"
    keepdim = node.kwargs.get("keepdim", False)
    if partials in _ARG:
        if source.dtype in NARROW_EXTREMES:
            text = f"({text}).astype(jnp.int32)"
        _emit_arg_partial(k, node, looped, text, counter, partial)
        return
    if partials in _LOGICAL:
        function, combine = _LOGICAL[partials]
        reduced = f"{function}({text}, axis={axis}{_keepdims(keepdim)}).astype(jnp.int32)"
        k.emit(f"return {combine.format(a=partial, b=reduced)}")
        return
    if source.dtype != acc_dtype:
        text = f"({text}).astype({jnp_dtype(acc_dtype)})"
    reduced = f"{_PARTIAL[partials]}({text}, axis={axis}{_keepdims(keepdim)})"
    k.emit(f"return {_COMBINE[partials].format(a=partial, b=reduced)}")


def _keepdims(keepdim: bool) -> str:
    """The keyword only when it differs from jnp's default (False)."""
    return ", keepdims=True" if keepdim else ""


def _emit_arg_partial(k, node: Node, looped: LoopedReduction, text: str, counter: str, partial: str) -> None:
    """argmax/argmin: the chunk's best value and its index (offset by the chunk's start)
    replace the carried pair where strictly better, so the first occurrence wins as in
    torch; NaN counts as the best, as torch's argmax/argmin do."""
    source = node.args[0]
    partials = OPS[node.op].reduction.partials
    best_of, arg_of, better = _ARG[partials]
    axis, keepdim = looped.axis, node.kwargs.get("keepdim", False)
    values = k.names.fresh("chunk_values")
    best, index = k.names.fresh("best"), k.names.fresh("best_index")
    k.emit(f"{best}, {index} = {partial}")
    k.emit(f"{values} = {text}")
    chunk_best, chunk_index, wins = k.names.fresh("chunk_best"), k.names.fresh("chunk_index"), k.names.fresh("wins")
    k.emit(f"{chunk_best} = {best_of}({values}, axis={axis}{_keepdims(keepdim)})")
    if source.dtype.is_floating_point:  # Mosaic's argmax/argmin take float32 (widening is exact)
        wide = values if source.dtype == torch.float32 else f"{values}.astype(jnp.float32)"
        arg = f"{arg_of}({wide}, axis={axis}{_keepdims(keepdim)}).astype(jnp.int32)"
    else:  # Mosaic's argmax/argmin take float32 only
        arg = f"integer_arg_extreme({values}, {axis}, {keepdim}, largest={partials is Partials.ARGMAX})"
    k.emit(f"{chunk_index} = {counter} * {looped.chunk} + {arg}")
    condition = f"{chunk_best} {better} {best}"
    if source.dtype.is_floating_point:
        condition = f"({condition}) | (jnp.isnan({chunk_best}) & ~jnp.isnan({best}))"
    k.emit(f"{wins} = {condition}")
    k.emit(f"return jnp.where({wins}, {chunk_best}, {best}), jnp.where({wins}, {chunk_index}, {index})")


def _region_nodes(k, looped: LoopedReduction) -> list[Node]:
    wanted = set(looped.region)
    return [n for n in walk_nodes(k.plan.call.loop.body) if n.id in wanted]


def _chunk_shape(value: Value, looped: LoopedReduction) -> tuple[int, ...]:
    shape = list(value.shape)
    shape[looped.chunk_axes[id(value)]] = looped.chunk
    return tuple(shape)


def _chunk_text(k, node: Node, looped: LoopedReduction) -> str:
    if isinstance(node, Load):
        access = looped.loads[node.id]
        return f"{access.ref_name}[{k.ref_subscript(access)}]"
    args = []
    for operand in node.args:
        if isinstance(operand, Value):
            shape = _chunk_shape(operand, looped) if id(operand) in looped.chunk_axes else tuple(operand.shape)
            args.append(Arg(k.render(operand), shape, operand.dtype, operand))
        else:
            args.append(Arg(k.render(operand), None, None, operand))
    out = node.outputs[0]
    return lower(OpCall(node.op, args, dict(node.kwargs), _chunk_shape(out, looped), out.dtype))
