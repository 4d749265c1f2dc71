"""`Kernel` (the decorated function) and `BoundKernel` (one signature); `CompiledKernel`
(one generated module, jitted) is in runtime/compiled.py."""
from __future__ import annotations

import inspect
import os
import weakref
from typing import Any, Callable

import jax
import jax.numpy as jnp
import torch

from .. import exc
from .. import language as hl
from ..autotune.settings import parse_settings
from ..config import MEGAKERNEL_KEYS, Config, as_config, ignored_keys_of, kernel_keys_error
from ..frontend import ArgSpec, source
from ..frontend.operands import check_argument_dtype, python_number
from ..reference import REF_ENV, RefMode, run_reference
from ..settings import split_settings
from .convert import narrow_argument, torch_dtype_of
from .code_files import load_module  # noqa: F401 (re-exported for pallasite.testing)
from .dynamic import bucket, symbolic_specs
from .scope import argument_fingerprint, fingerprint, read_scope
from ..frontend.closures import TensorItems, argument_closure_tensors, holds_tensors
from ..naming import SEPARATOR
from ..frontend import host_items
from .compiled import CompiledKernel, _needs_shard_map  # noqa: F401 (CompiledKernel re-exported)
from .bound_kernel import BoundKernel, with_ignored_warnings

DEBUG_ENV = "PALLASITE_DEBUG"



# Every Kernel alive, so `release_compiled_code` can reach the ones a module keeps.
_LIVE_KERNELS: "weakref.WeakSet[Kernel]" = weakref.WeakSet()


def release_compiled_code() -> None:
    """Forget the compiled variants of every live kernel and JAX's own caches, so their
    executables can be freed.

    A compiled XLA CPU program (an interpret-mode kernel) holds ~40 memory mappings of
    its own until it is freed, and Linux caps a process at `vm.max_map_count` (65530 by
    default): a process that compiles a few thousand kernel variants and keeps them all
    (module-level kernels called with many shapes, a test suite) is killed when it
    reaches the cap. The next call of a kernel traces and compiles again.
    """
    for kernel in list(_LIVE_KERNELS):
        kernel.reset()
    jax.clear_caches()


