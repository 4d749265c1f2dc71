"""The runner of reference mode: a kernel body executed eagerly, loops iterated.

The frontend's statement walker (`frontend/walker.py`) runs the statements, one at a
time in the kernel's scope; the runner is its `StatementSemantics`: a device loop's
iterations run one after the other and an inner loop keeps a carried value's lanes
between iterations. The runner is the `hl` active tracer while it runs: `hl.zeros`,
`hl.dot`, ... call its methods.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import contextlib
from typing import Any, Callable, Iterator

import torch

from .. import exc
from .. import language as hl
from ..frontend import source
from ..language.memory_ops import build_mask
from ..frontend.device_values import check_int64_fill
from ..frontend.walker import MISSING, StatementWalker, kernel_scope, loop_names
from . import int64, lanes, ops, prng, scans, tiles


class ReferenceRunner:
    """Runs one call of a kernel function on real tensors."""

    def __init__(self, fn: Callable, block_sizes: Callable[[], list[int]], loop_orders=(),
                 tunable_values: dict[str, Any] | None = None,
                 jagged_sites: Callable[[], dict] | None = None,
                 slots_per_site: Callable[[], list[int] | None] | None = None,
                 clamped_sizes: Callable[[], list[int] | None] | None = None):
        """`block_sizes()` gives the config's block sizes; it is called only if the kernel
        has a tunable block size. `loop_orders`: the config's dim order per multi-dim
        hl.tile loop, device and inner loops in order of appearance (the order programs
        and inner tiles run, which decides a scatter's last writer). `jagged_sites()`: the
        compiler's decisions for the accesses inside hl.jagged_tile loops
        (`KernelIR.jagged_sites`), asked for when the run meets such a loop. `slots_per_site()`:
        the compiler's per-slot block sizes for the config, asked for when a host loop reaches an
        hl.tile line again (the config may give one size per line, as Helion counts them).
        `clamped_sizes()`: the compiler's resolution of the config, asked for when a block size is
        larger than the static extent it tiles (the compiler clamps such a size to the dim, so
        `tile.block_size` must be the clamped one here too)."""
        self.fn = fn
        self.arguments: set[int] = set()  # the argument tensors, by id (set by run)
        self._jagged_sites_of_kernel = jagged_sites
        self._jagged_sites: dict | None = None
        self._jagged: list[tuple[Any, Any]] = []  # (tile, lengths) of each enclosing hl.jagged_tile loop
        self._jagged_site, self._jagged_ordinal, self._inside_jagged_access = (0, 0), 0, 0
        self._tunable_values = dict(tunable_values or {})  # the config's hl.register_tunable values
        self._loop_orders = iter(loop_orders)
        self._order_of_loop: dict[int, Any] = {}  # id of a multi-dim loop's `for` -> its entry
        self.fn_ast, self.filename = source.function_ast(fn)
        self._block_sizes_of_config = block_sizes
        self._block_sizes: list[int] | None = None
        self._slots: dict[tuple, int] = {}
        self._slots_per_site = slots_per_site
        self._clamped_sizes = clamped_sizes
        self._sites: set[tuple] = set()  # slot keys without the host loops' state
        self._calls_in_statement = 0
        self.walker = StatementWalker(self.filename, {}, "while pallasite ran {location} in reference mode")
        self.device_depth = 0
        self.frames: list[prng.Frame] = []  # the loop dims around the running statement
        self._random_seed: int | None = None  # torch.rand_like's seed, drawn once per run
        self._random_streams: dict[tuple, int] = {}  # rand_like call site -> its stream
        self.mode = ops.DeviceSemantics(self)

    # ------------------------------------------------------------- driver --

    def run(self, args: tuple, kwargs: dict) -> Any:
        try:
            bound = inspect.signature(self.fn).bind(*args, **kwargs)
        except TypeError as err:
            raise exc.KernelArgumentError(f"{self.fn.__name__}(): {err}") from None
        bound.apply_defaults()
        scope = kernel_scope(self.fn)
        for name, op in (("min", torch.minimum), ("max", torch.maximum)):  # as the tracer's builtins
            scope.setdefault(name, _device_fold(op, getattr(builtins, name)))
        self.walker.scope.update(scope)
        self.walker.scope.update(bound.arguments)
        self.arguments = {id(value) for value in bound.arguments.values() if isinstance(value, torch.Tensor)}
        previous = hl.set_active_tracer(self)
        try:
            with self.mode:
                result = self.walker.run_kernel(self.fn_ast.body, self)
        finally:
            hl.set_active_tracer(previous)
        if any(lanes.is_device(item) for item in lanes.leaves(result)):
            raise exc.DeviceValueInHostCode(
                "The kernel returns a value computed inside a device loop; store it into a "
                "tensor allocated in host code and return that tensor.")
        return result

    @property
    def block_slots_used(self) -> int:
        """How many tunable block sizes the run reached."""
        return len(self._slots)

    @property
    def block_sizes_given(self) -> list[int] | None:
        """The config's block sizes, if the run asked for them."""
        return self._block_sizes

    @property
    def in_device(self) -> bool:
        return self.device_depth > 0

    @property
    def scope(self) -> dict[str, Any]:
        return self.walker.scope

    @property
    def location(self) -> exc.SourceLocation | None:
        return self.walker.location

    @property
    def augmented(self) -> bool:
        """Whether the running statement is `x op= v` (which rebinds x in device code)."""
        return isinstance(self.walker.statement, ast.AugAssign)

    def own_view(self, tensor: torch.Tensor) -> bool:
        """Whether `tensor` is a view the kernel's host code took of part of another tensor (the
        compiled kernel writes only reshape/view results; a view the caller passed is its argument)."""
        base = tensor._base
        return base is not None and id(tensor) not in self.arguments and not (
            tensor.numel() == base.numel() and tensor.storage_offset() == 0 and tensor.is_contiguous())

    def name_of(self, tensor: torch.Tensor) -> str:
        """The user's name for a tensor, for error messages."""
        names = [name for name, value in self.scope.items() if value is tensor and not name.startswith("__")]
        return names[0] if names else "tensor"

    # ------------------------------------------- what the walker's statements mean --

    def enter_statement(self, stmt: ast.stmt, location: exc.SourceLocation) -> None:
        self._calls_in_statement = 0
        self._jagged_site, self._jagged_ordinal = (stmt.lineno, stmt.col_offset), 0

    def statement_executed(self, stmt: ast.stmt) -> None:
        pass

    def check_python_iterable(self, iterable: Any, location: exc.SourceLocation) -> None:
        pass  # torch iterates a tensor (the compiler rejects a traced one)

    def if_condition(self, stmt: ast.If) -> Any:
        return self.walker.evaluate(stmt.test, stmt)

    def is_device_condition(self, test: Any) -> bool:
        return False  # an if on a device value runs as plain Python: its value is known

    def is_device_value(self, value: Any) -> bool:
        return lanes.is_device(value) or isinstance(value, tiles.RefTile)

    def device_if(self, stmt: ast.If, test: Any) -> None:
        raise AssertionError("reference mode has no device ifs")

    def device_loop(self, stmt: ast.For, spec: hl.TileIterable, run_body: Callable[[Any], None]) -> None:
        """A top-level loop: each iteration is one program of the compiled grid."""
        iterations = self._iterations(stmt, spec, self._order(stmt, spec))
        self.device_depth += 1
        try:
            for item, frames in iterations:
                self.frames = frames
                run_body(item)
        finally:
            self.device_depth -= 1
            self.frames = []

    def inner_loop(self, stmt: ast.For, spec: hl.TileIterable, run_body: Callable[[Any], None],
                   assigned: list[str]) -> dict[str, Any]:
        """A loop inside device code. A device value assigned in it that existed before it is
        carried: after each iteration it keeps its previous lanes past a shorter extent
        (`keep_lanes`)."""
        iterations = self._iterations(stmt, spec, self._order(stmt, spec))
        location = self.location
        carried = [name for name in assigned if lanes.is_device(self.scope.get(name, MISSING))]
        outer = self.frames
        for item, frames in iterations:
            previous = {name: self.scope[name] for name in carried}
            self.frames = outer + frames
            if spec.jagged is not None:
                self._jagged.append((item, spec.jagged))
            try:
                run_body(item)
            finally:
                if spec.jagged is not None:
                    self._jagged.pop()
            self.frames = outer
            with self.mode.paused():
                for name in carried:
                    self.scope[name] = keep_lanes(name, previous[name], self.scope.get(name, MISSING), location)
        return {name: self.scope[name] for name in carried}

    # ------------------------------------------------------ hl.jagged_tile --

    @property
    def jagged_active(self) -> bool:
        """Whether an access now is inside hl.jagged_tile loops (and not the subscript an
        hl.load/hl.store applying their mask makes)."""
        return bool(self._jagged) and not self._inside_jagged_access

    def jagged_mask(self, tensor: Any, key: tuple) -> Any:
        """The implicit mask of the hl.jagged_tile loops around `tensor[key]`: the compiler's
        decision for this access (by its statement and order in it), built on this run's
        tiles and lengths (frontend/jagged.py)."""
        if not self.jagged_active:
            return None
        site = (*self._jagged_site, self._jagged_ordinal)
        self._jagged_ordinal += 1
        if self._jagged_sites is None:
            if self._jagged_sites_of_kernel is None:
                raise exc.UnsupportedOperation(
                    "Reference mode runs hl.jagged_tile with the compiler's decisions of which axes each access "
                    "is masked along; run a pallasite.kernel (not a plain function) in reference mode.")
            with self.mode.paused():  # the compiler's own trace (it reads .item()'d elements): plain torch
                self._jagged_sites = self._jagged_sites_of_kernel()
        decision = self._jagged_sites.get(site)
        return None if decision is None else build_mask(decision, self._jagged)

    @contextlib.contextmanager
    def jagged_access(self) -> Iterator[None]:
        self._inside_jagged_access += 1
        try:
            yield
        finally:
            self._inside_jagged_access -= 1

    # --------------------------------------------------------- tile loops --

    def _iterations(self, stmt: ast.For, spec: hl.TileIterable, order=None):
        """Each iteration of an `hl.tile`/`hl.grid` loop: its loop variable and its frames
        (each dim's tile or index, with the loop's end)."""
        with self.walker.user_code(), self.mode.paused():
            static = [not isinstance(b, torch.Tensor) and not isinstance(e, torch.Tensor)
                      for b, e in zip(spec.begins, spec.ends)]
            for bound in (*spec.begins, *spec.ends):  # a bound torch holds in int64 needs its number
                int64.check_bound(bound, self.location)
            begins = [tiles.as_bound(b, "begin") for b in spec.begins]
            ends = [tiles.as_bound(e, "end") for e in spec.ends]
            extents = [e - b if fixed else None for b, e, fixed in zip(begins, ends, static)]
            blocks = [block if spec.kind == "grid"  # a grid's: its step
                      else self._block_size(stmt, i, block, extents[i])
                      for i, block in enumerate(spec.block_sizes)]
        names = loop_names(stmt.target, len(ends), spec.kind)
        items = tiles.iterate(spec.kind, names, begins, ends, blocks, spec.multi, order, lambda: self.in_device,
                              static)
        return ((item, list(zip(item if spec.multi else (item,), ends))) for item in items)

    def loop_orders_left(self) -> int:
        """How many `loop_orders` entries no multi-dim loop the run reached took."""
        return sum(1 for _ in self._loop_orders)

    def _order(self, stmt: ast.For, spec: hl.TileIterable):
        """The `loop_orders` entry of a multi-dim loop: entries go to the loops in the order
        they are first reached (each device loop, then its inner loops, as the compiler
        counts them); None walks the dims as written."""
        if len(spec.ends) <= 1:
            return None
        if id(stmt) not in self._order_of_loop:
            order = next(self._loop_orders, None)
            if order is not None and sorted(order) != list(range(len(spec.ends))):
                raise exc.InvalidConfig(
                    f"loop_orders entry {list(order)} is not a permutation of this loop's {len(spec.ends)} dims "
                    "(one entry per multi-dim hl.tile loop, device and inner loops, in order of appearance).")
            self._order_of_loop[id(stmt)] = order
        return self._order_of_loop[id(stmt)]

    def _block_size(self, stmt: ast.For, dim: int, block: Any, extent: int | None) -> int:
        if block is None:
            return self._slot(("tile", id(stmt), dim, self.walker.python_loops), extent)
        return tiles.check_block_size(block)

    def _slot(self, key: tuple, extent: int | None = None) -> int:
        """The config's block size for one tunable dimension.

        Slots are numbered in the order the kernel first reaches each
        `hl.tile(..., block_size=None)` dim and `hl.register_block_size` call,
        which is the order the compiler's trace numbers them in.
        """
        new_slot = key not in self._slots
        index = self._slots.setdefault(key, len(self._slots))
        if self._block_sizes is None:
            with self.mode.paused():
                self._block_sizes = list(self._block_sizes_of_config())
        if new_slot and key[:-1] in self._sites and self._slots_per_site is not None:  # a site again: ask once
            with self.mode.paused():
                per_slot = self._slots_per_site()
            self._slots_per_site = None
            if per_slot is not None:  # earlier slots are the same either way: sites appear in order
                self._block_sizes = list(per_slot)
        self._sites.add(key[:-1])
        if index >= len(self._block_sizes):
            raise exc.InvalidConfig(
                f"The config has {len(self._block_sizes)} block sizes, but the kernel has more "
                "tunable block sizes.")
        if new_slot and extent is not None and self._block_sizes[index] > extent and self._clamped_sizes:
            with self.mode.paused():  # the compiler may clamp it to the dim: its sizes, per slot
                clamped = self._clamped_sizes()
            self._clamped_sizes = self._slots_per_site = None
            if clamped is not None:
                self._block_sizes = list(clamped)
        return self._block_sizes[index]

    # ------------------------------------------------------- hl functions --

    def specialize(self, value: Any) -> Any:
        return value

    def static_int(self, value: Any) -> Any:
        """An hl.static_range bound: reference mode's int arguments are their ints already (a
        value read from a tensor stays a tensor, refused as the compiler refuses it)."""
        return value

    def register_block_size(self, args: tuple) -> int:
        if not args or len(args) > 2:
            raise exc.UnsupportedSyntax("hl.register_block_size(max) or (min, max).")
        self._calls_in_statement += 1
        statement = id(self.walker.statement)
        return self._slot(("register_block_size", statement, self._calls_in_statement, self.walker.python_loops),
                          int(args[-1]))

    def register_tunable(self, name: Any, fragment: Any) -> Any:
        from ..language.tunables import tunable_value

        return tunable_value(name, fragment, self._tunable_values)

    def barrier(self) -> None:
        """`hl.barrier()`: the loops already run one after another; refused inside one."""
        if self.in_device:
            raise exc.UnsupportedOperation(hl.BARRIER_IN_DEVICE_CODE, forms_anchor=hl.REFUSED_ANCHOR)

    def full(self, shape: Any, value: Any, dtype: torch.dtype) -> torch.Tensor:
        if not self.in_device:
            raise exc.UnsupportedSyntax("hl.zeros/hl.full create device values; use torch.zeros in host code.")
        entries = shape if isinstance(shape, (list, tuple, torch.Size)) else [shape]
        dims, axes = [], set()
        for axis, entry in enumerate(entries):
            if isinstance(entry, tiles.RefTile):
                dims.append(entry.extent)
                if entry.single_lane:
                    axes.add(axis)
            elif isinstance(entry, int) and not isinstance(entry, bool):
                dims.append(entry)
            else:
                raise exc.UnsupportedOperation(f"Shapes of device values are tiles and ints, got {entry!r}.")
        with self.mode.paused():
            if isinstance(value, torch.Tensor):
                value = value.item()
            if dtype == torch.int64:  # torch's int64 numbers, held in int32 as the compiled kernel holds them
                check_int64_fill(value)
                return int64.marked(lanes.finish(torch.full(dims, value, dtype=dtype), axes))
            return lanes.finish(torch.full(dims, value, dtype=dtype), axes)

    def arange(self, args: tuple, dtype: torch.dtype) -> torch.Tensor:
        if not self.in_device:
            raise exc.UnsupportedSyntax("hl.arange creates device values; use torch.arange in host code.")
        if not all(isinstance(a, int) and not isinstance(a, bool) for a in args):
            raise exc.UnsupportedOperation("hl.arange bounds must be compile-time ints.")
        with self.mode.paused():
            return lanes.mark(torch.arange(*args, dtype=dtype))

    def rand(self, shape: Any, seed: Any) -> torch.Tensor:
        if not self.in_device:
            raise exc.UnsupportedSyntax("hl.rand creates device values; call it inside a device loop.")
        entries = list(shape) if isinstance(shape, (list, tuple, torch.Size)) else [shape]
        with self.mode.paused():
            return prng.draw(self.frames, entries, prng.seed_of(seed), 0, torch.float32)

    def device_print(self, prefix: str, values: tuple) -> None:
        """`hl.device_print`: the values as they are, after the prefix (a tile's padded lanes
        are not the kernel's, so its printed tile may hold fewer rows than the compiled one)."""
        if not self.in_device:
            raise exc.UnsupportedSyntax("hl.device_print prints device values; call it inside a device loop "
                                        "(host code may print with print()).")
        with self.mode.paused():
            print(prefix, *values)

    def rand_like(self, like: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
        """`torch.rand_like(v)`: each call site its own stream, the run's seed from torch's
        default generator (as the compiled kernel's caller draws it)."""
        self._calls_in_statement += 1
        site = (id(self.walker.statement), self._calls_in_statement, self.walker.python_loops)
        stream = self._random_streams.setdefault(site, len(self._random_streams) + 1)
        with self.mode.paused():
            if self._random_seed is None:
                self._random_seed = int(torch.randint(0, 2**31 - 1, ()).item())
            return prng.draw(self.frames, list(like.shape), self._random_seed, stream, dtype or like.dtype,
                             sized_by_tiles=False, lane_axes=set(lanes.of(like)))

    @contextlib.contextmanager
    def exact_products(self) -> Iterator[None]:
        """`Tracer.exact_products`: torch's float32 products on the CPU are exact already."""
        yield

    def distinct_positions(self, index: Any) -> bool:
        """`Tracer.distinct_positions`: reference mode combines every index's lanes (the general
        path gives distinct lanes their own values)."""
        return False

    def atomic_update(self, name: str, tensor: Any, key: tuple, combine: Any) -> torch.Tensor:
        """An `hl.atomic_*` with tile/scalar indices: `tensor[key] = combine(old)`, the old
        values returned."""
        if not self.in_device or lanes.is_device(tensor) or not isinstance(tensor, torch.Tensor):
            raise exc.UnsupportedSyntax(f"hl.{name}(tensor, [index...], value) updates a kernel "
                                        "tensor inside a device loop.")
        if any(isinstance(item, torch.Tensor) and item.ndim > 0 for item in key):
            raise hl.atomic_index_tensor_error(name, self.name_of(tensor))
        old = tensor[key]
        tensor[key] = combine(old)
        return old

    def masked_read(self, tensor: Any, key: tuple, masked: tuple = ()) -> torch.Tensor:
        """`tensor[key]` of `hl.load(..., extra_mask=...)`: a tile past the tensor's end reads 0
        there, as the compiled kernel's shifted tile does (the tensor zero-extended to the tile's end).
        (`masked`: the index items the mask zeroes where it is off; the compiler's concern only.)"""
        if not isinstance(tensor, torch.Tensor) or lanes.is_device(tensor) or Ellipsis in key:
            return tensor[key]
        axis = 0
        for item in key:
            if item is None:
                continue
            size = tensor.shape[axis]
            if isinstance(item, tiles.RefTile) and size > 1 and 0 <= item.begin < item.end and item.end > size:
                shape = list(tensor.shape)
                shape[axis] = item.end - size
                with self.mode.paused():
                    tensor = torch.cat([tensor, tensor.new_zeros(shape)], axis)
            axis += 1
        return tensor[key]

    def masked_scatter(self, tensor: Any, key: tuple, value: Any, lane_mask: Any) -> None:
        """A scatter of only the lanes where `lane_mask` holds: the others are dropped from the
        index and the value, and the rest is an ordinary scatter (the last lane wins)."""
        (position,) = [p for p, item in enumerate(key) if isinstance(item, torch.Tensor) and item.ndim > 0]
        keep = lane_mask.nonzero().reshape(-1)
        kept = key[:position] + (key[position][keep],) + key[position + 1:]
        axis = sum(0 if isinstance(item, (bool, int)) or (isinstance(item, torch.Tensor) and item.ndim == 0)
                   else item.ndim if isinstance(item, torch.Tensor) else 1 for item in key[:position])
        if isinstance(value, torch.Tensor):
            window = list(tensor[kept].shape)  # the kept lanes' window: masked-off indices are never read
            window[axis] = key[position].shape[0]
            value = torch.broadcast_to(value, window).index_select(axis, keep)
        tensor[kept] = value

    def remote_copy(self, *args: Any) -> Any:
        raise _single_device("hl.make_async_remote_copy")

    def remote_barrier(self, device_ids: Any, rank: Any = None) -> None:
        raise _single_device("hl.remote_barrier")

    def all_reduce(self, *args: Any) -> None:
        raise _single_device("hl.all_reduce")

    def associative_scan(self, combine_fn: Callable, values: Any, dim: int, reverse: bool) -> Any:
        with self.mode.paused():
            return int64.whole("associative_scan", values,
                               lambda v: scans.associative_scan(combine_fn, v, dim, reverse), self.location)

    def cumulative(self, spelling: str, value: Any, dim: int, reverse: bool) -> Any:
        with self.mode.paused():
            if isinstance(value, torch.Tensor) and not value.dtype.is_floating_point:  # torch's int64, checked
                return int64.follow(getattr(torch, spelling), spelling, (value, dim), {"reverse": reverse},
                                    lambda f, a, k: scans.cumulative(spelling, a[0], a[1], k["reverse"], k["dtype"]),
                                    self.location)
            return scans.cumulative(spelling, value, dim, reverse)

    def split(self, value: Any) -> Any:
        """hl.split: the two halves of a last dim of size 2 (the compiled kernel's meaning,
        without its lane-gather form)."""
        if not self.in_device or not lanes.is_device(value):
            raise exc.UnsupportedSyntax("hl.split is for device values; use x.unbind(-1) in host code.")
        if value.ndim == 0 or value.shape[-1] != 2:
            raise exc.ShapeMismatch(
                f"hl.split splits a last dim of size 2, but the value has shape {list(value.shape)}; reshape it "
                "to (..., n // 2, 2) first, e.g. x.reshape(m, d // 2, 2).")
        return value[..., 0], value[..., 1]

    def join(self, a: Any, b: Any) -> Any:
        if not self.in_device:
            raise exc.UnsupportedSyntax("hl.join is for device values; use torch.stack([a, b], -1) in host code.")
        return torch.stack(torch.broadcast_tensors(a, b), -1)

    def reduce(self, combine_fn: Callable, values: Any, dim: Any, other: Any, keep_dims: bool) -> Any:
        with self.mode.paused():
            return int64.whole("reduce", values, lambda v: scans.reduce(combine_fn, v, dim, keep_dims), self.location)

    def dot(self, a: Any, b: Any, acc: Any, out_dtype: torch.dtype | None) -> torch.Tensor:
        if not self.in_device:
            raise exc.UnsupportedSyntax("hl.dot is for device code; use torch.matmul in host code.")
        with self.mode.paused():
            return ops.dot(a, b, acc, out_dtype)


def keep_lanes(name: str, old: torch.Tensor, new: Any, location: exc.SourceLocation | None) -> torch.Tensor:
    """A carried value after one iteration: `new` in its lanes, `old` in the lanes past them."""
    if not lanes.is_device(new):
        raise exc.UnsupportedSyntax(f"Loop-carried variable '{name}' must stay a device tensor in the loop.",
                                    location)
    if new.dtype != old.dtype or new.ndim != old.ndim:
        raise exc.ShapeMismatch(
            f"Loop-carried variable '{name}' is {list(old.shape)} {old.dtype} before the loop but "
            f"{list(new.shape)} {new.dtype} after an iteration; initialize it with the shape and "
            "dtype the loop produces.", location)
    if all(n >= o for n, o in zip(new.shape, old.shape)):
        return new
    if not all(n <= o for n, o in zip(new.shape, old.shape)):
        raise exc.ShapeMismatch(
            f"Loop-carried variable '{name}' changes shape from {list(old.shape)} to "
            f"{list(new.shape)} in an iteration.", location)
    merged = old.clone()
    merged[tuple(slice(0, n) for n in new.shape)] = new
    return lanes.mark(merged, lanes.of(old))


def _single_device(what: str) -> exc.UnsupportedOperation:
    """Reference mode runs one device's program eagerly; a remote copy needs every device of
    the mesh at once, which only the compiled kernel under jax.shard_map simulates."""
    return exc.UnsupportedOperation(
        f"{what}: reference mode runs the kernel on one device, and a remote copy needs every "
        "device of the mesh running at once. Check such a kernel by running kernel.jax_fn under "
        "jax.shard_map on a CPU mesh (TPU interpret mode simulates the devices, DMAs and semaphores).")


def _device_fold(op: Callable, python_fn: Callable) -> Callable:
    """Builtin `min`/`max` in the kernel: of device values, torch.minimum/maximum pairwise (NaN
    propagates), as the compiled kernel's; of anything else, Python's own."""
    def fold(*args: Any, **kwargs: Any) -> Any:
        items = list(args[0]) if len(args) == 1 and not isinstance(args[0], torch.Tensor) else list(args)
        if kwargs or not any(lanes.is_device(item) for item in items):
            return python_fn(*args, **kwargs)
        result = items[0]
        for item in items[1:]:
            result = op(result if isinstance(result, torch.Tensor) else torch.tensor(result),
                        item if isinstance(item, torch.Tensor) else torch.tensor(item))
        return result
    return fold
