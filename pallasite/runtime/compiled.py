"""`CompiledKernel`: one generated module loaded and jitted, callable on torch tensors
or JAX arrays (split from runtime/kernel.py, which binds and compiles it)."""
from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from typing import Any, Callable, Protocol

import jax
import jax.numpy as jnp
import torch

from .. import exc
from ..config import Config
from ..ir import TensorSymbol
from ..plan.bounds import check_scalar_arithmetic
from .code_files import _write_code, host_function, load_module
from .convert import narrow_argument, to_jax, tree_to_torch
from .dynamic import SizeGuards
from .interpret import (compiler_options, cores_compiled_alike, interpret_params, interpreter_reports,
                        without_gpu_interpreter)
from .jax_cache import use_persistent_cache
from .scope import changed_names, read_scope



class KernelSource(Protocol):
    """What a compiled variant reads of its kernel (runtime/kernel.py's `Kernel`)."""

    fn: Callable
    print_output_code: bool
    params: list  # the function's inspect.Parameters, in order

    def bind_arguments(self, args: tuple, kwargs: dict) -> list[Any]: ...

    def scope_reads(self) -> Any: ...


class BoundSignature(Protocol):
    """What a compiled variant reads of its signature (runtime/bound_kernel.py's `BoundKernel`)."""

    kernel: KernelSource
    specs: list
    captured: dict  # implicit tensor arguments read from the enclosing scope, by name
    constants: tuple  # the other scope values the trace read (runtime/scope.py)
    remote: bool

    def sizes_of(self, args: tuple, kwargs: dict | None = None) -> dict[str, int]: ...

PRINT_ENV = "PALLASITE_PRINT_CODE"

# Called with every new CompiledKernel, once it is loaded: how the test suite lowers each
# variant it compiles for TPU (pallasite.testing.check_compiled_lowering, tests/conftest.py).
COMPILE_OBSERVERS: list[Callable[["CompiledKernel"], None]] = []


