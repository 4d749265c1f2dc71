"""Which values a generated statement reads inline: use counts, and the unnamed single-use
results written inline in the one statement that reads them (as nodes: `tree.py`)."""
from __future__ import annotations

from ..ir import IfBlock, Load, Node, ScalarIndex, Store, TileLoop, Value, ops


def value_uses(body: list) -> tuple[dict[int, int], set[int]]:
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
    return uses, _inlined(body, uses, consumer)


def _inlined(body: list, uses: dict[int, int], consumer: dict[int, Node]) -> set[int]:
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
    return inlined
