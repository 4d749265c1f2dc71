"""How generated statements read values: use counts (an unnamed single-use result is
written inline in the statement that reads it) and the text helpers that keep an
inlined expression unambiguous (`_atom`) or drop redundant parentheses (`_unwrap`)."""
from __future__ import annotations

import re

from ..ir import IfBlock, Load, Node, ScalarIndex, Store, TileLoop, Value, ops

def _value_uses(body: list) -> tuple[dict[int, int], set[int]]:
    """How often each Value is read, and the unnamed single-use op results that can be
    written inline in the one statement that reads them (readable, like hand-written code)."""
    uses: dict[int, int] = {}
    consumer: dict[int, Node] = {}

    def read(operand, node=None) -> None:
        if isinstance(operand, Value):
            uses[operand.id] = uses.get(operand.id, 0) + 1
            if node is not None:
                consumer[operand.id] = node
        elif isinstance(operand, (tuple, list)):
            for item in operand:
                read(item, node)

    def visit(items: list) -> None:
        for item in items:
            if isinstance(item, TileLoop):
                for dim in item.dims:
                    read((dim.begin, dim.end))
                for carried in item.carried:
                    read((carried.init, carried.result))
                visit(item.body)
                continue
            if isinstance(item, IfBlock):  # the if's reads count, but nothing is inlined into it
                read(item.condition)
                for merged in item.outputs:
                    read((merged.then_value, merged.else_value))
                for branch in item.bodies:
                    visit(branch)
                continue
            read(item.args, item)
            for index in getattr(item, "index", ()):
                if isinstance(index, ScalarIndex):
                    read(index.index)

    visit(body)
    inlined = set()

    def find(items: list) -> None:
        for item in items:
            if isinstance(item, TileLoop):
                find(item.body)
                continue
            if isinstance(item, IfBlock):
                for branch in item.bodies:
                    find(branch)
                continue
            if (isinstance(item, (Load, Store)) or ops.OPS[item.op].kind is ops.OpKind.STRUCTURAL
                    or len(item.outputs) != 1):
                continue
            value = item.output
            user = consumer.get(value.id)
            if (not value.name and uses.get(value.id) == 1 and user is not None and user in items
                    and not isinstance(user, Load) and item.location is not None and user.location is not None
                    and user.location.lineno == item.location.lineno):
                inlined.add(value.id)

    find(body)
    return uses, inlined


def _atom(text: str) -> str:
    """`text` safe to embed in a larger expression (parenthesized unless it is one term)."""
    if text.isidentifier() or re.fullmatch(r"[\w.]+", text):
        return text
    if text[0] in "([" and _closing(text, 0) == len(text) - 1:
        return text
    head = re.match(r"[\w.]+(?=[(\[])", text)
    if head:
        end = head.end()
        while end < len(text) and text[end] in "([":
            end = _closing(text, end) + 1
            while end < len(text) and text[end] == ".":
                more = re.match(r"\.[\w]+", text[end:])
                if not more:
                    break
                end += more.end()
        if end == len(text):
            return text
    return f"({text})"


def _unwrap(text: str) -> str:
    """An assignment's right-hand side without redundant parentheses: around the
    whole of it, or doubled around a call's single argument (`jnp.exp((a - b))`)."""
    while text.startswith("(") and _closing(text, 0) == len(text) - 1 and "," not in _top_level(text[1:-1]):
        text = text[1:-1]
    i = 0
    while i < len(text) - 1:
        if text[i] == "(" and text[i + 1] == "(":
            inner_end = _closing(text, i + 1)
            if inner_end + 1 == _closing(text, i) and "," not in _top_level(text[i + 2:inner_end]):
                text = text[:i + 1] + text[i + 2:inner_end] + text[inner_end + 1:]
                continue
        i += 1
    return text


def _top_level(text: str) -> str:
    """The characters of `text` outside any brackets."""
    depth, out = 0, []
    for char in text:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif depth == 0:
            out.append(char)
    return "".join(out)


def _closing(text: str, start: int) -> int:
    """The index of the bracket closing the one at `start` (quotes are not expected here)."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] in "([{":
            depth += 1
        elif text[i] in ")]}":
            depth -= 1
            if depth == 0:
                return i
    return len(text)