class CompiledKernel:
    """A generated module loaded and jitted: callable on torch tensors or JAX arrays."""

    def __init__(self, bound: BoundSignature, config: Config, code: str, result_structure: Any = None,
                 range_checks: list | None = None, sizes: dict[str, int] | None = None, narrowed: tuple = (),
                 widened: tuple[str, ...] = (), chip: str | None = None, arithmetic: tuple = ()):
        """`narrowed`: the plan's `NarrowedArgument`s, converted before every call (`narrow_argument`);
        `widened`: the plan's int64 outputs held as int32, widened after every call;
        `arithmetic`: the plan's int arithmetic on runtime int arguments, checked against int32
        before every call (`bounds.check_scalar_arithmetic`);
        `chip`: the TPU generation `code` was planned for, when one plan made it (static shapes)."""
        self.bound = bound
        self.chip = chip
        self.narrowed = {argument.position: argument for argument in narrowed}
        self.widened = frozenset(widened)
        self.arithmetic = arithmetic
        self._arithmetic_checked: tuple | None = None  # the int arguments last found inside int32
        self.sizes = dict(sizes or {})  # static_shapes=False: the dynamic sizes it was generated at
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
        if params is None:  # Mosaic on a TPU: a second process loads the compiled kernel
            use_persistent_cache()
        if bound.remote and params is not None:
            # Remote copies move their data when started (as a TPU's DMA engine may): with
            # "on_wait", an 8-device ring all-gather here lost a forwarded slot now and then.
            params = dataclasses.replace(params, dma_execution_mode="eager")
        self.module = load_module(code, self.code_path, params)
        self.host_fn = host_function(self.module, bound.kernel.fn.__name__)
        if getattr(self.module, "CHECKS", None) is not None:  # pallasite.range_checked() quotes the lines
            self.module.CHECKS.locations = {i: check.location for i, check in self.range_checks.items()}
        self.mutated_args = self.module.MUTATED_ARGS
        self._jitted = jax.jit(self.host_fn, compiler_options=compiler_options() or None)
        # The host function's parameters: the kernel's, then the captured tensors.
        self._names = [p.name for p in bound.kernel.params] + list(bound.captured)
        specs = [*bound.specs, *bound.captured.values()]
        self._runtime_params = [(i, spec) for i, spec in enumerate(specs) if spec.kind in ("tensor", "scalar")]
        self._param_index = {name: i for i, name in enumerate(self._names)}
        self.draws_seed = getattr(self.module, "RANDOM_SEED_ARGUMENT", False)
        for observer in COMPILE_OBSERVERS:
            observer(self)

    guards: SizeGuards | None = None  # static_shapes=False: the sizes this variant serves

    def _values(self, args: tuple, kwargs: dict, captured: dict[str, Any] | None = None) -> list[Any]:
        """The call's arguments, then the current values of the captured tensors (`captured`:
        read by the kernel's call; None: this variant is called directly, so the scope is
        read here and must still be the one it was compiled with)."""
        if self.guards is not None and not self.guards.hold(self.bound.sizes_of(args, kwargs)):
            raise exc.KernelArgumentError(
                f"This compiled variant of '{self.bound.kernel.fn.__name__}' (static_shapes=False) was "
                f"built for other sizes than {self.bound.sizes_of(args, kwargs)}; call the kernel itself, "
                "or compile_config(config, bound.sizes_of(args)).")
        values = self.bound.kernel.bind_arguments(args, kwargs)
        if captured is None:
            captured = {**self._scope_unchanged(), **self.bound.kernel.argument_closure_tensors(values)}
        if not self.bound.captured:
            return values
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

    def _scope_unchanged(self) -> dict[str, Any]:
        """The captured tensors now, after checking that the other globals and closure values
        the kernel reads are still those baked into this variant."""
        kernel = self.bound.kernel
        tensors, constants = read_scope(kernel.fn, kernel.scope_reads())
        if constants != self.bound.constants:
            changed = changed_names(self.bound.constants, constants)
            raise exc.KernelArgumentError(
                f"{', '.join(changed)}, read by '{kernel.fn.__name__}' from its enclosing scope, changed since "
                "this variant was compiled with the old value baked in; call the kernel itself (it compiles "
                "a variant per value), not a bound kernel or a compiled variant.")
        return tensors

    def _jax_args(self, values: list[Any]) -> list[Any]:
        out = []
        for i, spec in self._runtime_params:
            value = values[i]
            if isinstance(value, torch.Tensor) and value.device.type == "meta":
                raise exc.KernelArgumentError(
                    f"Argument '{self._names[i]}' is on the meta device: it has no data "
                    "to compute on. Pass a CPU tensor; kernel.bind(args).to_code() and .plan() inspect a "
                    "kernel on meta tensors without running it.")
            if i in self.narrowed:
                value = narrow_argument(value, self.narrowed[i], self._scalars(values))
            if spec.kind == "tensor":
                out.append(to_jax(value) if isinstance(value, torch.Tensor) else value)
            else:
                if spec.python_type is int and isinstance(value, int) and not -2**31 <= value < 2**31:
                    raise exc.KernelArgumentError(
                        f"Argument '{self._names[i]}' is {value}, past int32: this compiled variant holds it in "
                        "an int32 scalar (TPU has no 64-bit scalars). Call the kernel itself, which compiles a "
                        "variant with such a number as a constant.")
                out.append(jnp.asarray(value, dtype=jnp.int32 if spec.python_type is int else jnp.float32))
        if self.arithmetic:
            self._check_arithmetic(values)
        if self.draws_seed:
            out.append(self._draw_seed(out))
        return out

    def _scalars(self, values: list[Any]) -> dict[str, Any]:
        """This call's runtime number arguments, by name."""
        return {self._names[i]: values[i] for i, spec in self._runtime_params
                if spec.kind == "scalar" and isinstance(values[i], (int, float)) and not isinstance(values[i], bool)}

    def _check_arithmetic(self, values: list[Any]) -> None:
        """The plan's int arithmetic on runtime int arguments (`(r + g) * 1000003`), at this
        call's values: past int32 it would wrap on the device, where torch computes exactly."""
        scalars = self._scalars(values)
        key = tuple(sorted(scalars.items()))
        if key != self._arithmetic_checked:
            check_scalar_arithmetic(self.arithmetic, scalars)
            self._arithmetic_checked = key

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
        return self.run(args, kwargs)

    def run(self, args: tuple, kwargs: dict, captured: dict[str, Any] | None = None) -> Any:
        """A call; `captured`: the tensors the kernel's own call read from its scope (see `_values`)."""
        values = self._values(args, kwargs, captured)
        self._check_written_arguments_apart(values)
        result, mutated = self._checked(self._jitted, self._jax_args(values))
        for name, new_value in zip(self.mutated_args, mutated):
            target = values[self._param_index[name]]
            if isinstance(target, torch.Tensor):
                target.copy_(tree_to_torch(new_value))
        return self._torch_result(result, self.result_structure, values)

    def _check_written_arguments_apart(self, values: list[Any]) -> None:
        """A tensor argument the kernel writes must not share memory with another argument:
        the kernel takes each as its own buffer, so reads of the other would not see the
        writes (they gave the values from before the call)."""
        for name in self.mutated_args:
            written = values[self._param_index[name]]
            if not isinstance(written, torch.Tensor):
                continue
            shared = [axis for axis, (size, stride) in enumerate(zip(written.shape, written.stride()))
                      if size > 1 and stride == 0]
            if shared:
                raise exc.KernelArgumentError(
                    f"Argument '{name}' is written by the kernel, but it has stride 0 along axis {shared[0]} "
                    "(an expanded tensor: several of its elements are one memory location), so its values "
                    f"cannot be written back; torch refuses such in-place writes too. Pass {name}.contiguous() "
                    "(a copy), or a tensor of its own.")
            for other_name, other in zip(self._names, values):
                if other_name != name and isinstance(other, torch.Tensor) and _overlap(written, other):
                    raise exc.KernelArgumentError(
                        f"Arguments '{name}' and '{other_name}' share memory, and the kernel writes '{name}': "
                        f"it takes each argument as its own buffer, so its reads of '{other_name}' would not "
                        f"see those writes. Pass a copy ({other_name}.clone()), or index one tensor in the "
                        "kernel.")

    def _torch_result(self, result: Any, structure: Any, values: list[Any]) -> Any:
        """Convert to torch; a returned argument is the caller's own tensor, as in eager PyTorch."""
        if isinstance(structure, TensorSymbol) and structure.origin == "arg":
            original = values[self._param_index[structure.name]]
            if isinstance(original, torch.Tensor):
                return original
        if isinstance(structure, (list, tuple)) and isinstance(result, (list, tuple)):  # the kernel's own type
            items = [self._torch_result(r, s, values) for r, s in zip(result, structure)]
            return type(structure)(*items) if hasattr(structure, "_fields") else type(structure)(items)
        if isinstance(structure, dict) and isinstance(result, dict):
            return {key: self._torch_result(result[key], structure[key], values) for key in structure}
        if isinstance(structure, TensorSymbol) and structure.name in self.widened:
            return tree_to_torch(result).to(structure.caller_dtype)
        return tree_to_torch(result)

    def _checked(self, fn: Callable, args: list) -> Any:
        """Run `fn` and what interpret mode checks: a data-dependent range outside its
        tensor (the plan's `RangeCheck`s) raises `exc.ShapeMismatch` at the user's line;
        a race the race detector saw, or a DMA never waited, raises `exc.DataRace`."""
        checks = getattr(self.module, "CHECKS", None)
        if self.module.INTERPRET is None:
            return fn(*args)
        with contextlib.ExitStack() as stack:
            stack.enter_context(without_gpu_interpreter())
            stack.enter_context(cores_compiled_alike())
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

    def run_jax(self, args: tuple, kwargs: dict, captured: dict[str, Any] | None = None) -> Any:
        """The call on `jax.Array`s (see `Kernel.jax_fn`); `captured` as for `run`."""
        values = self._values(args, kwargs, captured)
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


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors' bytes may overlap (the same storage and intersecting spans)."""
    if a.device.type == "meta" or b.device.type == "meta" or a.numel() == 0 or b.numel() == 0:
        return False
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False

    def span(t: torch.Tensor) -> tuple[int, int]:
        start = t.data_ptr()
        last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) * t.element_size()
        return start, start + last + t.element_size()

    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 < b1 and b0 < a1
