"""`Kernel` (the decorated function), `BoundKernel` (one signature), `CompiledKernel`."""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import sys
import warnings
from typing import Any, Callable

import jax
import jax.numpy as jnp
import torch

from .. import exc
from .. import language as hl
from ..autotune import ConfigSpec
from ..autotune.settings import parse_settings
from ..codegen import generate_module
from ..config import Config, as_config
from ..frontend import ArgSpec, Tracer, source
from ..frontend.op_recorder import check_dtype
from ..ir import TensorSymbol, remote_nodes, walk_nodes
from ..plan import KernelPlan, PlanTarget, build_plan
from ..reference import REF_ENV, run_reference
from .chips import chip_info, default_chip
from .convert import to_jax, torch_dtype_of, tree_to_torch
from .code_files import CODE_DIR_ENV, _write_code, code_dir, load_module  # noqa: F401 (re-exported)
from .dynamic import SizeGuards, bucket, generate_variant, size_env, specs_at, symbolic_specs
from .interpret import interpret_params, interpreter_reports
from ..autotune.tuner import autotune, should_tune, tuned_config

PRINT_ENV = "PALLASITE_PRINT_CODE"
_CONFIGS_AT_SIZES = 1024  # sizes whose resolved config a dynamic BoundKernel remembers


class Kernel:
    """A kernel function compiled per argument signature and config."""

    def __init__(self, fn: Callable, *, config: Any = None, configs: Any = None,
                 static_shapes: bool = True, autotune_effort: str | None = None,
                 backend: str = "pallas", use_default_config: bool = False,
                 print_output_code: bool = False, ref_mode: bool = False, collective_id: int | None = None,
                 **settings: Any):
        """`ref_mode=True` runs every call eagerly in PyTorch instead of compiling (see
        `pallasite.reference`); so does the `PALLASITE_REF=1` environment variable.
        `collective_id` fixes the barrier semaphore id of a kernel using `hl.remote_barrier`
        (default: derived from the kernel's file and name; device loop i uses id + i)."""
        if backend != "pallas":
            raise exc.InvalidConfig(f"backend={backend!r}: pallasite has one backend, 'pallas'.")
        if not isinstance(static_shapes, bool):
            raise exc.InvalidConfig(f"static_shapes={static_shapes!r}: expected True or False.")
        if not isinstance(ref_mode, bool):
            raise exc.InvalidConfig(f"ref_mode={ref_mode!r}: expected True or False.")
        # Helion's tuning settings (autotune/settings.py); use_default_config skips tuning.
        self.tune = parse_settings("none" if use_default_config else autotune_effort, settings)
        source.register_tunables_of(fn)  # hl.register_tunable names become config keys
        if collective_id is not None and (isinstance(collective_id, bool) or not isinstance(collective_id, int)
                                          or not 0 <= collective_id < 2**15):
            raise exc.InvalidConfig(f"collective_id={collective_id!r}: expected an int in [0, 32768) "
                                    "(barrier ids are int16).")
        self.collective_id = collective_id
        self.fn = fn
        self.config = as_config(config) if config is not None else None
        self.configs = [as_config(c) for c in (configs or [])]
        self.autotune_effort = self.tune.effort  # print_output_code: Helion's, prints the module
        self.print_output_code = bool(print_output_code)
        self.ref_mode = ref_mode
        self.static_shapes = static_shapes  # False: one variant per size bucket (runtime/dynamic.py)
        self._signature = inspect.signature(fn)
        self._params = list(self._signature.parameters.values())
        self._specialized: set[str] = set()
        self._bound: dict[tuple, BoundKernel] = {}
        self._free_names: tuple[str, ...] | None = None
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__

    def __repr__(self) -> str:
        return f"<pallasite.Kernel {self.fn.__name__}>"

    @property
    def declared_config(self) -> Config | None:
        """The config the decorator names (`config=`, else the first of `configs=`), if any."""
        return self.config or (self.configs[0] if self.configs else None)

    # ------------------------------------------------------------ binding --

    def _bind_arguments(self, args: tuple, kwargs: dict) -> list[Any]:
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as err:
            raise exc.KernelArgumentError(f"{self.fn.__name__}(): {err}") from None
        bound.apply_defaults()
        return list(bound.arguments.values())

    def _arg_specs(self, values: list[Any]) -> list[ArgSpec]:
        specs = []
        for param, value in zip(self._params, values):
            constexpr = param.annotation is hl.constexpr or param.annotation == "hl.constexpr"
            if _is_python_scalar_in_jit(value) and not constexpr:
                # `jax.jit(kernel.jax_fn)(x, 2.0)` traces the Python scalar; it stays a scalar.
                python_type = float if jnp.issubdtype(value.dtype, jnp.floating) else int
                specs.append(ArgSpec("scalar", python_type=python_type, value=_concrete(value, python_type)))
            elif isinstance(value, (torch.Tensor, jax.Array)):
                dtype = value.dtype if isinstance(value, torch.Tensor) else torch_dtype_of(value)
                try:
                    check_dtype(dtype, f"Argument '{param.name}'")
                except exc.UnsupportedDtype as err:
                    raise exc.KernelArgumentError(err.message) from None
                specs.append(ArgSpec("tensor", tuple(value.shape), dtype))
            elif isinstance(value, (int, float)) and not isinstance(value, bool) and not constexpr:
                specs.append(ArgSpec("scalar", python_type=type(value), value=value))
            elif isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
                raise exc.KernelArgumentError(
                    f"Argument '{param.name}' is a {type(value).__name__} of tensors; pass tensors "
                    "as separate arguments."
                )
            else:
                try:
                    hash(value)
                except TypeError:
                    raise exc.KernelArgumentError(
                        f"Argument '{param.name}' of type {type(value).__name__} is not a tensor, "
                        "a number or a hashable constant."
                    ) from None
                specs.append(ArgSpec("const", value=value))
        return specs

    def _key(self, specs: list[ArgSpec], captured: dict[str, ArgSpec]) -> tuple:
        key = []
        for param, spec in zip(self._params, specs):
            if spec.kind == "tensor":
                shape = spec.shape if self.static_shapes else tuple(bucket(extent) for extent in spec.shape)
                key.append((shape, spec.dtype))
            elif spec.kind == "scalar":
                key.append((spec.python_type, spec.value) if param.name in self._specialized else spec.python_type)
            else:
                key.append(("const", type(spec.value), spec.value))
        key.extend(("captured", name, spec.shape, spec.dtype) for name, spec in captured.items())
        return tuple(key)

    # ----------------------------------------------------- captured tensors --

    def captured_tensors(self) -> dict[str, Any]:
        """The tensors the kernel reads by name from its enclosing scope (module globals,
        closure variables) without taking them as parameters, as those names are bound now.

        They are implicit arguments: every call reads each name again, so a rebound
        global is seen by the next call, and its shape and dtype are part of the
        signature (a new one compiles a new variant). A tensor reached another way
        (`self.weight`, `CONFIG["w"]`, inside a helper function) is not captured;
        using it is an `exc.UnsupportedOperation` that says to pass it.
        """
        if self._free_names is None:
            self._free_names = source.free_names(source.function_ast(self.fn)[0])
        cells = dict(zip(self.fn.__code__.co_freevars, self.fn.__closure__ or ()))
        found = {}
        for name in self._free_names:
            if name in cells:
                try:
                    value = cells[name].cell_contents
                except ValueError:  # a closure variable not assigned yet
                    continue
            else:
                value = self.fn.__globals__.get(name)
            if isinstance(value, (torch.Tensor, jax.Array)):
                found[name] = value
        return found

    def _captured_specs(self, captured: dict[str, Any]) -> dict[str, ArgSpec]:
        specs = {}
        for name, value in captured.items():
            dtype = value.dtype if isinstance(value, torch.Tensor) else torch_dtype_of(value)
            try:
                check_dtype(dtype, f"Tensor '{name}', which the kernel reads from its enclosing scope,")
            except exc.UnsupportedDtype as err:
                raise exc.KernelArgumentError(err.message) from None
            specs[name] = ArgSpec("tensor", tuple(value.shape), dtype)
        return specs

    def bind(self, args: tuple, kwargs: dict | None = None) -> BoundKernel:
        """The kernel specialized to these arguments' shapes, dtypes and constants (and
        those of the tensors it captures, see `captured_tensors`)."""
        values = self._bind_arguments(tuple(args), kwargs or {})
        specs = self._arg_specs(values)
        captured = self._captured_specs(self.captured_tensors())
        key = self._key(specs, captured)
        bound = self._bound.get(key)
        if bound is None:
            if not self.static_shapes:
                specs = symbolic_specs([p.name for p in self._params], specs)
            bound = BoundKernel(self, specs, captured)
            if bound.specialized - self._specialized:
                self._specialized |= bound.specialized
                key = self._key(specs, captured)
            self._bound[key] = bound
        return bound

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _for_user(self._call, args, kwargs)

    def _call(self, *args: Any, **kwargs: Any) -> Any:
        if self.ref_mode or os.environ.get(REF_ENV, "0") not in ("", "0"):
            return run_reference(self, args, kwargs)
        bound = self.bind(args, kwargs)
        if bound.remote:
            raise _needs_shard_map(self.fn.__name__)
        return bound(*args, **kwargs)

    @property
    def cache_size(self) -> int:
        """How many compiled variants this kernel holds (shapes, dtypes, constants and
        configs; a runtime scalar's value never makes a new one)."""
        return sum(len(bound._compiled) for bound in self._bound.values())

    def reset(self) -> None:
        """Forget every bound and compiled variant (the next call traces again)."""
        self._bound.clear()
        self._specialized.clear()

    @property
    def jax_fn(self) -> Callable:
        """The kernel on `jax.Array`s, usable inside `jax.jit`.

        Returns the kernel's result; a kernel that updates arguments in place
        returns `(result, {name: new_value})` since JAX arrays are immutable.
        """

        def call(*args: Any, **kwargs: Any) -> Any:
            return _for_user(lambda *a, **k: self.bind(a, k).run_jax(*a, **k), args, kwargs)

        call.__name__ = f"{self.fn.__name__}_jax"
        return call


