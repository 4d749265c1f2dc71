"""Helpers for testing kernels: run with a config, run in reference mode, check the Mosaic lowering."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import torch

from . import exc
from .config import Config, as_config
from .reference import prng, run_reference
from .report import schedule_report
from .runtime.chips import simulated_chip
from .runtime.convert import torch_dtype_of
from .runtime.kernel import Kernel, _for_user, load_module

DEFAULT_CHIPS = ("v5e", "v6e", "v7x")


def _config(bound, config_kwargs: dict[str, Any]) -> Config:
    """The given config, or (none given) the one a plain call of the kernel runs."""
    return bound.resolve_config(Config(**config_kwargs) if config_kwargs else None)


def code_and_output(kernel: Kernel, args: Sequence[Any], **config_kwargs: Any) -> tuple[str, Any]:
    """Compile `kernel` for `args` with the given config (default if none) and run it once."""
    bound = kernel.bind(tuple(args))
    # compile_config resolves the config at these arguments' sizes (static_shapes=False: the
    # bound kernel may have been bound at other sizes of the bucket)
    config = Config(**config_kwargs) if config_kwargs else None
    compiled = bound.compile_config(config, bound.sizes_of(args))
    return compiled.code, compiled(*args)


def run_ref(kernel: Kernel, args: Sequence[Any], kwargs: Mapping[str, Any] | None = None, *,
            config: Config | Mapping[str, Any] | None = None, **config_kwargs: Any) -> Any:
    """Run `kernel` in reference mode: its body eagerly in PyTorch, tiles as slices.

    Block sizes come from `config` (or `**config_kwargs`, as for
    `code_and_output`), else the kernel's own config, else its default config,
    so tiles have the compiled kernel's boundaries. In-place updates apply to
    `args`, as when the compiled kernel is called.
    """
    if config_kwargs:
        config = Config({**dict(as_config(config)), **config_kwargs})
    return _for_user(run_reference, (kernel, tuple(args), kwargs, config), {})


def reference_rand(shape: Sequence[int], seed: int) -> torch.Tensor:
    """The float32 numbers `hl.rand(shape_of_tiles, seed)` draws over a whole tensor of `shape`
    when each axis is one of the loop's tiles (or a full int axis) — they depend only on
    the seed and each element's coordinates. For writing a PyTorch reference of a kernel
    that draws them (dropout)."""
    return prng.whole_tensor(tuple(shape), seed)


def check_tpu_lowering(kernel: Kernel, args: Sequence[Any], *, chips: Sequence[str] = DEFAULT_CHIPS,
                       **config_kwargs: Any) -> dict[str, str]:
    """Lower the kernel to Mosaic for each TPU generation with `jax.export`; raise on failure.

    Returns the generated code per chip (each plan is checked against that
    chip's VMEM).
    """
    bound = kernel.bind(tuple(args))
    config = _config(bound, config_kwargs)
    values = kernel._bind_arguments(tuple(args), {})  # parameters' defaults filled in
    structs = []
    for spec, value in zip(bound.specs, values):
        if spec.kind == "tensor":
            # the argument's own shape: with static_shapes=False, the bound kernel serves a bucket
            structs.append(jax.ShapeDtypeStruct(tuple(value.shape), _jax_dtype(spec.dtype)))
        elif spec.kind == "scalar":
            structs.append(jax.ShapeDtypeStruct((), jnp.int32 if spec.python_type is int else jnp.float32))
    for spec in bound.captured.values():  # tensors read from the enclosing scope: implicit arguments
        structs.append(jax.ShapeDtypeStruct(spec.shape, _jax_dtype(spec.dtype)))
    codes = {}
    for chip in chips:
        with simulated_chip(chip):
            code = bound.to_code(config, chip=chip, sizes=bound.sizes_of(tuple(args)))
            module = load_module(code, f"<{kernel.fn.__name__} for {chip}>", None)
            host = getattr(module, kernel.fn.__name__)
            seed = [jax.ShapeDtypeStruct((), jnp.int32)] if getattr(module, "RANDOM_SEED_ARGUMENT", False) else []
            try:
                jax.export.export(jax.jit(host), platforms=["tpu"])(*structs, *seed)
            except Exception as err:  # noqa: BLE001 - any lowering failure is reported
                raise exc.TpuLoweringFailed(
                    f"{kernel.fn.__name__} did not lower to Mosaic for TPU {chip}: "
                    f"{type(err).__name__}: {err}"
                ) from err
        codes[chip] = code
    return codes


def _jax_dtype(dtype: torch.dtype):
    return {
        torch.float32: jnp.float32, torch.bfloat16: jnp.bfloat16, torch.float16: jnp.float16,
        torch.int32: jnp.int32, torch.int8: jnp.int8, torch.uint8: jnp.uint8,
        torch.int16: jnp.int16, torch.bool: jnp.bool_,
    }[dtype]


__all__ = ["code_and_output", "check_tpu_lowering", "reference_rand", "run_ref", "schedule_report",
           "torch_dtype_of"]
