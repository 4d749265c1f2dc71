"""`pallasite.Config`: the schedule knobs of one compiled kernel."""
from __future__ import annotations

import difflib
import enum
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import exc

# Keys of Helion's GPU backends (Triton, CuTe) that its `Config` documents: they name real
# choices there and none on a TPU (warps, pipeline stages of `tl.range`, pointer vs block-
# pointer indexing, persistent program ids, register limits, L2 swizzles, PTXAS controls).
# Helion programs carry them so one kernel serves GPU and TPU, and Helion's TPU backend
# ignores them: a `Config` drops them, keeping their names (`Config.ignored_keys`), and the
# kernel warns once naming them (`exc.IgnoredConfigKeys`).
GPU_ONLY_KEYS = frozenset({
    "num_warps", "num_stages", "indexing", "atomic_indexing", "pid_type", "l2_groupings",
    "flatten_loops", "range_unroll_factors", "range_num_stages",
    "range_multi_buffers", "range_flattens", "range_warp_specializes",
    "static_ranges", "num_sm_multiplier", "maxnreg", "load_eviction_policies",
    "num_threads", "grid_fissions", "epilogue_subtile", "advanced_controls_file",
})
# Families of such keys, by prefix: CuTe's Blackwell (tcgen05) pipeline stages, clusters,
# epilogue warps and persistence (`tcgen05_ab_stages`, `tcgen05_cluster_m`, ...).
GPU_ONLY_PREFIXES = ("tcgen05_",)
# Prefixes of built-in key families: a key starting so that is not one is a misspelling, never
# a user tunable (`pallas_loop_kind`, `tcgen_ab_stages`).
_RESERVED_PREFIXES = ("pallas_", "tcgen")


# Keys of Helion's Pallas megakernel schedule, which runs several device loops (roots) in one
# pallas_call: weight rings streamed across roots (`pallas_stream_depth`, `_arena`, `_unroll`,
# `_wait_group`), state kept in HBM between roots (`pallas_hbm_resident`), lane-dense
# re-layouts (`pallas_lane_dense`), root order. pallasite runs each device loop as its own
# pallas_call (the schedule these knobs tune does not exist here), so they are dropped and
# named like the GPU keys; the kernel's results do not depend on them.
MEGAKERNEL_KEYS = frozenset({
    "pallas_stream_depth", "pallas_stream_arena", "pallas_stream_unroll", "pallas_stream_wait_group",
    "pallas_hbm_resident", "pallas_lane_dense", "pallas_sequential_roots",
})


def is_gpu_only_key(key: str) -> bool:
    """Whether a config key names a choice of Helion's GPU backends only."""
    return key in GPU_ONLY_KEYS or key.startswith(GPU_ONLY_PREFIXES)


def is_ignored_key(key: str) -> bool:
    """Whether a config key names a choice Helion has and pallasite has no schedule for: its
    GPU backends' (`is_gpu_only_key`) or its Pallas megakernel's (`MEGAKERNEL_KEYS`)."""
    return is_gpu_only_key(key) or key in MEGAKERNEL_KEYS


# The config sits below the plan: it names the values of its knobs, and plan/ implements
# each (plan/loops registers one strategy per loop type and checks it has them all).
LOOP_TYPES = ("unroll", "fori_loop", "emit_pipeline")  # `pallas_loop_type`: how an inner loop runs
# ... or folded into the grid (the autotuner offers it to loops directly in a device loop's body)
# (plan/folded_loops.py): no longer an inner loop
FOLDED_LOOP_TYPE = "outer_pipeline"
# ... or (Helion's name) the q loop of a grid over jagged segments, run as the items of a flattened
# worklist (plan/worklists.py; the items' loop runs as the default type): the kernel must have that shape
COMPACT_WORKLIST = "compact_worklist"


class IndirectAccessMode(str, enum.Enum):
    """The values of the config key `pallas_indirect_access_mode` (plan/gathers.py)."""

    AUTO = "auto"  # resident while the table fits the threshold, per-row DMA past it
    RESIDENT = "resident"  # the table whole in VMEM (one-hot matmul / select-and-sum)
    DMA = "dma"  # the table in HBM, one DMA per gathered row


INDIRECT_ACCESS_MODES = tuple(mode.value for mode in IndirectAccessMode)
WORKLIST_GROUPINGS = (1, 2)  # `pallas_worklist_grouping`: q tiles per work item

