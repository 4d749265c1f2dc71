"""The config space of one bound kernel: its tunable block sizes and their rules."""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from .. import exc
from ..config import FOLDED_LOOP_TYPE, INDIRECT_ACCESS_MODES, KNOB_DEFAULTS, WORKLIST_GROUPINGS, Config, kernel_keys_error
from ..ir.sizes import SymbolicSize
from ..ir import GatherIndex, KernelIR, Load, NewAxis, ShiftedTile, Store, TileLoop, TileSlice, Value, cdiv, walk_nodes
from ..plan.loops import STRATEGIES, all_inner_loops, default_strategies, multi_dim_loops
from ..plan.reduction_loops import ReductionDim, reduction_dims
from ..plan.tpu_tiling import AxisRule
from ..runtime.chips import default_chip
from ..language.tunables import Fragment
from . import growth

# Preferred block size by the strongest rule on a dim: big lane blocks keep the
# grid short; sublane blocks stay moderate so 2-D blocks fit VMEM comfortably.
_TARGET = {"lane": 1024, "lane_1d": 4096, "sublane": 256, "free": 8, None: 128}
_STRENGTH = {"lane_1d": 4, "lane": 3, "sublane": 2, "free": 1}


@dataclass(frozen=True)
class BlockSizeSpec:
    """One tunable block size: the dim it tiles and every tiling rule it must meet."""

    block_id: int
    name: str
    extent: int
    rules: tuple[AxisRule, ...]
    # static_shapes=False: the extent is one size of a bucket, so no candidate is "the whole
    # dim" (a block equal to one size only), and the default covers the extent with aligned blocks
    dynamic: bool = False
    exact: bool = False  # `extent` is the dim's static extent (not a stand-in for a range only data knows)

    def allows(self, size: int) -> bool:
        return all(rule.allows(size) for rule in self.rules)

    def candidates(self) -> list[int]:
        """Legal sizes worth trying, ascending."""
        extent = max(self.extent, 1)
        sizes = set() if self.dynamic else {extent}
        power = 1
        while power < 2 * extent:
            sizes.add(power)
            power *= 2
        for quantum in (8, 128, 1024):
            sizes.add(cdiv(extent, quantum) * quantum)
        legal = sorted(s for s in sizes if self.allows(s))
        # past the extent only the smallest legal block that covers it (larger ones tile the
        # same one block with more padding: more VMEM, the same work)
        covering = [s for s in legal if s >= extent]
        return [s for s in legal if s < extent] + covering[:1]

    def clamped(self, size: Any) -> Any:
        """`size`, or the smallest legal block covering a static dim when `size` is larger: a
        larger block tiles the same one tile with more padding (a 4096 block over a dim of 5
        would plan 4096 padded rows of VMEM); Helion clamps such blocks too."""
        if not self.exact or self.dynamic or type(size) is not int:
            return size
        covering = [s for s in self.candidates() if s >= self.extent]
        return covering[0] if covering and size > covering[0] else size

    def smaller(self, size: int) -> int:
        """The next legal size below `size` (itself if there is none)."""
        below = [s for s in self.candidates() if s < size]
        return below[-1] if below else size

    def unaligned_smaller(self, size: int) -> int:
        """Half of `size` (down to 1), legal or not: the planner keeps a tensor whose block a
        rule refuses resident (one block across the axis), so a size below every aligned one
        may still plan where the aligned ones overflow VMEM (a top-k's n x n compare per row)."""
        return max(size // 2, 1)

    def default(self) -> int:
        kinds = [r.kind for r in self.rules]
        strongest = max(kinds, key=_STRENGTH.get) if kinds else None
        target = _TARGET[strongest]
        legal = self.candidates()
        if not legal:
            raise exc.IllegalBlockSize(
                f"No block size for '{self.name}' meets every rule: "
                + "; ".join(r.describe() for r in self.rules)
            )
        fitting = [s for s in legal if s <= max(target, 1)]
        covering = [s for s in fitting if s >= self.extent]
        if self.dynamic and covering:
            return covering[0]
        if self.extent <= target and self.extent in legal:
            return self.extent
        return fitting[-1] if fitting else legal[0]


_NO_DEFAULT = object()


@dataclass(frozen=True)
class Gene:
    """One knob of the space: a config path (`("block_sizes", 0)`, `("pallas_loop_type", 0)`,
    a user tunable's name) and its legal values; `implicit`: the value a config without
    the key means (omitted from configs the search builds)."""

    path: tuple
    choices: tuple
    ordered: bool = False
    implicit: Any = _NO_DEFAULT

    def adjacent(self, value: Any) -> list[Any]:
        if value not in self.choices:
            return [self.choices[0]] if self.choices else []
        i = self.choices.index(value)
        if self.ordered:
            return [self.choices[j] for j in (i - 1, i + 1) if 0 <= j < len(self.choices)]
        return [c for c in self.choices if c != value]

    def step(self, value: Any, rng: random.Random) -> Any:
        near = self.adjacent(value)
        if self.ordered and near and rng.random() < 0.7:
            return rng.choice(near)
        others = [c for c in self.choices if c != value]
        return rng.choice(others) if others else value


class ConfigSpec:
    """What a config of this kernel may contain, and its default."""

    def __init__(self, ir: KernelIR, validate: Callable[[Config], object] | None = None,
                 tunables: dict[str, Fragment] | None = None):
        """`validate(config)` plans a config and raises if it cannot run (e.g. VMEM overflow);
        `tunables`: the kernel's `hl.register_tunable` fragments by name."""
        self._validate = validate
        self._last_plan: tuple | None = None  # (canonical config key, plan): `planned`
        self._grown: dict[str, Config] = {}  # the grown default per chip (it counts every move)
        self.tunables: dict[str, Fragment] = dict(tunables or {})
        # Host code may skip every device loop for some arguments (`if m == 0: return ...`):
        # then nothing is tiled and a config's block sizes, written for the others, do not apply.
        self.has_device_loops = bool(ir.device_loops)
        # `pallas_loop_type` has one entry per inner loop (source order, nested after outer)
        self.inner_loop_count = len(all_inner_loops(ir))
        self.has_inner_loops = self.inner_loop_count > 0
        # which of them may fold into their call's grid (`outer_pipeline`): those directly in
        # a device loop's body (plan/folded_loops.py refuses the rest, and a fold it cannot do)
        top_level = {id(item): call.index for call in ir.device_loops for item in call.loop.body}
        self.foldable = tuple(id(loop) in top_level for loop in all_inner_loops(ir))
        # the foldable loops of each device loop, of which a config folds at most one
        self._fold_groups = [[i for i, loop in enumerate(all_inner_loops(ir)) if top_level.get(id(loop)) == call.index]
                             for call in ir.device_loops]
        # `loop_orders` has one permutation per hl.tile loop tiling several dims, device
        # loops and inner loops alike, in the order they appear (as Helion counts them).
        self.multi_dim_loops = [len(loop.dims) for loop in multi_dim_loops(ir)]
        # `pallas_indirect_access_mode` chooses how gathers (`table[idx, :]`) read their table.
        # Per-row DMA copies a table only the kernel reads: 'dma' is offered unless a gathered
        # table is also written (an atomic histogram, a scatter into it), which stays in VMEM.
        nodes = [node for call in ir.device_loops for node in walk_nodes(call.loop.body)]
        gathered = {node.tensor.name for node in nodes
                    if isinstance(node, Load) and any(isinstance(item, GatherIndex) for item in node.index)}
        self.has_gathers = bool(gathered)
        self._dma_gathers = not gathered & {node.tensor.name for node in nodes if isinstance(node, Store)}
        # `reduction_loops` has one entry per reduction dim (a whole-dim extent reduced),
        # each None or a chunk size its tensors' tiling rules allow (`ReductionDim.candidates`).
        self.reduction_dims: list[ReductionDim] = reduction_dims(ir)
        # `pallas_worklist_grouping` (q tiles per work item) matters where a grid over segments
        # has a data-dependent tile loop inside (plan/worklists.py flattens it).
        self.has_jagged_grid = any(
            len(call.loop.dims) == 1 and call.loop.dims[0].is_grid and any(
                isinstance(item, TileLoop) and any(isinstance(b, Value) for d in item.dims for b in (d.begin, d.end))
                for item in call.loop.body)
            for call in ir.device_loops)
        rules: dict[int, list[AxisRule]] = {i: [] for i in range(len(ir.block_dims))}
        for call in ir.device_loops:
            for node in walk_nodes(call.loop.body):
                if not isinstance(node, (Load, Store)):
                    continue
                items = [i for i in node.index if not isinstance(i, NewAxis)]
                tensor = node.tensor
                for axis, item in enumerate(items):
                    if isinstance(item, (TileSlice, ShiftedTile)) and item.dim.block_id is not None:
                        rules[item.dim.block_id].append(
                            AxisRule(tensor.name, axis, len(tensor.shape), tensor.shape[axis], tensor.dtype)
                        )
        extents = [dim.static_extent if dim is not None and dim.static_extent is not None else 128
                   for dim in ir.block_dims]
        self.block_sizes = [
            BlockSizeSpec(i, dim.name if dim is not None else f"block_{i}", int(extent), tuple(rules[i]),
                          dynamic=isinstance(extent, SymbolicSize),
                          exact=dim is not None and dim.static_extent is not None)
            for i, (dim, extent) in enumerate(zip(ir.block_dims, extents))
        ]
        # each slot's position among the distinct source sites (first appearance order)
        sites = list(dict.fromkeys(ir.block_sites))
        self.site_of = [sites.index(site) for site in ir.block_sites] if ir.block_sites else []

    @property
    def loop_types(self) -> tuple[str, ...]:
        """The inner-loop strategies this kernel can choose between (none without inner loops)."""
        return tuple(STRATEGIES) if self.has_inner_loops else ()

    @property
    def indirect_access_modes(self) -> tuple[str, ...]:
        """The gather lowerings this kernel can choose between (none without gathers);
        "auto" (the plan decides by the table's size) is the default."""
        if not self.has_gathers:
            return ()
        return INDIRECT_ACCESS_MODES if self._dma_gathers else tuple(m for m in INDIRECT_ACCESS_MODES if m != "dma")

    @property
    def worklist_groupings(self) -> tuple[int, ...]:
        """The q tiles per work item a flattened worklist may take (none without one)."""
        return WORKLIST_GROUPINGS if self.has_jagged_grid else ()

    def default_config(self) -> Config:
        """The heuristic default (`heuristic_default`), then, for a kernel the cost model
        can count from its shapes alone, grown to larger blocks while the model says they
        pay (`autotune/growth.py`)."""
        start = self.heuristic_default()
        if self._validate is None or not self.has_device_loops or any(s.dynamic for s in self.block_sizes):
            return start
        chip = default_chip()  # what the plans (and so the growth) are for
        if chip not in self._grown:
            strategies = [s.name for s in default_strategies()] if self.has_inner_loops else []
            self._grown[chip] = growth.grow(start, self.block_sizes, strategies, self._validate)
        return self._grown[chip]

    def heuristic_default(self) -> Config:
        """A config that plans: preferred block sizes, resident (unroll) inner loops if they
        fit VMEM, else streamed ones (fori_loop), else smaller blocks (below the aligned sizes
        too, halving, once no aligned one is left: `unaligned_smaller`). Any config-dependent
        rejection (`InvalidConfig`: VMEM, a narrowing read past a block, ...) moves on to the
        next candidate; when none plans, the first candidate's reason is raised (a VMEM
        overflow only if every candidate overflowed: then the smallest one's numbers)."""
        first: exc.PallasiteError | None = None
        overflow: exc.PallasiteError | None = None
        for candidate in self._default_candidates():
            if self._validate is None:
                return candidate
            try:
                self._validate(candidate)
                return candidate
            except exc.VmemOverflow as err:
                overflow = err
            except exc.InvalidConfig as err:
                first = first or err
        raise first or overflow

    def _default_candidates(self):
        sizes = [spec.default() for spec in self.block_sizes]
        strategies = [s.name for s in default_strategies()] if self.has_inner_loops else [None]
        for _ in range(16):
            for strategy in strategies:
                extra = {"pallas_loop_type": strategy} if strategy else {}
                yield Config(block_sizes=sizes, **extra)
            smaller = [spec.smaller(size) for spec, size in zip(self.block_sizes, sizes)]
            if smaller == sizes:  # no aligned size is left: the planner decides what it can keep resident
                smaller = [spec.unaligned_smaller(size) for spec, size in zip(self.block_sizes, sizes)]
            if smaller == sizes:
                return
            sizes = smaller

    def _per_site(self, sizes: list[int]) -> list[int] | None:
        """Helion's block_sizes, one per source site: a host loop that traces one hl.tile line
        again (`for layer in range(n): for tm in hl.tile(m)`) gives that line's slots one
        size. The per-slot list, or None where `sizes` does not count the sites."""
        if not self.site_of or len(sizes) != max(self.site_of) + 1:
            return None
        return [sizes[site] for site in self.site_of]

    def normalize(self, config: Config) -> Config:
        """`config` completed with defaults (block sizes, the resident loop strategy)
        and checked against this kernel."""
        values = dict(config)
        sizes = values.get("block_sizes")
        if self.has_inner_loops:
            values.setdefault("pallas_loop_type", KNOB_DEFAULTS["pallas_loop_type"])
        if sizes is None:
            values["block_sizes"] = [spec.default() for spec in self.block_sizes]
        elif not self.has_device_loops:
            values["block_sizes"] = []
        elif len(sizes) != len(self.block_sizes) and self._per_site(sizes) is not None:
            values["block_sizes"] = self._per_site(sizes)
        elif len(sizes) != len(self.block_sizes):
            names = ", ".join(spec.name for spec in self.block_sizes) or "none"
            raise exc.InvalidConfig(
                f"block_sizes has {len(sizes)} entries but the kernel has "
                f"{len(self.block_sizes)} tunable block sizes ({names})"
                + (f", from {max(self.site_of) + 1} hl.tile sites (a list of one size per site, Helion's "
                   "count, is taken too)." if self.site_of and max(self.site_of) + 1 < len(self.block_sizes)
                   else ".")
            )
        if self.has_device_loops and len(values["block_sizes"]) == len(self.block_sizes):
            values["block_sizes"] = [spec.clamped(size) for spec, size in zip(self.block_sizes, values["block_sizes"])]
        problem = kernel_keys_error(values, tuple(self.tunables))
        if problem:
            raise exc.InvalidConfig(problem)
        for key, value in values.items():
            if key in Config.KNOWN_KEYS:
                continue
            if not self.tunables[key].allows(value):
                raise exc.InvalidConfig(f"Config value {key}={value!r} is not legal: expected "
                                        f"{self.tunables[key].describe()}.")
        if "loop_orders" in values:
            self._check_loop_orders(values["loop_orders"])
        if "reduction_loops" in values:
            self._check_reduction_loops(values["reduction_loops"])
        return Config(values)

    # ------------------------------------------------------- the search space --

    def genes(self) -> list[Gene]:
        """Every tunable knob with its legal values (TPU tiling rules already applied;
        VMEM and the other planning checks are applied per config by `check`)."""
        out = [Gene(("block_sizes", spec.block_id), tuple(spec.candidates()), ordered=True)
               for spec in self.block_sizes] if self.has_device_loops else []
        implicit = KNOB_DEFAULTS  # what a config without the key means
        for i in range(self.inner_loop_count):  # one loop type per inner loop
            folds = (FOLDED_LOOP_TYPE,) if self.foldable[i] else ()
            out.append(Gene(("pallas_loop_type", i), (*STRATEGIES, *folds)))
        if self.has_inner_loops:
            out.append(Gene(("pallas_load_buffer_count",), (2, 3), ordered=True,
                            implicit=implicit["pallas_load_buffer_count"]))
            out.append(Gene(("pallas_pre_broadcast",), (False, True),
                            implicit=implicit["pallas_pre_broadcast"]))
        if self.has_gathers:
            out.append(Gene(("pallas_indirect_access_mode",), self.indirect_access_modes,
                            implicit=implicit["pallas_indirect_access_mode"]))
        if self.has_jagged_grid:  # a grid over segments: flatten it into work items, q tiles per item
            out.append(Gene(("pallas_flatten_worklist",), (True, False),
                            implicit=implicit["pallas_flatten_worklist"]))
            out.append(Gene(("pallas_worklist_grouping",), WORKLIST_GROUPINGS, ordered=True,
                            implicit=implicit["pallas_worklist_grouping"]))
        for i, rank in enumerate(self.multi_dim_loops):
            perms = tuple(tuple(p) for p in itertools.permutations(range(rank)))
            out.append(Gene(("loop_orders", i), perms, implicit=perms[0]))
        if any(c < dim.extent for dim in self.reduction_dims for c in dim.candidates()):
            for i, dim in enumerate(self.reduction_dims):  # one entry per dim, or none at all
                chunks = tuple(c for c in dim.candidates() if c < dim.extent)
                out.append(Gene(("reduction_loops", i), (None, *chunks), ordered=True, implicit=None))
        for name, fragment in self.tunables.items():
            out.append(Gene((name,), tuple(fragment.candidates()), ordered=True, implicit=fragment.default()))
        return out

    def values_of(self, config: Config, genes: list[Gene]) -> tuple:
        """`config`'s value of each gene (the implicit default where the config has none)."""
        out = []
        for gene in genes:
            key, *index = gene.path
            value = config.get(key)
            if key == "pallas_loop_type":  # one string: every loop's; none: the default
                value = value or KNOB_DEFAULTS["pallas_loop_type"]
                if not isinstance(value, str):
                    value = value[index[0]] if index[0] < len(value) else None
            elif value is not None and index:
                value = value[index[0]] if index[0] < len(value) else None
            value = tuple(value) if isinstance(value, list) else value
            out.append(gene.implicit if value is None and key != "block_sizes" else value)
        return tuple(out)

    def config_of(self, values: Sequence[Any], genes: list[Gene], base: Config | None = None) -> Config:
        """The config with these gene values (keys left at their implicit default are omitted)."""
        out: dict[str, Any] = dict(base or {})
        lists: dict[str, list] = {}
        values = self._one_fold_per_device_loop(values, genes)
        for gene, value in zip(genes, values):
            key, *index = gene.path
            if index:
                lists.setdefault(key, []).append((gene, value))
            elif value == gene.implicit and gene.implicit is not _NO_DEFAULT:
                out.pop(key, None)
            else:
                out[key] = value
        for key, entries in lists.items():
            if key != "block_sizes" and all(value == gene.implicit for gene, value in entries):
                out.pop(key, None)
            elif key == "pallas_loop_type" and len({value for _, value in entries}) == 1:
                out[key] = entries[0][1]  # the same type for every loop: one string
            else:
                out[key] = [list(v) if isinstance(v, tuple) else v for _, v in entries]
        return Config(out)

    def _one_fold_per_device_loop(self, values: Sequence[Any], genes: list[Gene]) -> list:
        """`values` with the loop types of each device loop folding one loop at most (planning
        refuses two): a later fold gets the default loop type. The search's moves pick each
        loop's type alone, so two may land on `outer_pipeline` together."""
        values = list(values)
        position = {gene.path[1]: i for i, gene in enumerate(genes) if gene.path[0] == "pallas_loop_type"}
        for group in self._fold_groups:
            folds = [position[loop] for loop in group
                     if loop in position and values[position[loop]] == FOLDED_LOOP_TYPE]
            for i in folds[1:]:
                values[i] = KNOB_DEFAULTS["pallas_loop_type"]
        return values

    def check(self, config: Config) -> Config:
        """`config` completed and planned; raises `exc.InvalidConfig` (or a subclass) if it cannot run."""
        config = self.normalize(config)
        if self._validate is not None:
            self._validate(config)
        return config

    def canonical(self, config: Config) -> tuple[Config, object]:
        """(`config` completed, planned and stripped of the knobs its plan left unused
        (`plan.knobs.canonical_config`), the plan): configs that plan the same kernel have
        one canonical config. Raises like `check`."""
        config = self.normalize(config)
        if self._validate is None:
            return config, None
        plan = self._validate(config)
        from ..plan.knobs import canonical_config  # plan imports autotune's config only

        canonical = canonical_config(plan, config)
        if canonical.get("loop_orders") != config.get("loop_orders"):  # a loop order reset:
            try:  # the same walk, unless the reset order does not plan (then the order is kept)
                plan = self._validate(canonical)
            except exc.PallasiteError:
                canonical = Config({**canonical, "loop_orders": config["loop_orders"]})
        self._last_plan = (canonical.key(), plan)
        return canonical, plan

    def planned(self, config: Config):
        """The plan `canonical` last built, if it was `config`'s (so an objective scoring
        the canonical config need not plan it again), else None."""
        last = self._last_plan
        return last[1] if last is not None and last[0] == config.key() else None

    def legal(self, config: Config) -> bool:
        try:
            self.check(config)
            return True
        except exc.InvalidConfig:
            return False

    def enumerate(self, limit: int | None = None) -> Iterator[Config]:
        """Every legal config (block sizes first varied last), up to `limit` of them."""
        genes = self.genes()
        found = 0
        for values in itertools.product(*(gene.choices for gene in genes)):
            if limit is not None and found >= limit:
                return
            config = self.config_of(values, genes)
            if self.legal(config):
                found += 1
                yield config

    def sample(self, rng: random.Random) -> Config:
        """A random point of the space (not checked: `check` it)."""
        genes = self.genes()
        return self.config_of([rng.choice(gene.choices) for gene in genes], genes)

    def mutate(self, config: Config, rng: random.Random, changes: int = 1) -> Config:
        """`config` with `changes` random genes moved: an ordered gene to a neighbouring value
        (mostly), a categorical one to another value."""
        genes = self.genes()
        movable = [i for i, g in enumerate(genes) if len(g.choices) > 1]
        if not movable:
            return config
        values = list(self.values_of(config, genes))
        for _ in range(changes):
            i = rng.choice(movable)
            values[i] = genes[i].step(values[i], rng)
        return self.config_of(values, genes, base=config)

    def neighbours(self, config: Config) -> list[Config]:
        """Configs one gene away: an ordered gene's adjacent values, a categorical gene's others."""
        genes = self.genes()
        values = self.values_of(config, genes)
        out = []
        for i, gene in enumerate(genes):
            for value in gene.adjacent(values[i]):
                moved = list(values)
                moved[i] = value
                out.append(self.config_of(moved, genes, base=config))
        return out

    def _check_reduction_loops(self, chunks) -> None:
        """One entry per reduction dim. A list of Nones (one block each: today's schedule)
        is accepted at any length, so a Helion config counting its dims differently runs."""
        dims = self.reduction_dims
        if all(chunk is None for chunk in chunks):
            return
        if len(chunks) != len(dims):
            raise exc.InvalidConfig(
                f"reduction_loops has {len(chunks)} entries but the kernel has {len(dims)} reduction dim(s) "
                f"(whole-dim extents reduced: {[d.extent for d in dims]}); give one entry (None or a chunk "
                "size) per dim.")
        for entry, (chunk, dim) in enumerate(zip(chunks, dims)):
            if chunk is not None and chunk < dim.extent and not dim.allows(chunk):
                raise exc.InvalidConfig(
                    f"reduction_loops[{entry}]={chunk} is not a legal chunk for the dim of {dim.extent}: "
                    + "; ".join(r.describe() for r in dim.rules if not r.allows(chunk))
                    + f". Accepted values: None, a chunk >= {dim.extent} (one block), or one of "
                    f"{dim.candidates()} (or another multiple of the tiling quantum).")

    def _check_loop_orders(self, orders) -> None:
        if len(orders) != len(self.multi_dim_loops):
            raise exc.InvalidConfig(
                f"loop_orders has {len(orders)} entries but the kernel has {len(self.multi_dim_loops)} "
                "multi-dim hl.tile loop(s) (device and inner loops, in order of appearance); give one "
                "permutation per such loop.")
        for order, rank in zip(orders, self.multi_dim_loops):
            if sorted(order) != list(range(rank)):
                raise exc.InvalidConfig(
                    f"loop_orders entry {list(order)} is not a permutation of the loop's "
                    f"{rank} dims {list(range(rank))}.")
