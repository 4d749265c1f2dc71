"""`BoundKernel`: one kernel at one argument signature (its config space, plans, code and
compiled variants); `Kernel` (runtime/kernel.py) makes one per signature."""
from __future__ import annotations

import functools
from typing import Any, Callable


from .. import exc
from ..autotune import ConfigSpec
from ..codegen import generate_module
from ..config import Config, as_config
from ..frontend import ArgSpec, Tracer
from ..ir import remote_nodes, walk_nodes
from ..plan import KernelPlan, PlanTarget, build_plan
from .chips import chip_info, default_chip
from .dynamic import generate_variant, size_env, specs_at
from .interpret import interpret_params
from ..frontend import host_items
from ..frontend.flat_rows import RowsReadConflict
from .compiled import CompiledKernel
from ..autotune.tuner import (
    autotune, cache_fields, is_traced, note_untuned, searched_config, traced_config, tuned_config, wants_tuning,
)


_CONFIGS_AT_SIZES = 1024  # sizes whose resolved config a dynamic BoundKernel remembers


def with_ignored_warnings(method: Callable) -> Callable:
    """`method` of a `Kernel` or `BoundKernel` run with its kernel's `ignore_warnings=[...]`
    applied (`exc.ignoring`): what binding, compiling, tuning and running say is filtered."""

    @functools.wraps(method)
    def run(self, *args: Any, **kwargs: Any) -> Any:
        ignored = (self.kernel if isinstance(self, BoundKernel) else self).settings.ignore_warnings
        if not ignored:
            return method(self, *args, **kwargs)
        with exc.ignoring(ignored):
            return method(self, *args, **kwargs)

    return run