class Kernel:
    """A kernel function compiled per argument signature and config."""

    def __init__(self, fn: Callable, *, config: Any = None, configs: Any = None,
                 static_shapes: bool = True, autotune_effort: str | None = None,
                 backend: str = "pallas", use_default_config: bool = False,
                 print_output_code: bool = False, ref_mode: bool | RefMode = False, collective_id: int | None = None,
                 **settings: Any):
        """`ref_mode=True` (or Helion's `RefMode.EAGER`) runs every call eagerly in PyTorch
        instead of compiling (see `pallasite.reference`); so does the `PALLASITE_REF=1`
        environment variable.
        `collective_id` fixes the barrier semaphore id of a kernel using `hl.remote_barrier`
        (default: derived from the kernel's file and name; device loop i uses id + i)."""
        if backend != "pallas":
            raise exc.InvalidConfig(f"backend={backend!r}: pallasite has one backend, 'pallas'.")
        if not isinstance(static_shapes, bool):
            raise exc.InvalidConfig(f"static_shapes={static_shapes!r}: expected True or False.")
        if isinstance(ref_mode, RefMode):
            ref_mode = ref_mode is RefMode.EAGER
        if not isinstance(ref_mode, bool):
            raise exc.InvalidConfig(f"ref_mode={ref_mode!r}: expected True, False or a pallasite.RefMode.")
        # Helion's other settings (pallasite/settings.py), then its tuning settings
        # (autotune/settings.py); use_default_config skips tuning.
        self.settings, ignored_settings, settings = split_settings(settings)
        self.tune = parse_settings("none" if use_default_config else autotune_effort, settings)
        if collective_id is not None and (isinstance(collective_id, bool) or not isinstance(collective_id, int)
                                          or not 0 <= collective_id < 2**15):
            raise exc.InvalidConfig(f"collective_id={collective_id!r}: expected an int in [0, 32768) "
                                    "(barrier ids are int16).")
        self.collective_id = collective_id
        self.fn = fn
        self.config = as_config(config) if config is not None else None
        self.configs = [as_config(c) for c in (configs or [])]
        # the names `fn` declares with hl.register_tunable (None: a computed name), read once
        self.tunable_names = source.tunable_names_of(fn)
        self._check_config_keys(settings.get("autotune_config_overrides"))
        self._ignored_keys: set[str] = set()
        self._noted_host_lines: set[Any] = set()
        with exc.ignoring(self.settings.ignore_warnings):
            self.note_ignored_keys((*ignored_settings, *ignored_keys_of(
                [self.config, *self.configs, settings.get("autotune_config_overrides"), *self.tune.seed_configs])))
        self.autotune_effort = self.tune.effort  # print_output_code: Helion's, prints the module
        self.print_output_code = bool(print_output_code)
        self.ref_mode = ref_mode
        self.static_shapes = static_shapes  # False: one variant per size bucket (runtime/dynamic.py)
        self._signature = inspect.signature(fn)
        self.params = list(self._signature.parameters.values())
        self._specialized: set[str] = set()
        # elements host code reads with `.item()`, by argument (frontend/host_items.py)
        self._item_reads: dict[str, dict[tuple[int, ...], Any]] = {}  # argument -> index -> the reading line
        self._bound: dict[tuple, BoundKernel] = {}
        self._scope_reads: source.ScopeReads | None = None
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        _LIVE_KERNELS.add(self)

    def __repr__(self) -> str:
        return f"<pallasite.Kernel {self.fn.__name__}>"

    @property
    def name(self) -> str:
        """The kernel function's name (Helion's `Kernel.name`)."""
        return self.fn.__name__

    def _check_config_keys(self, overrides: Any) -> None:
        """Refuse, at decoration, a config key that is neither built in nor one of the kernel's
        `tunable_names` (a `Config` holds any such key until it meets its kernel, as Helion's does)."""
        if self.tunable_names is None:  # a computed tunable name: BoundKernel's config_spec checks at the call
            return
        given = [("config=", self.config), *((f"configs[{i}]=", c) for i, c in enumerate(self.configs)),
                 ("autotune_config_overrides=", overrides),
                 *(("autotune_seed_configs=", c) for c in self.tune.seed_configs)]
        for where, config in given:
            problem = None if config is None else kernel_keys_error(config, self.tunable_names)
            if problem:
                raise exc.InvalidConfig(f"{where}{config!r}: {problem}")

    def note_ignored_keys(self, keys: Any) -> None:
        """Warn once per kernel about the GPU-only config keys and settings it ignores (a
        later config naming new ones warns about those)."""
        new = sorted(set(keys) - self._ignored_keys)
        if new:
            self._ignored_keys.update(new)
            megakernel = [key for key in new if key in MEGAKERNEL_KEYS]
            gpu = [key for key in new if key not in MEGAKERNEL_KEYS]
            if gpu:
                exc.warn_user(f"pallasite kernel '{self.fn.__name__}' ignores {', '.join(gpu)}: Helion settings of "
                              "GPU kernels (warps, pipeline stages, pointer indexing, persistent programs, ...), "
                              "which a TPU kernel has no such choice of.", exc.IgnoredConfigKeys)
            if megakernel:
                exc.warn_user(f"pallasite kernel '{self.fn.__name__}' ignores {', '.join(megakernel)}: knobs of "
                              "Helion's Pallas megakernel (several device loops in one pallas_call, weight rings "
                              "streamed across them); pallasite runs each device loop as its own pallas_call, "
                              "so they have nothing to choose.", exc.IgnoredConfigKeys)

    def note_host_computations(self, ir: Any) -> None:
        """Say once per kernel and source line where host code computes on whole tensors
        (`KernelIR.host_computations`): that work is not fused into the kernel
        (`exc.TensorOperationInWrapper`, which `ignore_warnings=[...]` silences)."""
        lines = [step.location for step in ir.host_computations()
                 if step.location is not None and step.location not in self._noted_host_lines]
        lines = list(dict.fromkeys(lines))
        if lines:
            self._noted_host_lines.update(lines)
            where = "; ".join(str(line) for line in lines)
            exc.warn_user(f"pallasite kernel '{self.fn.__name__}': host code (outside the hl.tile/hl.grid loops) "
                          f"computes on whole tensors at {where}: each such op runs as its own XLA op beside "
                          "the kernel's pallas_call, not fused into it. Move the work into a device loop, or "
                          "silence this with ignore_warnings=[pallasite.exc.TensorOperationInWrapper].",
                          exc.TensorOperationInWrapper)

    @property
    def declared_config(self) -> Config | None:
        """The config the decorator names (`config=`, else the first of `configs=`), if any."""
        return self.config or (self.configs[0] if self.configs else None)

    # ------------------------------------------------------------ binding --

    def check_narrowed_arguments(self, args: tuple, kwargs: dict, config: Any = None) -> None:
        """Reference mode's int64 checks, the compiler's: the plan's narrowed arguments (values
        past int32, integer steps that could leave it: `exc.KernelArgumentError`) and its
        refusals of int64 values int32 could not hold (`exc.UnsupportedDtype`), so reference
        mode never answers with numbers int32 wrapped. A kernel the compiler cannot plan for
        another reason runs in reference mode unchecked."""
        values = self.bind_arguments(tuple(args), kwargs)
        listed = self.argument_closure_tensors(values)  # a list argument's tensors too
        if not any(isinstance(v, torch.Tensor) and v.dtype == torch.int64 for v in [*values, *listed.values()]):
            return
        try:
            bound = self.bind(tuple(args), kwargs)
            plan = bound.plan(config)
        except (exc.UnsupportedDtype, exc.KernelArgumentError, exc.InvalidConfig):
            raise
        except exc.PallasiteError:
            return
        tensors = {**read_scope(self.fn, self.scope_reads())[0], **listed}
        everything = [*values, *(tensors.get(name) for name in bound.captured)]  # the host function's order
        scalars = {param.name: value for param, value in zip(self.params, values)
                   if isinstance(value, int) and not isinstance(value, bool)}
        for argument in plan.narrowed_arguments:
            if argument.position < len(everything) and everything[argument.position] is not None:
                narrow_argument(everything[argument.position], argument, scalars)

    def bind_arguments(self, args: tuple, kwargs: dict) -> list[Any]:
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as err:
            raise exc.KernelArgumentError(f"{self.fn.__name__}(): {err}") from None
        bound.apply_defaults()
        return [python_number(value) for value in bound.arguments.values()]

    def _arg_specs(self, values: list[Any]) -> list[ArgSpec]:
        specs = []
        for param, value in zip(self.params, values):
            constexpr = (param.annotation is hl.constexpr or param.annotation == "hl.constexpr"
                         or isinstance(value, hl.constexpr))
            value = hl.constexpr_value(value)
            if _is_python_scalar_in_jit(value) and not constexpr:
                # `jax.jit(kernel.jax_fn)(x, 2.0)` traces the Python scalar; it stays a scalar.
                python_type = float if jnp.issubdtype(value.dtype, jnp.floating) else int
                specs.append(ArgSpec("scalar", python_type=python_type, value=_concrete(value, python_type)))
            elif isinstance(value, (torch.Tensor, jax.Array)):
                dtype = value.dtype if isinstance(value, torch.Tensor) else torch_dtype_of(value)
                try:
                    check_argument_dtype(dtype, f"Argument '{param.name}'")
                except exc.UnsupportedDtype as err:
                    raise exc.KernelArgumentError(err.message) from None
                items = self._elements_read(param.name, value)
                contiguous = not isinstance(value, torch.Tensor) or value.is_contiguous()
                grad = isinstance(value, torch.Tensor) and value.requires_grad
                specs.append(ArgSpec("tensor", tuple(value.shape), dtype, items=items, contiguous=contiguous,
                                     requires_grad=grad))
            elif isinstance(value, int) and not isinstance(value, bool) and not -2**31 <= value < 2**31:
                # no int32 scalar holds it: a constant of the variant, as hl.specialize makes it (a
                # hash's multiplier `h * s`: ring ops use it wrapped, as torch does beside int32)
                if not -2**63 <= value < 2**63:
                    raise exc.KernelArgumentError(
                        f"Argument '{param.name}' is {value}, past int64: torch refuses such a number beside "
                        "a tensor too.")
                specs.append(ArgSpec("const", value=value))
            elif isinstance(value, (int, float)) and not isinstance(value, bool) and not constexpr:
                specs.append(ArgSpec("scalar", python_type=type(value), value=value))
            elif holds_tensors(value):  # each tensor an input of its own (frontend/closures.py)
                if any(isinstance(item, (list, tuple, dict)) for item in value):
                    raise exc.KernelArgumentError(
                        f"Argument '{param.name}' is a {type(value).__name__} of tensors holding another "
                        "sequence; pass a flat list of tensors (one level), or separate arguments.")
                specs.append(ArgSpec("const", value=TensorItems.of(value)))
            else:
                try:
                    if not isinstance(value, list):  # a list (`normalized_shape`) keys by its contents
                        hash(value)
                except TypeError:
                    raise exc.KernelArgumentError(
                        f"Argument '{param.name}' of type {type(value).__name__} is not a tensor, "
                        "a number or a hashable constant."
                    ) from None
                specs.append(ArgSpec("const", value=value))
        return specs

    def _key(self, specs: list[ArgSpec], captured: dict[str, ArgSpec], constants: tuple = ()) -> tuple:
        """The variant key: everything the trace reads (docs/ARCHITECTURE.md, "The variant key")."""
        key = []
        for param, spec in zip(self.params, specs):
            if spec.kind == "tensor":
                shape = spec.shape if self.static_shapes else tuple(bucket(extent) for extent in spec.shape)
                key.append((shape, spec.dtype, spec.items, spec.contiguous, spec.requires_grad))
            elif spec.kind == "scalar":
                # by fingerprint: 0.0 and -0.0 are two constants (1 / s), and nan is one (trial R)
                key.append((spec.python_type, fingerprint(spec.value)) if param.name in self._specialized
                           else spec.python_type)
            else:
                key.append(("const", argument_fingerprint(spec.value)))
        key.extend(("captured", name, spec.shape, spec.dtype, spec.items) for name, spec in captured.items())
        key.append(("constants", constants))
        return tuple(key)

    # ----------------------------------------------------- captured tensors --

    def captured_tensors(self, args: tuple | None = None, kwargs: dict | None = None) -> dict[str, Any]:
        """The tensors the kernel reads by name from its enclosing scope (module globals,
        closure variables) without taking them as parameters, as those names are bound now;
        with a call's `args`, also those its function arguments close over (an epilogue's
        `bias`, as `epilogue__bias`: `frontend/closures.py`).

        They are implicit arguments: every call reads each name again, so a rebound
        global is seen by the next call, and its shape and dtype are part of the
        signature (a new one compiles a new variant). A tensor reached another way
        (`self.weight`, `CONFIG["w"]`, inside a helper function) is not captured;
        using it is an `exc.UnsupportedOperation` that says to pass it.
        """
        tensors = read_scope(self.fn, self.scope_reads(), constants=False)[0]
        if args is not None:
            tensors.update(self.argument_closure_tensors(self.bind_arguments(tuple(args), kwargs or {})))
        return tensors

    def argument_closure_tensors(self, values: list[Any]) -> dict[str, Any]:
        """The tensors the function arguments among a call's `values` close over (implicit
        inputs, by `frontend/closures.py:captured_name`)."""
        return argument_closure_tensors([p.name for p in self.params], values)

    def scope_reads(self) -> source.ScopeReads:
        """The free names the kernel reads and how (the source is parsed once)."""
        if self._scope_reads is None:
            self._scope_reads = source.scope_reads(source.function_ast(self.fn)[0])
        return self._scope_reads

    def _captured_specs(self, captured: dict[str, Any]) -> dict[str, ArgSpec]:
        specs = {}
        for name, value in captured.items():
            dtype = value.dtype if isinstance(value, torch.Tensor) else torch_dtype_of(value)
            parameter, _, item = name.partition(SEPARATOR)
            what = (f"Item {item.removeprefix('item_')} of argument '{parameter}'" if item.startswith("item_")
                    else f"Tensor '{name}', which the kernel reads from its enclosing scope,")
            try:
                check_argument_dtype(dtype, what)
            except exc.UnsupportedDtype as err:
                raise exc.KernelArgumentError(err.message) from None
            specs[name] = ArgSpec("tensor", tuple(value.shape), dtype, items=self._elements_read(name, value))
        return specs

    def _elements_read(self, name: str, value: Any) -> tuple:
        """The elements of tensor argument `name` host code reads with `.item()`: (index, value)."""
        reads = self._item_reads.get(name, {})
        return tuple((index, host_items.read_element(value, index, name, reads[index])) for index in sorted(reads))

    @with_ignored_warnings
    def bind(self, args: tuple, kwargs: dict | None = None, config: Config | None = None) -> BoundKernel:
        """The kernel specialized to these arguments' shapes, dtypes and constants, those of
        the tensors it captures (see `captured_tensors`) and the values of the other globals
        and closure variables it reads (runtime/scope.py). `config`: the one the caller will
        run, whose block sizes the first trace uses (else the kernel's own, else defaults):
        a body written for a block size traces as it will run."""
        return self._bind(tuple(args), kwargs or {}, read_scope(self.fn, self.scope_reads()), config)

    def _bind(self, args: tuple, kwargs: dict, scope: tuple[dict[str, Any], tuple],
              config: Config | None = None) -> BoundKernel:
        """`bind` given the scope read for this call (`read_scope`: captured tensors, constants)."""
        values = self.bind_arguments(args, kwargs)
        tensors, constants = scope
        # An epilogue's tensors join this call's captured tensors (`scope[0]`, read for this
        # call only), so the run that follows passes them too.
        tensors.update(self.argument_closure_tensors(values))
        while True:
            specs = self._arg_specs(values)
            captured = self._captured_specs(tensors)  # a list item's elements read (`group[1][-1].item()`)
            key = self._key(specs, captured, constants)
            bound = self._bound.get(key)
            if bound is not None:
                return bound
            if not self.static_shapes:
                specs = symbolic_specs([p.name for p in self.params], specs)
            try:
                bound = BoundKernel(self, specs, captured, constants, discovery=config)
                break
            except host_items.ItemNeeded as needed:  # an element host code reads: into the key
                self._item_reads.setdefault(needed.argument, {})[needed.index] = needed.location
        if bound.specialized - self._specialized:
            self._specialized |= bound.specialized
            key = self._key(specs, captured, constants)
        self._bound[key] = bound
        return bound

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _for_user(self._call, args, kwargs)

    @with_ignored_warnings
    def _call(self, *args: Any, **kwargs: Any) -> Any:
        if self.ref_mode or os.environ.get(REF_ENV, "0") not in ("", "0"):
            return run_reference(self, args, kwargs)
        scope = read_scope(self.fn, self.scope_reads())  # once per call: the bind key and the call's tensors
        bound = self._bind(args, kwargs, scope)
        if bound.remote:
            raise _needs_shard_map(self.fn.__name__)
        return bound._default_compiled(args, kwargs).run(args, kwargs, scope[0])

    def autotune(self, args: tuple, force: bool = True, **options: Any) -> Config:
        """Helion's `kernel.autotune(args, force=...)`: search the configs of `args`' signature
        (force=False: a cached choice serves), cache the choice, and make later calls with that
        signature run it; the chosen config (`kernel.bind(args).autotune(args)` returns the
        whole `SearchResult` instead)."""
        return _for_user(lambda: self.bind(tuple(args)).tune_for_calls(tuple(args), force, **options), (), {})

    @property
    def cache_size(self) -> int:
        """How many compiled variants this kernel holds (shapes, dtypes, constants and
        configs; a runtime scalar's value never makes a new one)."""
        return sum(len(bound._compiled) for bound in self._bound.values())

    def reset(self) -> None:
        """Forget every bound and compiled variant (the next call traces again)."""
        self._bound.clear()
        self._specialized.clear()
        self._item_reads.clear()

    @property
    def jax_fn(self) -> Callable:
        """The kernel on `jax.Array`s, usable inside `jax.jit`.

        Returns the kernel's result; a kernel that updates arguments in place
        returns `(result, {name: new_value})` since JAX arrays are immutable.
        """

        def run(*args: Any, **kwargs: Any) -> Any:
            scope = read_scope(self.fn, self.scope_reads())
            with exc.ignoring(self.settings.ignore_warnings):
                bound = self._bind(args, kwargs, scope)
                return bound._default_compiled(args, kwargs).run_jax(args, kwargs, scope[0])

        def call(*args: Any, **kwargs: Any) -> Any:
            return _for_user(run, args, kwargs)

        call.__name__ = f"{self.fn.__name__}_jax"
        return call


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
