"""Reference mode: a kernel's body executed eagerly in PyTorch, tiles as slices.

An oracle independent of the compiler — no IR, no plan, no generated code,
no JAX — for differential testing and for debugging kernels. Turned on by
`PALLASITE_REF=1`, `pallasite.kernel(..., ref_mode=True)`, or called directly
as `pallasite.testing.run_ref(kernel, args)`. Its semantics are the
language's:

- Host code runs as ordinary PyTorch on the real tensors. `hl.specialize(x)`
  is `x`. Block sizes come from the config (`run_ref(..., config=)`, else the
  kernel's `config=`/`configs[0]`, else the default config — the compiler's
  `BoundKernel.resolve_config`), so tiles have the boundaries of the compiled kernel for
  that config; tunable sizes are numbered in the order the kernel first
  reaches each `hl.tile(..., block_size=None)` dim and
  `hl.register_block_size` call.
- `hl.tile`/`hl.grid` loops iterate concretely, the last dimension fastest (a
  multi-dim loop — top-level or inner — in its `loop_orders` entry, as the compiled
  grid and inner loops run).
  A tile has `begin`, `end` (clamped to the loop's end), `block_size`,
  `index` (`torch.arange(begin, end)`, int32), `id` and `count` — ints, except
  `index`; `hl.grid` yields ints. Bounds may be ints or integer scalars read
  from tensors.
- Loads and stores are torch indexing: `x[tile]` is `x[begin:end]` (the last
  tile is shorter); a scalar read is a 0-d tensor; one index vector gathers
  (load) or scatters (store). A load is a copy; stores and `x[tile] += v`
  write the caller's tensors. A tile past a tensor's end is an error.
- Device values have their tiles' actual extents: `hl.zeros([tile, 8])` is
  `[tile.end - tile.begin, 8]`, and `.shape` of a device value says so (in the
  compiled kernel it is the block size).
- The extent rule: an elementwise op whose operands disagree on an axis's
  extent (neither a broadcast axis) computes on the shorter extent, when the
  two are a partial tile's extent and its block size (what the compiled
  kernel sees as one extent); any other disagreement is torch's broadcast
  error (`exc.ShapeMismatch`), as compiling gives; a value
  stored into a shorter slice is cut to it. A one-index tile's axis is a lane,
  never a broadcast axis. At the end of each iteration of an inner loop, a
  device value that existed before the loop and was reassigned in it keeps
  its previous value in the lanes past a shorter extent; so a block-sized
  accumulator (`hl.zeros([tm, block_n])` summed over `hl.tile(n,
  block_size=block_n)`) ends with every lane's partial result. Other names
  assigned in an inner loop do not escape it.
- Dtypes as the compiled kernel: device int64 results narrow to int32, bf16/f16
  reductions and all matmuls accumulate in f32, `hl.dot` returns `out_dtype`,
  else `acc`'s dtype, else f32.
- Errors are `pallasite.exc` errors carrying the user's line; Python errors
  of the user's own code keep their type and get the line as a note.
- The result is what the kernel returns: torch tensors, with in-place updates
  applied to the caller's arguments.
"""
from __future__ import annotations

import enum
from typing import Any, Callable, Mapping

from .. import exc
from .. import language as hl
from ..config import Config, as_config, kernel_keys_error
from ..frontend import source
from ..frontend.operands import python_number
from .runner import ReferenceRunner

REF_ENV = "PALLASITE_REF"


class RefMode(enum.Enum):
    """Helion's `ref_mode=` values: `EAGER` runs every call in reference mode (as
    `ref_mode=True` does), `OFF` compiles (as `ref_mode=False`)."""

    OFF = "off"
    EAGER = "eager"