class BoundKernel:
    """One kernel at one argument signature: its config space, code and compiled variants."""

    def __init__(self, kernel: Kernel, specs: list[ArgSpec], captured: dict[str, ArgSpec] | None = None,
                 constants: tuple = (), discovery: Config | None = None):
        self.kernel = kernel
        self.specs = specs
        self.captured = captured or {}  # implicit arguments: tensors read from the enclosing scope
        self.constants = constants  # the other globals and closure values it reads (runtime/scope.py)
        # The discovery trace learns which block sizes exist; a declared config's sizes (or
        # those of `discovery`, the config the binding caller runs) make it trace the kernel
        # as it will run (shapes written for that block size).
        declared = discovery if discovery is not None and discovery.block_sizes else kernel.declared_config
        # The plans of this signature's own specs by (config, chip, dot precision): a config
        # is traced and planned once (checked as the default, then compiled; `to_code`). A
        # trace is never reused: planning rewrites parts of its IR (a flattened worklist's
        # q loop), so each plan gets a fresh one.
        self._plans: dict[tuple, KernelPlan] = {}
        self._discovering = True
        discovery = self._trace(None if declared is None else declared.block_sizes, config=declared)
        self._discovering = False
        self.specialized = set(discovery.specialized)
        kernel.note_host_computations(discovery.ir)
        # remote copies or barriers: the kernel runs on every device of a mesh (jax_fn under shard_map)
        self.remote = any(remote_nodes(walk_nodes(call.loop.body)) for call in discovery.ir.device_loops)
        self.config_spec = ConfigSpec(discovery.ir, validate=self.plan, tunables=discovery.tunables)
        self._compiled: dict[tuple, CompiledKernel] = {}
        self._default: CompiledKernel | None = None
        self._resolved: Config | None = None  # the declared or tuned config, else None
        self._defaults: dict[str, Config] = {}  # the default config per chip planned for
        # static_shapes=False: (config asked for, sizes, chip) -> the config that runs there
        self._config_at: dict[tuple, Config] = {}

    @property
    def fn(self) -> Callable:
        return self.kernel.fn

    def _trace(self, block_sizes: list[int] | None, specs: list[ArgSpec] | None = None,
               config: Config | None = None):
        provisional: dict[int, int] = {}

        def choose(block_id: int, extent: int) -> int:
            if block_sizes is not None and block_id < len(block_sizes):
                return block_sizes[block_id]
            return provisional.setdefault(block_id, max(1, min(extent, 128)))

        tunables = {k: config[k] for k in config if k not in Config.KNOWN_KEYS} if config else None
        disabled: frozenset[str] = frozenset()
        while True:  # a loop that writes a buffer it read as rows: again, reading it element-wise
            tracer = Tracer(self.kernel.fn, specs or self.specs, choose, self.captured, tunables)
            tracer.recorder.rows_disabled = disabled
            try:
                tracer.ir = tracer.run()
                break
            except RowsReadConflict as conflict:
                disabled |= {conflict.root}
            except host_items.ItemNeeded as needed:
                if self._discovering:  # Kernel._bind reads the element and binds again
                    raise
                raise exc.UnsupportedOperation(
                    f"This config's trace reads {needed}, an element the kernel's first trace did not read: "
                    "read every element host code needs with .item() whatever the config.") from None
        tracer.ir.collective_id = self.kernel.collective_id
        return tracer

    def jagged_sites(self, config: Config | dict | None = None) -> dict:
        """The accesses inside hl.jagged_tile loops and how each is masked (frontend/jagged.py),
        traced at `config`'s block sizes: reference mode masks the same ones."""
        resolved = self.resolve_config(config)
        return self._trace(resolved.block_sizes, config=resolved).ir.jagged_sites

    def resolve_config(self, config: Config | dict | None = None) -> Config:
        """The one place a config is resolved.

        An explicit `config` is completed by the decorator's `config=` (its keys
        win), then defaults, and checked against the kernel; without one: the decorator's `config=`, else
        the config the first call's autotuning chose (autotune/tuner.py), else `configs[0]`, else
        the default config (which plans candidates until one fits VMEM).
        `to_code`, `plan`, `compile_config` and a plain call all come here.
        """
        if config is not None:
            config = as_config(config)
            self.kernel.note_ignored_keys(config.ignored_keys)
            if self.kernel.config is not None:  # a partial config completes the decorator's
                config = Config({**self.kernel.config, **config})
            return self.config_spec.normalize(config)
        if self._resolved is None and self.kernel.declared_config is not None:
            self._resolved = self.config_spec.normalize(self.kernel.declared_config)
        if self._resolved is not None:
            return self._resolved
        chip = default_chip()  # the default fits the chip planned for (its VMEM, its cost figures)
        if chip not in self._defaults:
            self._defaults[chip] = self.config_spec.normalize(self.config_spec.default_config())
        return self._defaults[chip]

    @with_ignored_warnings
    def plan(self, config: Config | dict | None = None, chip: str | None = None,
             specs: list[ArgSpec] | None = None, resolved: bool = False) -> KernelPlan:
        """The schedule decisions for `config` (the resolved config if None; `resolved`:
        already completed and checked, at `specs`' sizes)."""
        config = config if resolved else self.resolve_config(config)
        chip = chip or default_chip()
        key = (config.key(), chip, self.kernel.settings.dot_precision)
        if specs is None and key in self._plans:
            return self._plans[key]
        tracer = self._trace(config.block_sizes, specs, config)
        plan = build_plan(tracer.ir, PlanTarget(config, chip, chip_info(chip), self.kernel.settings.dot_precision))
        if specs is None:
            self._plans[key] = plan
        return plan

    @property
    def dynamic(self) -> bool:
        """Whether some size is symbolic (static_shapes=False with a dimension of 2 or more)."""
        return bool(size_env(self.specs, self.specs))

    @with_ignored_warnings
    def to_code(self, config: Config | dict | None = None, chip: str | None = None,
                sizes: dict[str, int] | None = None) -> str:
        """The generated Pallas module for `config` (with none: the module a plain call runs);
        with dynamic shapes, `sizes` (of the dynamic dims) picks the bucket member to plan at."""
        specs = specs_at(self.specs, sizes) if sizes else None
        return generate_module(self.plan(config, chip, specs=specs))

    @with_ignored_warnings
    def compile_config(self, config: Config | dict | None = None,
                       sizes: dict[str, int] | None = None) -> CompiledKernel:
        """The compiled variant for `config`; with dynamic shapes, the one serving `sizes`
        (the dynamic dimensions' values; default: those this kernel was bound with)."""
        if not self.dynamic:
            config = self.resolve_config(config)
            key = _compile_key(config)
            compiled = self._compiled.get(key)
            if compiled is None:
                plan = self.plan(config)
                compiled = CompiledKernel(self, config, generate_module(plan), plan.ir.result, plan.range_checks,
                                          narrowed=plan.narrowed_arguments, widened=plan.widened_outputs,
                                          chip=plan.chip, arithmetic=plan.scalar_arithmetic)
                self._compiled[key] = compiled
            return compiled
        given = config
        sizes = dict(sizes) if sizes is not None else size_env(self.specs, self.specs)
        at_bound_sizes = sizes == size_env(self.specs, self.specs)
        # The config that runs at these exact sizes, once found: a call at the same sizes
        # resolves nothing again (resolving traces and plans the kernel).
        memo = (None if given is None else as_config(given).key(), tuple(sorted(sizes.items())), default_chip())
        known = self._config_at.get(memo)
        if known is not None:
            return self._variant(known, sizes)
        try:
            config = self.resolve_config(given)
            compiled = self._variant(config, sizes)
        except (exc.InvalidConfig, exc.VmemOverflow):
            if at_bound_sizes:
                raise
            # The config was resolved at the sizes this kernel was bound with; a default
            # chosen there (or a check of an explicit one) need not hold at these sizes.
            config = self._resolve_at(given, sizes)
            compiled = self._variant(config, sizes)
        if len(self._config_at) >= _CONFIGS_AT_SIZES:
            del self._config_at[next(iter(self._config_at))]  # the oldest
        self._config_at[memo] = config
        return compiled

    def _variant(self, config: Config, sizes: dict[str, int]) -> CompiledKernel:
        """The compiled variant of `config` whose guards `sizes` satisfy (dynamic shapes),
        compiled if there is none."""
        key = _compile_key(config)
        for (config_key, guards), compiled in self._compiled.items():
            if config_key == key and guards.hold(sizes):
                return compiled
        return self._compile_variant(config, key, sizes)

    def _resolve_at(self, config: Config | dict | None, sizes: dict[str, int]) -> Config:
        """`resolve_config` against the config space traced at `sizes` (dynamic shapes)."""
        specs = specs_at(self.specs, sizes)
        declared = self.kernel.declared_config
        discovery = self._trace(None if declared is None else declared.block_sizes, specs, declared)
        space = ConfigSpec(discovery.ir, validate=lambda c: self.plan(space.normalize(c), specs=specs,
                                                                      resolved=True),
                           tunables=discovery.tunables)
        if config is not None:
            config = as_config(config)
            if self.kernel.config is not None:
                config = Config({**self.kernel.config, **config})
            return space.normalize(config)
        return space.normalize(declared if declared is not None else space.default_config())

    def _compile_variant(self, config: Config, key: tuple, sizes: dict[str, int]) -> CompiledKernel:
        plans = []

        def generate(specs):
            plans.append(self.plan(config, specs=specs, resolved=True))
            return generate_module(plans[-1])

        code, guards = generate_variant(generate, self.specs, sizes, self.fn.__name__)
        plan = plans[0]
        compiled = CompiledKernel(self, config, code, plan.ir.result, plan.range_checks, sizes,
                                  narrowed=plan.narrowed_arguments, widened=plan.widened_outputs,
                                  arithmetic=plan.scalar_arithmetic)
        compiled.guards = guards
        self._compiled[(key, guards)] = compiled
        return compiled

    def sizes_of(self, args: tuple, kwargs: dict | None = None) -> dict[str, int]:
        """The dynamic dimensions' sizes in a call's arguments (empty with static shapes)."""
        values = self.kernel.bind_arguments(tuple(args), kwargs or {})
        return size_env(self.specs, self.kernel._arg_specs(values))

    def _default_compiled(self, args: tuple = (), kwargs: dict | None = None) -> CompiledKernel:
        if self.dynamic:  # the variant whose guards these sizes satisfy
            sizes = self.sizes_of(args, kwargs)
            default = self._default
            if default is not None and default.guards.hold(sizes):
                return default
            if default is None:
                note_untuned(self)  # autotune/tuner.py: dynamic shapes are not tuned, said once
            self._default = self.compile_config(None, sizes)
            return self._default
        if self._default is None:
            if self._resolved is None and wants_tuning(self):  # autotune/tuner.py
                self._resolved = (traced_config(self) if is_traced(args, kwargs or {})
                                  else tuned_config(self, args, kwargs or {}))
            self._default = self.compile_config()
        return self._default

    @with_ignored_warnings
    def ensure_config_exists(self, args: tuple, kwargs: dict | None = None) -> Config:
        """Helion's: choose (tune, where the kernel tunes) and compile the config a call with
        `args` runs, without running it; the config. A config the kernel cannot take raises
        here, as it would at the call."""
        return self._default_compiled(tuple(args), kwargs).config

    @with_ignored_warnings
    def autotune(self, args: tuple, kwargs: dict | None = None, **options: Any):
        """Search this signature's configs for `args` (see `autotune.tuner.autotune`); returns
        the `SearchResult` without changing the config calls run."""
        return autotune(self, tuple(args), kwargs, **options)

    @with_ignored_warnings
    def tune_for_calls(self, args: tuple, force: bool = True, effort: str | None = None) -> Config:
        """`Kernel.autotune`: the searched (or, without `force`, cached) config for `args`,
        cached and run by this signature's later calls."""
        chosen = searched_config(self, args, {}, cache_fields(self), effort=effort) if force \
            else tuned_config(self, args, {})
        self._resolved = self.resolve_config(chosen or self.config_spec.default_config())
        self._default = None  # compiled again at the chosen config by the next call
        return self._resolved

    @with_ignored_warnings
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._default_compiled(args, kwargs)(*args, **kwargs)

    @with_ignored_warnings
    def run_jax(self, *args: Any, **kwargs: Any) -> Any:
        return self._default_compiled(args, kwargs).run_jax(args, kwargs)


def _compile_key(config: Config) -> tuple:
    """A compiled variant's key within its BoundKernel: the config, the chip it is planned
    for, and the interpret settings (cores, race detection) loaded into its module."""
    return (config.key(), default_chip(), repr(interpret_params()))
