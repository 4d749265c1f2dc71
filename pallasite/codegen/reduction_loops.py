"""Emit a planned `LoopedReduction` (`reduction_loops`): a `lax.fori_loop` over chunks
of the reduced dim, recomputing the reduction's region per chunk and carrying its partial."""
from __future__ import annotations

import torch

from ..ir import Load, Node, Value, walk_nodes
from ..ir.ops import OPS, Accumulator, Partials
from ..plan.plans import LoopedReduction
from .lowering import Arg, OpCall, jnp_dtype, literal, lower

_LOW_PRECISION = (torch.bfloat16, torch.float16)
# How each kind of partial (the registry's `Reduction.partials`) is reduced over a chunk and combined.
_PARTIAL = {Partials.ADD: "jnp.sum", Partials.MULTIPLY: "prod_by_halves", Partials.MAXIMUM: "jnp.max",
            Partials.MINIMUM: "jnp.min"}
_COMBINE = {Partials.ADD: "{a} + {b}", Partials.MULTIPLY: "{a} * {b}",
            Partials.MAXIMUM: "jnp.maximum({a}, {b})", Partials.MINIMUM: "jnp.minimum({a}, {b})"}
# argmax/argmin carry (best value, its index): how a chunk's best is found and beats the carried one
_ARG = {Partials.ARGMAX: ("jnp.max", "jnp.argmax", ">"), Partials.ARGMIN: ("jnp.min", "jnp.argmin", "<")}


def emit_looped_reduction(k, node: Node, looped: LoopedReduction, indent: int) -> None:
    from .kernel import _typed_fill

    source, out = node.args[0], node.output
    op, axis, chunk = node.op, looped.axis, looped.chunk
    reduction = OPS[op].reduction
    partials = reduction.partials
    accumulates = reduction.accumulator is Accumulator.RESULT
    acc_dtype = (torch.float32 if source.dtype in _LOW_PRECISION else out.dtype) if accumulates else source.dtype
    counter = k.names.fresh("chunk")
    body = k.names.fresh(f"{op}_chunks")
    partial = k.names.fresh("partial")
    tail = f", tail masked with {_typed_fill(looped.fill, source.dtype)}" if looped.tail_masked else ""
    k.emit(f"# {looped.reason} of {chunk}{tail}", indent)
    producers = {n.id: n for n in _region_nodes(k, looped)}
    for region_node in producers.values():  # a data-read scalar index is checked before the loop
        if isinstance(region_node, Load):
            k._emit_index_checks(region_node, indent)
    k.emit(f"def {body}({counter}, {partial}):", indent)
    k.reduction_chunks[node.id] = counter
    saved = {}
    try:
        for region_id in looped.region:
            region_node = producers[region_id]
            value = region_node.outputs[0]
            saved[value.id] = k.env.get(value.id)
            text = _chunk_text(k, region_node, looped)
            if text.isidentifier() and text in k.env.values():  # a no-op (same-dtype cast)
                k.env[value.id] = text
                continue
            hint = region_node.tensor.name if isinstance(region_node, Load) else value.name or region_node.op
            name = k.names.fresh(f"{hint}_chunk")
            k.emit(f"{name} = {text}", indent + 1)
            k.env[value.id] = name
        text = k.render(source)
        chunk_shape = _chunk_shape(source, looped)
        if looped.tail_masked:
            valid = (f"{counter} * {chunk} + lax.broadcasted_iota(jnp.int32, {literal(chunk_shape)}, {axis}) "
                     f"< {looped.extent}")
            text = f"jnp.where({valid}, {text}, {_typed_fill(looped.fill, source.dtype)})"
        keepdim = node.kwargs.get("keepdim", False)
        if partials in _ARG:
            _emit_arg_partial(k, node, looped, text, counter, partial, indent + 1)
        else:
            if source.dtype != acc_dtype:
                text = f"({text}).astype({jnp_dtype(acc_dtype)})"
            reduced = f"{_PARTIAL[partials]}({text}, axis={axis}, keepdims={keepdim})"
            k.emit(f"return {_COMBINE[partials].format(a=partial, b=reduced)}", indent + 1)
    finally:
        for value_id, previous in saved.items():
            if previous is None:
                k.env.pop(value_id, None)
            else:
                k.env[value_id] = previous
        del k.reduction_chunks[node.id]
    init = f"jnp.full({literal(tuple(out.shape))}, {_typed_fill(looped.fill, acc_dtype)}, {jnp_dtype(acc_dtype)})"
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
    k.emit(f"{name} = {result}", indent)


def _emit_arg_partial(k, node: Node, looped: LoopedReduction, text: str, counter: str, partial: str,
                      indent: int) -> None:
    """argmax/argmin: the chunk's best value and its index (offset by the chunk's start)
    replace the carried pair where strictly better, so the first occurrence wins as in
    torch; NaN counts as the best, as torch's argmax/argmin do."""
    source = node.args[0]
    partials = OPS[node.op].reduction.partials
    best_of, arg_of, better = _ARG[partials]
    axis, keepdim = looped.axis, node.kwargs.get("keepdim", False)
    values = k.names.fresh("chunk_values")
    best, index = k.names.fresh("best"), k.names.fresh("best_index")
    k.emit(f"{best}, {index} = {partial}", indent)
    k.emit(f"{values} = {text}", indent)
    chunk_best, chunk_index, wins = k.names.fresh("chunk_best"), k.names.fresh("chunk_index"), k.names.fresh("wins")
    k.emit(f"{chunk_best} = {best_of}({values}, axis={axis}, keepdims={keepdim})", indent)
    if source.dtype.is_floating_point:  # Mosaic's argmax/argmin take float32 (widening is exact)
        wide = values if source.dtype == torch.float32 else f"{values}.astype(jnp.float32)"
        arg = f"{arg_of}({wide}, axis={axis}, keepdims={keepdim}).astype(jnp.int32)"
    else:  # Mosaic's argmax/argmin take float32 only
        arg = f"integer_arg_extreme({values}, {axis}, {keepdim}, largest={partials is Partials.ARGMAX})"
    k.emit(f"{chunk_index} = {counter} * {looped.chunk} + {arg}", indent)
    condition = f"{chunk_best} {better} {best}"
    if source.dtype.is_floating_point:
        condition = f"({condition}) | (jnp.isnan({chunk_best}) & ~jnp.isnan({best}))"
    k.emit(f"{wins} = {condition}", indent)
    k.emit(f"return jnp.where({wins}, {chunk_best}, {best}), jnp.where({wins}, {chunk_index}, {index})", indent)


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