def run_reference(kernel: Any, args: tuple, kwargs: Mapping[str, Any] | None = None,
                  config: Config | Mapping[str, Any] | None = None) -> Any:
    """Run `kernel` (a `pallasite.Kernel` or a plain kernel function) eagerly on `args`."""
    fn = getattr(kernel, "fn", kernel)
    args, kwargs = tuple(args), dict(kwargs or {})
    check_arguments = getattr(kernel, "_arg_specs", None)
    if check_arguments is not None:  # the argument errors of a compiled call (kinds, 64-bit dtypes)
        check_arguments(kernel.bind_arguments(args, kwargs))
    declared = getattr(kernel, "config", None)
    if config is not None and isinstance(declared, Config):  # as the compiler: it completes the decorator's
        config = Config({**declared, **as_config(config)})
    chosen = as_config(config) if config is not None else getattr(kernel, "declared_config", None)
    # the keys a config may name, checked as the compiler checks them (a Kernel read them once)
    names = kernel.tunable_names if hasattr(kernel, "tunable_names") else source.tunable_names_of(fn)
    problem = None if chosen is None or names is None else kernel_keys_error(chosen, names)
    if problem:
        raise exc.InvalidConfig(problem)
    orders = (chosen.get("loop_orders") if chosen is not None else None) or ()
    tunables = {key: chosen[key] for key in chosen if key not in Config.KNOWN_KEYS} if chosen else {}
    bind: Callable | None = getattr(kernel, "bind", None)
    check_narrowed = getattr(kernel, "check_narrowed_arguments", None)
    if check_narrowed is not None:  # int64 arguments: the compiler's checks (reference mode mirrors int32)
        check_narrowed(args, kwargs, config)
    sites = None if bind is None else (lambda: bind(args, kwargs).jagged_sites(config))
    runner = ReferenceRunner(fn, lambda: _block_sizes(kernel, args, kwargs, config), orders, tunables, sites,
                             None if bind is None else lambda: _slots_per_site(bind, args, kwargs, config),
                             None if bind is None else lambda: _clamped_sizes(bind, args, kwargs, config))
    result = runner.run(tuple(python_number(hl.constexpr_value(a)) for a in args),
                        {k: python_number(hl.constexpr_value(v)) for k, v in kwargs.items()})
    left = runner.loop_orders_left()
    if left:
        raise exc.InvalidConfig(
            f"loop_orders has {len(orders)} entries but this call reached {len(orders) - left} multi-dim hl.tile "
            "loop(s) (device and inner loops, in order of appearance); give one permutation per such loop.")
    used, given = runner.block_slots_used, runner.block_sizes_given
    if given is not None and used < len(given):
        _check_block_count(kernel, args, kwargs, given, used)
    return result


def _block_sizes(kernel: Any, args: tuple, kwargs: dict, config: Any) -> list[int]:
    """The block sizes the compiled kernel would use for this call and config (the
    compiler's one config resolution, `BoundKernel.resolve_config`)."""
    chosen = as_config(config) if config is not None else getattr(kernel, "declared_config", None)
    bind: Callable | None = getattr(kernel, "bind", None)
    if chosen is not None and chosen.block_sizes is not None:
        return list(chosen.block_sizes)  # no need to trace the kernel (unless one is clamped: _clamped_sizes)
    if bind is None:
        raise exc.InvalidConfig(
            "Reference mode of a plain function needs its block sizes: pass config=Config(block_sizes=[...]).")
    try:
        return list(bind(args, kwargs).resolve_config(config).block_sizes)
    except exc.PallasiteError as err:
        err.add_note("Reference mode took its block sizes from the compiler's config resolution; pass "
                     "config=pallasite.Config(block_sizes=[...]) to a plain function to run without the compiler.")
        raise


def _clamped_sizes(bind: Callable, args: tuple, kwargs: dict, config: Any) -> list[int] | None:
    """The compiler's per-slot block sizes for the config, a size past a static dim clamped to
    it (`ConfigSpec.normalize`); None where the compiler refuses the kernel (reference mode
    then runs the sizes given)."""
    try:
        return list(bind(args, kwargs).resolve_config(config).block_sizes)
    except exc.PallasiteError:
        return None


def _slots_per_site(bind: Callable, args: tuple, kwargs: dict, config: Any) -> list[int] | None:
    """The compiler's per-slot block sizes for `config` (Helion's one size per hl.tile line
    spread over the slots a host loop made of it: `ConfigSpec.normalize`); None where the
    compiler cannot trace the kernel."""
    try:
        return list(bind(args, kwargs).resolve_config(config).block_sizes)
    except exc.InvalidConfig:
        raise
    except exc.PallasiteError:
        return None


def _check_block_count(kernel: Any, args: tuple, kwargs: dict, given: list[int], used: int) -> None:
    """More block sizes than the run used: the compiler's `InvalidConfig` when the config
    really has extra entries (reference mode would otherwise ignore them and answer for a
    different config). A tunable loop that ran zero times also leaves a slot unused, so
    the compiler's count decides; a kernel it cannot trace is judged by this run's count."""
    bind: Callable | None = getattr(kernel, "bind", None)
    try:
        count = len(bind(args, kwargs).config_spec.block_sizes) if bind is not None else used
    except exc.PallasiteError:
        count = used
    if len(given) != count:
        raise exc.InvalidConfig(
            f"block_sizes has {len(given)} entries but the kernel has {count} tunable block sizes.")


__all__ = ["REF_ENV", "RefMode", "ReferenceRunner", "run_reference"]