class BoundKernel:
    """One kernel at one argument signature: its config space, code and compiled variants."""

    def __init__(self, kernel: Kernel, specs: list[ArgSpec], captured: dict[str, ArgSpec] | None = None):
        self.kernel = kernel
        self.specs = specs
        self.captured = captured or {}  # implicit arguments: tensors read from the enclosing scope
        # The discovery trace learns which block sizes exist; a declared config's sizes make
        # it trace the kernel as it will run (shapes written for that block size).
        declared = kernel.declared_config
        discovery = self._trace(None if declared is None else declared.block_sizes, config=declared)
        self.specialized = set(discovery.specialized)
        # remote copies or barriers: the kernel runs on every device of a mesh (jax_fn under shard_map)
        self.remote = any(remote_nodes(walk_nodes(call.loop.body)) for call in discovery.ir.device_loops)
        self.config_spec = ConfigSpec(discovery.ir, validate=self.plan, tunables=discovery.tunables)
        self._compiled: dict[tuple, CompiledKernel] = {}
        self._default: CompiledKernel | None = None
        self._resolved: Config | None = None
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
        tracer = Tracer(self.kernel.fn, specs or self.specs, choose, self.captured, tunables)
        tracer.ir = tracer.run()
        tracer.ir.collective_id = self.kernel.collective_id
        return tracer

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
            if self.kernel.config is not None:  # a partial config completes the decorator's
                config = Config({**self.kernel.config, **config})
            return self.config_spec.normalize(config)
        if self._resolved is None:
            chosen = self.kernel.declared_config
            if chosen is None:
                chosen = self.config_spec.default_config()
            self._resolved = self.config_spec.normalize(chosen)
        return self._resolved

    def plan(self, config: Config | dict | None = None, chip: str | None = None,
             specs: list[ArgSpec] | None = None, resolved: bool = False) -> KernelPlan:
        """The schedule decisions for `config` (the resolved config if None; `resolved`:
        already completed and checked, at `specs`' sizes)."""
        config = config if resolved else self.resolve_config(config)
        chip = chip or default_chip()
        tracer = self._trace(config.block_sizes, specs, config)
        return build_plan(tracer.ir, PlanTarget(config, chip, chip_info(chip)))

    @property
    def dynamic(self) -> bool:
        """Whether some size is symbolic (static_shapes=False with a dimension of 2 or more)."""
        return bool(size_env(self.specs, self.specs))

    def to_code(self, config: Config | dict | None = None, chip: str | None = None,
                sizes: dict[str, int] | None = None) -> str:
        """The generated Pallas module for `config` (with none: the module a plain call runs);
        with dynamic shapes, `sizes` (of the dynamic dims) picks the bucket member to plan at."""
        specs = specs_at(self.specs, sizes) if sizes else None
        return generate_module(self.plan(config, chip, specs=specs))

    def compile_config(self, config: Config | dict | None = None,
                       sizes: dict[str, int] | None = None) -> CompiledKernel:
        """The compiled variant for `config`; with dynamic shapes, the one serving `sizes`
        (the dynamic dimensions' values; default: those this kernel was bound with)."""
        if not self.dynamic:
            config = self.resolve_config(config)
            # Interpret settings (cores, race detection) are loaded into the module: part of the key.
            key = (config.key(), repr(interpret_params()))
            compiled = self._compiled.get(key)
            if compiled is None:
                plan = self.plan(config)
                compiled = CompiledKernel(self, config, generate_module(plan), plan.ir.result, plan.range_checks)
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
        key = (config.key(), repr(interpret_params()))
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
        compiled = CompiledKernel(self, config, code, plan.ir.result, plan.range_checks)
        compiled.guards = guards
        self._compiled[(key, guards)] = compiled
        return compiled

    def sizes_of(self, args: tuple, kwargs: dict | None = None) -> dict[str, int]:
        """The dynamic dimensions' sizes in a call's arguments (empty with static shapes)."""
        values = self.kernel._bind_arguments(tuple(args), kwargs or {})
        return size_env(self.specs, self.kernel._arg_specs(values))

    def _default_compiled(self, args: tuple = (), kwargs: dict | None = None) -> CompiledKernel:
        if self.dynamic:  # the variant whose guards these sizes satisfy
            sizes = self.sizes_of(args, kwargs)
            default = self._default
            if default is not None and default.guards.hold(sizes):
                return default
            self._default = self.compile_config(None, sizes)
            return self._default
        if self._default is None:
            if self._resolved is None and should_tune(self, args, kwargs or {}):
                self._resolved = tuned_config(self, args, kwargs or {})  # autotune/tuner.py
            self._default = self.compile_config()
        return self._default

    def autotune(self, args: tuple, kwargs: dict | None = None, **options: Any):
        """Search this signature's configs for `args` (see `autotune.tuner.autotune`); returns
        the `SearchResult` without changing the config calls run."""
        return autotune(self, tuple(args), kwargs, **options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._default_compiled(args, kwargs)(*args, **kwargs)

    def run_jax(self, *args: Any, **kwargs: Any) -> Any:
        return self._default_compiled(args, kwargs).run_jax(*args, **kwargs)


class CompiledKernel:
    """A generated module loaded and jitted: callable on torch tensors or JAX arrays."""

    def __init__(self, bound: BoundKernel, config: Config, code: str, result_structure: Any = None,
                 range_checks: list | None = None):
        self.bound = bound
        self.range_checks = {check.check_id: check for check in range_checks or ()}
        self.result_structure = result_structure  # the IR's symbols, mirroring the result
        self.config = config
        self.code = code
        self.code_path = _write_code(bound.kernel.fn.__name__, code)
        if bound.kernel.print_output_code or os.environ.get(PRINT_ENV, "0") not in ("", "0"):
            print(f"# pallasite: generated code for {bound.kernel.fn.__name__} ({self.code_path})",
                  file=sys.stderr)
            print(code, file=sys.stderr)
        params = interpret_params()
        if bound.remote and params is not None:
            # Remote copies move their data when started (as a TPU's DMA engine may): with
            # "on_wait", an 8-device ring all-gather here lost a forwarded slot now and then.
            params = dataclasses.replace(params, dma_execution_mode="eager")
        self.module = load_module(code, self.code_path, params)
        self.host_fn = getattr(self.module, bound.kernel.fn.__name__)
        if getattr(self.module, "CHECKS", None) is not None:  # pallasite.range_checked() quotes the lines
            self.module.CHECKS.locations = {i: check.location for i, check in self.range_checks.items()}
        self.mutated_args = self.module.MUTATED_ARGS
        self._jitted = jax.jit(self.host_fn)
        # The host function's parameters: the kernel's, then the captured tensors.
        self._names = [p.name for p in bound.kernel._params] + list(bound.captured)
        specs = [*bound.specs, *bound.captured.values()]
        self._runtime_params = [(i, spec) for i, spec in enumerate(specs) if spec.kind in ("tensor", "scalar")]
        self._param_index = {name: i for i, name in enumerate(self._names)}
        self.draws_seed = getattr(self.module, "RANDOM_SEED_ARGUMENT", False)

    guards: SizeGuards | None = None  # static_shapes=False: the sizes this variant serves

    def _values(self, args: tuple, kwargs: dict) -> list[Any]:
        """The call's arguments, then the current values of the captured tensors."""
        if self.guards is not None and not self.guards.hold(self.bound.sizes_of(args, kwargs)):
            raise exc.KernelArgumentError(
                f"This compiled variant of '{self.bound.kernel.fn.__name__}' (static_shapes=False) was "
                f"built for other sizes than {self.bound.sizes_of(args, kwargs)}; call the kernel itself, "
                "or compile_config(config, bound.sizes_of(args)).")
        values = self.bound.kernel._bind_arguments(args, kwargs)
        if not self.bound.captured:
            return values
        captured = self.bound.kernel.captured_tensors()
        for name, spec in self.bound.captured.items():
            value = captured.get(name)
            if value is None or (tuple(value.shape), value.dtype) != (spec.shape, spec.dtype):
                raise exc.KernelArgumentError(
                    f"'{name}', a tensor the kernel reads from its enclosing scope, was {list(spec.shape)} "
                    f"{spec.dtype} when this variant was compiled and is now "
                    f"{'not a tensor' if value is None else f'{list(value.shape)} {value.dtype}'}; call the "
                    "kernel itself (it compiles per signature), not a compiled variant.")
            values.append(value)
        return values

    def _jax_args(self, values: list[Any]) -> list[Any]:
        out = []
        for i, spec in self._runtime_params:
            value = values[i]
            if isinstance(value, torch.Tensor) and value.device.type == "meta":
                raise exc.KernelArgumentError(
                    f"Argument '{self._names[i]}' is on the meta device: it has no data "
                    "to compute on. Pass a CPU tensor; kernel.bind(args).to_code() and .plan() inspect a "
                    "kernel on meta tensors without running it.")
            if spec.kind == "tensor":
                out.append(to_jax(value) if isinstance(value, torch.Tensor) else value)
            else:
                out.append(jnp.asarray(value, dtype=jnp.int32 if spec.python_type is int else jnp.float32))
        if self.draws_seed:
            out.append(self._draw_seed(out))
        return out

    def _draw_seed(self, args: list[Any]) -> Any:
        """torch.rand_like's seed for one call, from torch's default generator (so
        `torch.manual_seed` reproduces it, and every call draws new numbers)."""
        if any(isinstance(a, jax.core.Tracer) for a in args):
            raise exc.UnsupportedOperation(
                f"Kernel '{self.bound.kernel.fn.__name__}' calls torch.rand_like, whose seed is drawn from "
                "torch's generator on every call; inside jax.jit it would be drawn once, when traced, and "
                "every step would get the same numbers. Pass a seed argument and draw with "
                "hl.rand([tile_m, tile_n], seed=seed) instead.")
        return jnp.asarray(torch.randint(0, 2**31 - 1, ()).item(), dtype=jnp.int32)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        values = self._values(args, kwargs)
        result, mutated = self._checked(self._jitted, self._jax_args(values))
        for name, new_value in zip(self.mutated_args, mutated):
            target = values[self._param_index[name]]
            if isinstance(target, torch.Tensor):
                target.copy_(tree_to_torch(new_value))
        return self._torch_result(result, self.result_structure, values)

    def _torch_result(self, result: Any, structure: Any, values: list[Any]) -> Any:
        """Convert to torch; a returned argument is the caller's own tensor, as in eager PyTorch."""
        if isinstance(structure, TensorSymbol) and structure.origin == "arg":
            original = values[self._param_index[structure.name]]
            if isinstance(original, torch.Tensor):
                return original
        if isinstance(structure, (list, tuple)) and isinstance(result, (list, tuple)):
            return type(result)(self._torch_result(r, s, values) for r, s in zip(result, structure))
        return tree_to_torch(result)

    def _checked(self, fn: Callable, args: list) -> Any:
        """Run `fn` and what interpret mode checks: a data-dependent range outside its
        tensor (the plan's `RangeCheck`s) raises `exc.ShapeMismatch` at the user's line;
        a race the race detector saw, or a DMA never waited, raises `exc.DataRace`."""
        checks = getattr(self.module, "CHECKS", None)
        if self.module.INTERPRET is None:
            return fn(*args)
        with contextlib.ExitStack() as stack:
            found = stack.enter_context(checks.collect()) if checks is not None else []
            reports = stack.enter_context(interpreter_reports())
            try:
                outputs = jax.block_until_ready(fn(*args))
            except jax.errors.JaxRuntimeError:
                if not found:
                    raise
                outputs = None
        if reports and not found:
            what = ("a data race" if any("RACE DETECTED" in r for r in reports)
                    else "a DMA semaphore left non-zero at exit (a copy started and never waited)")
            raise exc.DataRace(
                f"TPU interpret mode's race detector saw {what} in kernel "
                f"'{self.bound.kernel.fn.__name__}' (generated code: {self.code_path}); its result "
                f"cannot be trusted. {len(reports)} report(s); the first:\n{reports[0]}")
        if found:
            check_id, lo, hi, limit = found[0]
            check = self.range_checks[check_id]
            raise exc.ShapeMismatch(check.describe(lo, hi, limit), check.location)
        return outputs

    def run_jax(self, *args: Any, **kwargs: Any) -> Any:
        values = self._values(args, kwargs)
        jax_args = self._jax_args(values)
        if self.bound.remote and not _under_shard_map():
            raise _needs_shard_map(self.bound.kernel.fn.__name__)
        if any(isinstance(a, jax.core.Tracer) for a in jax_args):
            result, mutated = self.host_fn(*jax_args)  # inside the user's jit: checks warn
        else:
            result, mutated = self._checked(self.host_fn, jax_args)
        if self.mutated_args:
            return result, dict(zip(self.mutated_args, mutated))
        return result


DEBUG_ENV = "PALLASITE_DEBUG"


def _under_shard_map() -> bool:
    """Whether JAX is tracing inside a mapped axis (shard_map's body), where remote copies pair up."""
    from jax._src import core as jax_core

    return bool(jax_core.get_axis_env().axis_sizes)


def _needs_shard_map(name: str) -> exc.UnsupportedOperation:
    return exc.UnsupportedOperation(
        f"Kernel '{name}' copies between devices (hl.make_async_remote_copy / hl.remote_barrier), so "
        "it runs on every device of a mesh at once: run kernel.jax_fn on each device's shard under "
        "jax.shard_map, e.g. jax.jit(jax.shard_map(lambda *shards: kernel.jax_fn(*shards), mesh=mesh, "
        "in_specs=..., out_specs=..., check_vma=False)).")


def _for_user(fn: Callable, args: tuple, kwargs: dict) -> Any:
    """Call `fn`; a pallasite error reaches the user without pallasite's own frames (its
    message already names the user's line). `PALLASITE_DEBUG=1` keeps them."""
    try:
        return fn(*args, **kwargs)
    except exc.PallasiteError as err:
        if os.environ.get(DEBUG_ENV, "0") not in ("", "0"):
            raise
        raise err.with_traceback(None) from None


def _is_python_scalar_in_jit(value: Any) -> bool:
    """A 0-d weakly typed JAX value: what `jax.jit` makes of a Python int or float argument."""
    return (isinstance(value, jax.Array) and value.ndim == 0 and getattr(value, "weak_type", False)
            and (jnp.issubdtype(value.dtype, jnp.floating) or jnp.issubdtype(value.dtype, jnp.integer)))


def _concrete(value: Any, python_type: type) -> Any:
    """The Python value of a scalar, or None while it is traced (only hl.specialize needs it)."""
    try:
        return python_type(value)
    except jax.errors.ConcretizationTypeError:
        return None