# What a config without the key means: the one place a knob's default is written. The
# plan reads `resolve(config)`; the autotuner's genes leave these values implicit.
KNOB_DEFAULTS: Mapping[str, Any] = {
    "pallas_loop_type": "unroll",
    "vmem_limit_bytes": None,  # the plan sets one when the estimate needs it
    "loop_orders": (),  # every multi-dim loop in its dims' order
    "pallas_indirect_access_mode": IndirectAccessMode.AUTO.value,
    "reduction_loops": None,  # every reduction over its whole dim in one block
    "pallas_pre_broadcast": False,
    "pallas_load_buffer_count": 2,
    "pallas_flatten_worklist": True,
    "pallas_worklist_grouping": 1,
}


class Config(Mapping[str, Any]):
    """An immutable set of schedule choices.

    Keys:
      block_sizes: one int per tiled dimension, in order of appearance, or one per hl.tile
        source site (Helion's count: a host loop re-tracing a line gives it one size).
      pallas_loop_type: "unroll" | "fori_loop" | "emit_pipeline" for every inner loop, or a
        list of them, one per inner loop (every device loop's, in source order, a nested
        loop after the loop holding it), e.g. ["unroll", "emit_pipeline"]; "outer_pipeline"
        folds a device loop's last inner loop into its grid (plan/folded_loops.py);
        "compact_worklist" (Helion's) runs the q loop of a grid over jagged segments as the
        items of a flattened worklist (plan/worklists.py), or is refused where it cannot.
      vmem_limit_bytes: the scoped VMEM limit handed to Mosaic.
      loop_orders: per multi-dim hl.tile loop (device loops and inner loops, in
        order of appearance, as Helion counts them), a permutation of its dims:
        the order of the grid axes, or of an inner loop's dims (the first is the
        outermost, the last walks fastest).
      pallas_indirect_access_mode: how gathers (`table[idx, :]`) read their table:
        "auto" (resident in VMEM while small, per-row DMA past the threshold),
        "resident" (whole in VMEM: one-hot matmul / select-and-sum), "dma" (the
        table in HBM, one DMA per gathered row). See plan/gathers.py.
      reduction_loops: per reduction dim (the extent of a whole-dim `:` axis that a
        reduction reduces, in order of first appearance), None (one block, the
        default) or a chunk size R: each reduction over that dim runs as a loop over
        chunks of R with a carried accumulator (the tail masked with its identity).
      pallas_pre_broadcast: bool; broadcast loop-invariant operands (a bias row against
        an inner loop's accumulator) once before the inner loop, when the lane dim is a
        multiple of 128 (a no-op otherwise).
      pallas_load_buffer_count: int >= 2; DMA buffer depth of the tensors an inner loop
        streams (2 = double buffering, 3 = triple), or a list of them, one per inner loop
        in source order as for pallas_loop_type (Helion's form); None (whole or an entry):
        the default.
      pallas_flatten_worklist: bool (default True); a grid over jagged segments with a
        data-dependent q-tile loop inside runs as a flat grid of (segment, q-tile) work
        items (plan/worklists.py); False keeps one program per segment.
      pallas_worklist_grouping: 1 or 2 (default 1); q tiles per work item.
    """

    KNOWN_KEYS = ("block_sizes", "pallas_loop_type", "vmem_limit_bytes", "loop_orders",
                  "pallas_indirect_access_mode", "reduction_loops", "pallas_pre_broadcast",
                  "pallas_load_buffer_count", "pallas_flatten_worklist", "pallas_worklist_grouping")

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any):
        values = dict(config or {})
        values.update(kwargs)
        if "block_size" in values:  # Helion's spelling for a single tiled dim
            size = values.pop("block_size")
            if "block_sizes" in values:
                raise exc.InvalidConfig("Give block_size or block_sizes, not both.")
            values["block_sizes"] = list(size) if isinstance(size, (list, tuple)) else [size]
        # GPU-only and megakernel keys: dropped (a None is Helion's "not set", dropped unnamed)
        self.ignored_keys = tuple(sorted(k for k, v in values.items() if is_ignored_key(k) and v is not None))
        self._ignored = {k: values[k] for k in self.ignored_keys}
        values = {k: v for k, v in values.items() if not is_ignored_key(k)}
        for key, value in values.items():
            _validate_key(key, value)
        if "block_sizes" in values:
            values["block_sizes"] = [int(b) for b in values["block_sizes"]]
        self._values = values

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __getattr__(self, name: str) -> Any:
        """A GPU-only key read back (`config.num_warps`, as Helion's Config has it): the value
        given, None where unset; the config itself ignores it."""
        if name.startswith("_") or not is_ignored_key(name):
            raise AttributeError(f"'Config' object has no attribute {name!r}")
        return self.__dict__.get("_ignored", {}).get(name)

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    @property
    def config(self) -> dict[str, Any]:
        """The keys and values, as a dict (Helion's `Config.config`)."""
        return dict(self._values)

    @property
    def block_sizes(self) -> list[int] | None:
        return self._values.get("block_sizes")

    @property
    def pallas_loop_type(self) -> str | list[str] | None:
        return self._values.get("pallas_loop_type")

    def key(self) -> tuple:
        """A hashable identity, used by compile caches."""
        return tuple(sorted((k, _freeze(v)) for k, v in self._values.items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"Config({inner})"

    def to_json(self) -> str:
        """The config's keys and values as a JSON object (Helion's `Config.to_json`)."""
        return json.dumps(self._values, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Config":
        """The config a `to_json` text holds, its keys checked as the constructor checks them."""
        try:
            values = json.loads(text)
        except json.JSONDecodeError as err:
            raise exc.InvalidConfig(f"Not a config in JSON: {err}.") from None
        if not isinstance(values, dict):
            raise exc.InvalidConfig(f"A config in JSON is an object of keys, got {type(values).__name__}.")
        return cls(values)

    def save(self, path: str | os.PathLike) -> None:
        """Write the config to `path` as JSON (`Config.load` reads it back)."""
        Path(path).write_text(self.to_json() + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Config":
        return cls.from_json(Path(path).read_text())


@dataclass(frozen=True)
class ResolvedConfig:
    """Every schedule knob of a config with its value: the config's own, else
    `KNOB_DEFAULTS`. Planning reads this, so no default is written where a knob is used."""

    pallas_loop_type: str | list[str]
    vmem_limit_bytes: int | None
    loop_orders: tuple | list
    pallas_indirect_access_mode: str
    reduction_loops: tuple | list | None
    pallas_pre_broadcast: bool
    pallas_load_buffer_count: int | list | tuple | None  # per inner loop: plan/loops buffer_counts
    pallas_flatten_worklist: bool
    pallas_worklist_grouping: int


def resolve(config: Mapping[str, Any]) -> ResolvedConfig:
    """`config`'s knobs, each given its default where the config has none."""
    return ResolvedConfig(**{key: config.get(key, default) for key, default in KNOB_DEFAULTS.items()})


def check_loop_type(name: str) -> None:
    if name not in (*LOOP_TYPES, FOLDED_LOOP_TYPE, COMPACT_WORKLIST):
        raise exc.InvalidConfig(
            f"Invalid pallas_loop_type {name!r}: expected one of "
            f"{', '.join(repr(n) for n in (*LOOP_TYPES, FOLDED_LOOP_TYPE, COMPACT_WORKLIST))}.")


def _freeze(value: Any) -> Any:
    return tuple(_freeze(v) for v in value) if isinstance(value, (list, tuple)) else value


def _validate_key(key: str, value: Any) -> None:
    if key == "block_sizes":
        if not isinstance(value, (list, tuple)) or not all(
            isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in value
        ):
            raise exc.InvalidConfig(
                f"block_sizes must be a list of positive ints, got {value!r}."
            )
    elif key == "pallas_loop_type":
        if isinstance(value, (list, tuple)):  # one per inner loop, in source order
            for name in value:
                if not isinstance(name, str):
                    raise exc.InvalidConfig(
                        f"pallas_loop_type must be a loop type or a list of them (one per inner loop), "
                        f"got {value!r}.")
                check_loop_type(name)
        elif isinstance(value, str):
            check_loop_type(value)
        else:
            raise exc.InvalidConfig(
                f"pallas_loop_type must be a loop type (every inner loop) or a list of them (one per "
                f"inner loop, in source order), got {value!r}.")
    elif key == "loop_orders":
        if not isinstance(value, (list, tuple)) or not all(
            isinstance(order, (list, tuple)) and all(isinstance(i, int) and not isinstance(i, bool) for i in order)
            for order in value
        ):
            raise exc.InvalidConfig(
                f"loop_orders must be a list of lists of ints (one permutation per multi-dim "
                f"hl.tile loop), got {value!r}.")
    elif key == "pallas_indirect_access_mode":
        if value not in INDIRECT_ACCESS_MODES:
            raise exc.InvalidConfig(
                f"Invalid pallas_indirect_access_mode {value!r}: expected one of "
                f"{', '.join(repr(m) for m in INDIRECT_ACCESS_MODES)}.")
    elif key == "vmem_limit_bytes":
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise exc.InvalidConfig(
                f"vmem_limit_bytes must be a positive int, got {value!r}."
            )
    elif key in _KNOB_VALIDATORS:
        _KNOB_VALIDATORS[key](value)
    else:  # a user tunable's name: the kernel the config meets checks it (kernel_keys_error)
        near = difflib.get_close_matches(key, [*Config.KNOWN_KEYS, *GPU_ONLY_KEYS], n=1, cutoff=0.8)
        if near or key.startswith(_RESERVED_PREFIXES) or not key.isidentifier():
            raise exc.InvalidConfig(unknown_key_message(key, near[0] if near else None))
        if not isinstance(value, (int, float, str, bool)):
            raise exc.InvalidConfig(f"Config key {key!r} (not a built-in key, so an hl.register_tunable "
                                    f"name) must have a scalar value, got {value!r}.")


def unknown_key_message(key: str, near: str | None = None, tunables: Any = None) -> str:
    """The error for a config key that is neither built in nor (where `tunables`, the names a
    kernel declares with hl.register_tunable, are known) one of the kernel's tunables."""
    hint = f" (did you mean {near!r}?)" if near else ""
    declared = "" if tunables is None else f"; this kernel's: {', '.join(tunables) or 'none'}"
    return (f"Unknown config key {key!r}{hint}. Valid keys: {', '.join(Config.KNOWN_KEYS)}, and the "
            f"names a kernel declares with hl.register_tunable{declared}.")


def kernel_keys_error(config: Mapping[str, Any], tunables: Any) -> str | None:
    """Why `config` does not fit a kernel whose hl.register_tunable names are `tunables`: the
    first key that is neither built in nor one of them, or None."""
    for key in config:
        if key not in Config.KNOWN_KEYS and key not in tunables and not is_ignored_key(key) and key != "block_size":
            near = difflib.get_close_matches(key, [*Config.KNOWN_KEYS, *tunables], n=1, cutoff=0.8)
            return unknown_key_message(key, near[0] if near else None, tunables)
    return None


def check_tunable_name(name: str) -> None:
    """Refuse an hl.register_tunable name that is a built-in config key."""
    if name in Config.KNOWN_KEYS or is_ignored_key(name) or name == "block_size" or name.startswith(_RESERVED_PREFIXES):
        raise exc.InvalidConfig(f"hl.register_tunable({name!r}, ...): {name!r} is a built-in config key; "
                                "choose another name.")


def ignored_keys_of(configs: Any) -> tuple[str, ...]:
    """The GPU-only keys some of `configs` (Configs or dicts; None entries skipped) dropped."""
    keys: set[str] = set()
    for config in configs:
        if config is not None:
            keys.update(as_config(config).ignored_keys)
    return tuple(sorted(keys))


def as_config(config: Config | Mapping[str, Any] | None) -> Config:
    if config is None:
        return Config()
    if isinstance(config, Config):
        return config
    if isinstance(config, Mapping):
        return Config(config)
    if isinstance(getattr(config, "best", None), Config):  # a SearchResult (`bound.autotune(args)`): its best
        return config.best
    raise exc.InvalidConfig(f"Expected a pallasite.Config or a dict, got {type(config).__name__}.")


def _validate_reduction_loops(value: Any) -> None:
    if not isinstance(value, (list, tuple)) or not all(
        r is None or (isinstance(r, int) and not isinstance(r, bool) and r > 0) for r in value
    ):
        raise exc.InvalidConfig(
            f"reduction_loops must be a list with one entry per reduction dim, each None "
            f"(one block over the whole dim) or a positive int chunk size, got {value!r}.")


def _validate_pre_broadcast(value: Any) -> None:
    if not isinstance(value, bool):
        raise exc.InvalidConfig(f"pallas_pre_broadcast must be True or False, got {value!r}.")


def _validate_load_buffer_count(value: Any) -> None:
    def depth(entry: Any) -> bool:
        return isinstance(entry, int) and not isinstance(entry, bool) and entry >= 2

    if value is None or depth(value):
        return
    if isinstance(value, (list, tuple)) and all(entry is None or depth(entry) for entry in value):
        return  # one per inner loop, in source order (plan/loops: buffer_counts)
    raise exc.InvalidConfig(
        f"pallas_load_buffer_count must be an int >= 2 (2 = double buffering, 3 = triple, ...), a list "
        f"with one such int (or None, the default) per inner loop, or None, got {value!r}.")


def _validate_flatten_worklist(value: Any) -> None:
    if not isinstance(value, bool):
        raise exc.InvalidConfig(f"pallas_flatten_worklist must be True or False, got {value!r}.")


def _validate_worklist_grouping(value: Any) -> None:
    if isinstance(value, bool) or value not in WORKLIST_GROUPINGS:
        raise exc.InvalidConfig(f"pallas_worklist_grouping must be 1 or 2 (q tiles per work item), got {value!r}.")


# Keys with real meaning here, each validated by its own function.
_KNOB_VALIDATORS = {
    "reduction_loops": _validate_reduction_loops,
    "pallas_pre_broadcast": _validate_pre_broadcast,
    "pallas_load_buffer_count": _validate_load_buffer_count,
    "pallas_flatten_worklist": _validate_flatten_worklist,
    "pallas_worklist_grouping": _validate_worklist_grouping,
}
