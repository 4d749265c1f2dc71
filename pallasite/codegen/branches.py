"""Emit a device `if` (`IfBlock`): `lax.cond` when the branches produce values the code
after the if reads, `pl.when` when they only store."""
from __future__ import annotations

from ..ir import IfBlock, RemoteBarrier, RemoteCopy, RemoteCopyStep, Store, walk_nodes

_EFFECTS = (Store, RemoteCopy, RemoteCopyStep, RemoteBarrier)  # what a branch without results may do


def emit_if(k, block: IfBlock) -> None:
    """`k` is the `KernelEmitter`. Each branch is a nested function: the names it binds
    are its own, so the emitter's environment is restored after each one."""
    k.comment_source(block)
    condition = k.render(block.condition)
    if block.outputs:
        then_name, else_name = k.names.fresh("if_true"), k.names.fresh("if_false")
        for name, body, results in ((then_name, block.then_body, [m.then_value for m in block.outputs]),
                                    (else_name, block.else_body, [m.else_value for m in block.outputs])):
            with k.block(f"def {name}():"):
                emit_branch(k, body, results)
        outs = [k.bind(item.out, item.name) for item in block.outputs]
        k.emit(f"{', '.join(outs)} = lax.cond({condition}, {then_name}, {else_name})")
        return
    branches = [(block.then_body, condition, "if_true"),
                (block.else_body, f"jnp.logical_not({condition})", "if_false")]
    for body, test, name in branches:
        if not any(isinstance(node, _EFFECTS) for node in walk_nodes(body)):
            continue  # a branch without stores, copies and results has no effect
        with k.block(f"@pl.when({test})\ndef {k.names.fresh(name)}():"):
            emit_branch(k, body, None)


def emit_branch(k, body: list, results: list | None) -> None:
    """One branch's body, then `return` its results (a `lax.cond` branch)."""
    saved_env, saved_checks = dict(k.env), set(k._checks_done)
    k._range_scopes.append({})
    k.branch_depth += 1
    try:
        k.emit_body(body)
        if results is not None:
            returned = [k.render(value) for value in results]
            k.emit(f"return {', '.join(returned)}" if len(returned) > 1 else f"return {returned[0]}")
    finally:
        k.branch_depth -= 1
        k._range_scopes.pop()
        k.env, k._checks_done = saved_env, saved_checks
