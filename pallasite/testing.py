"""Helpers for testing kernels: run with a config, run in reference mode, check the Mosaic lowering."""
from __future__ import annotations

import contextlib
import hashlib
import re
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import torch

from . import exc
from .config import Config, as_config
from .reference import prng, run_reference
from .report import schedule_report
from .codegen import generate_module
from .codegen.op_calls import jnp_dtype
from .runtime.chips import lowering_facts, simulated_chip
from .runtime.compiled import CompiledKernel
from .runtime.convert import torch_dtype_of
from .runtime.dynamic import specs_at
from .runtime.code_files import host_function
from .runtime.kernel import Kernel, _for_user, load_module

DEFAULT_CHIPS = ("v5e", "v6e", "v7x")


def _config(bound, config_kwargs: dict[str, Any]) -> Config:
    """The given config, or (none given) the one a plain call of the kernel runs."""
    return bound.resolve_config(Config(**config_kwargs) if config_kwargs else None)


def code_and_output(kernel: Kernel, args: Sequence[Any], **config_kwargs: Any) -> tuple[str, Any]:
    """Compile `kernel` for `args` with the given config (default if none) and run it once.
    A pallasite error reaches the caller as from a kernel call (the user's line, no frames)."""
    return _for_user(_code_and_output, (kernel, args, config_kwargs), {})


def _code_and_output(kernel: Kernel, args: Sequence[Any], config_kwargs: dict[str, Any]) -> tuple[str, Any]:
    config = Config(**config_kwargs) if config_kwargs else None
    bound = kernel.bind(tuple(args), config=config)  # traced first at this config's block sizes
    # compile_config resolves the config at these arguments' sizes (static_shapes=False: the
    # bound kernel may have been bound at other sizes of the bucket)
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
                       mosaic: dict[str, list[str]] | None = None, mesh_shape: Sequence[int] | None = None,
                       **config_kwargs: Any) -> dict[str, str]:
    """Lower the kernel to Mosaic for each TPU generation with `jax.export`; raise on failure.

    Returns the generated code per chip (each plan is checked against that
    chip's VMEM). With a `mosaic` dict, also fills it with each chip's Mosaic
    modules (MLIR text, one per pallas_call, before serialization) for tests
    that inspect the lowered kernels (`lowered_vmem_buffers`). With `mesh_shape`,
    `args` are one device's shards and the kernel is lowered as every device of
    that mesh runs it (under `jax.shard_map`, each argument stacked along a new
    leading axis split over the mesh): how a kernel with remote copies runs. It
    needs that many JAX devices (on a CPU:
    `XLA_FLAGS=--xla_force_host_platform_device_count=N` before importing JAX).
    A module this process already lowered for a chip with the same lowering facts
    (`chips.lowering_facts`) with the same argument signature is not lowered again.
    """
    bound = kernel.bind(tuple(args))
    values = kernel.bind_arguments(tuple(args), {})  # parameters' defaults filled in
    # the arguments' own shapes: with static_shapes=False, the bound kernel serves a bucket
    shapes = [tuple(value.shape) if spec.kind == "tensor" else None for spec, value in zip(bound.specs, values)]
    sizes = bound.sizes_of(tuple(args)) or None
    # resolved per chip (under `simulated_chip`): with none given, the default a call there runs
    return _lower_for_chips(kernel.fn.__name__,
                            lambda chip: bound.to_code(_config(bound, config_kwargs), chip=chip, sizes=sizes),
                            _argument_structs(bound, shapes), chips, mosaic=mosaic,
                            mesh_shape=None if mesh_shape is None else tuple(mesh_shape))


def check_compiled_lowering(compiled: CompiledKernel, chips: Sequence[str] = DEFAULT_CHIPS) -> dict[str, str]:
    """Lower one compiled variant (its config, at the sizes it was compiled for) to Mosaic for
    each TPU generation, as `check_tpu_lowering` does; returns the code per chip. The test
    suite calls it for every variant it compiles (tests/tpu_lowering.py). A kernel with remote
    copies is lowered as a one-device mesh runs it (device ids are flat ranks, so the
    module is the same for every mesh), or as the mesh its barriers name every device of
    (`hl.remote_barrier(peers, rank=...)`: their count is checked when traced)."""
    bound = compiled.bound
    specs = specs_at(bound.specs, compiled.sizes) if compiled.sizes else bound.specs
    shapes = [tuple(int(e) for e in spec.shape) if spec.kind == "tensor" else None for spec in specs]
    config = compiled.config

    def generate(chip: str) -> str:  # as the variant was: its resolved config at its specs
        if chip == compiled.chip:
            return compiled.code  # the module it runs, planned for this chip
        try:
            return generate_module(bound.plan(config, chip, specs=specs, resolved=True))
        except exc.PallasiteError as err:
            raise exc.TpuLoweringFailed(f"{bound.kernel.fn.__name__} with {config!r} does not plan for TPU "
                                        f"{chip}: {type(err).__name__}: {err.message}") from err

    return _lower_for_chips(bound.kernel.fn.__name__, generate, _argument_structs(bound, shapes), chips,
                            mesh_shape=_lowering_mesh(compiled))


def _lowering_mesh(compiled: CompiledKernel) -> tuple[int, ...] | None:
    """The mesh a variant with remote copies is lowered on: one device, or as many as its
    barriers' peer groups name (None: no remote copies)."""
    if not compiled.bound.remote:
        return None
    groups = {len(check.device) for check in compiled.range_checks.values() if check.peer_group}
    return (groups.pop(),) if len(groups) == 1 else (1,)


def _argument_structs(bound, shapes: list) -> list:
    """The host function's abstract arguments: tensors (`shapes`, None for other kinds) and
    scalars in order, then the captured tensors."""
    structs = []
    for spec, shape in zip(bound.specs, shapes):
        if spec.kind == "tensor":
            structs.append(jax.ShapeDtypeStruct(shape, _jax_dtype(spec.kernel_dtype)))
        elif spec.kind == "scalar":
            structs.append(jax.ShapeDtypeStruct((), jnp.int32 if spec.python_type is int else jnp.float32))
    for spec in bound.captured.values():  # tensors read from the enclosing scope: implicit arguments
        structs.append(jax.ShapeDtypeStruct(spec.shape, _jax_dtype(spec.kernel_dtype)))
    return structs


# Modules lowered in this process: a digest of (module text but its chip line, argument
# signature, mesh, the chip's lowering facts). Lowering is a function of exactly these, so
# a module the suite compiles in several tests, or that plans alike for two chips, is
# lowered once (checking the lowering of every variant the suite compiles stays cheap).
_LOWERED: set[str] = set()


def _lowering_key(code: str, structs: list, mesh_shape: tuple | None, chip: str) -> str:
    text = "\n".join(line for line in code.splitlines() if not line.startswith("# Chip: "))
    signature = [(tuple(s.shape), str(s.dtype)) for s in structs]
    return hashlib.sha256(repr((text, signature, mesh_shape, lowering_facts(chip))).encode()).hexdigest()


def _lower_for_chips(name: str, generate, structs: list, chips: Sequence[str], *,
                     mosaic: dict[str, list[str]] | None = None, mesh_shape: tuple | None = None) -> dict[str, str]:
    """`generate(chip)`: the module planned for that chip."""
    codes = {}
    for chip in chips:
        with simulated_chip(chip):
            code = codes[chip] = generate(chip)
            key = _lowering_key(code, structs, mesh_shape, chip)
            if mosaic is None and key in _LOWERED:
                continue
            module = load_module(code, f"<{name} for {chip}>", None)
            host = host_function(module, name)
            structs_here = structs
            if mesh_shape is not None:
                host, structs_here = _on_mesh(host, mesh_shape, structs)
            seed = [jax.ShapeDtypeStruct((), jnp.int32)] if getattr(module, "RANDOM_SEED_ARGUMENT", False) else []
            try:
                with _capturing_mosaic(mosaic.setdefault(chip, []) if mosaic is not None else None):
                    jax.export.export(jax.jit(host), platforms=["tpu"])(*structs_here, *seed)
            except Exception as err:  # noqa: BLE001 - any lowering failure is reported
                raise exc.TpuLoweringFailed(
                    f"{name} did not lower to Mosaic for TPU {chip}: {type(err).__name__}: {err}"
                ) from err
            _LOWERED.add(key)
    return codes


@contextlib.contextmanager
def _capturing_mosaic(modules: list[str] | None):
    """Record the text of every Mosaic module lowered meanwhile (JAX's private serializer
    hook: test tooling only)."""
    if modules is None:
        yield
        return
    from jax._src import tpu_custom_call

    serialize = tpu_custom_call._lower_mosaic_module_to_asm

    def spy(module, **kwargs):
        modules.append(str(module))
        return serialize(module, **kwargs)

    tpu_custom_call._lower_mosaic_module_to_asm = spy
    try:
        yield
    finally:
        tpu_custom_call._lower_mosaic_module_to_asm = serialize


_MEMREF = re.compile(r"memref<([0-9x]*?)x?(bf16|f32|f16|i32|i16|i8|i1), #tpu\.memory_space<vmem>>")
_TORCH_OF = {"bf16": torch.bfloat16, "f32": torch.float32, "f16": torch.float16, "i32": torch.int32,
             "i16": torch.int16, "i8": torch.int8, "i1": torch.bool}


def lowered_vmem_buffers(module: str) -> list[tuple[tuple[int, ...], torch.dtype, int]]:
    """The VMEM buffers one lowered Mosaic kernel declares, as (shape, dtype, copies): each
    windowed operand of its signature (a BlockSpec block, double-buffered by the grid
    pipeline: 2 copies), each VMEM scratch operand, and each VMEM `memref.alloca` of its
    body (emit_pipeline's buffers, their depth in the shape)."""
    header = next(line for line in module.splitlines() if "func.func" in line and "window_params" in line)
    grid = len([d for d in (re.search(r"iteration_bounds = array<i64:? ?([0-9, ]*)>", header).group(1)).split(",")
                if d.strip()])
    prefetch = int(re.search(r"scalar_prefetch = (\d+)", header).group(1))
    windows = re.search(r"window_params = \[(.*)\]\}", header).group(1)
    windowed = [("window_bounds" in w) for w in re.findall(r"\{[^{}]*\}", windows)]
    params = re.findall(r"%arg\d+: ([^%]*?)(?=, %arg|\) attributes)", header)
    buffers = []
    for position, param in enumerate(params[grid + prefetch:]):
        match = _MEMREF.search(param)
        if match is None:
            continue
        copies = 2 if position < len(windowed) and windowed[position] else 1
        buffers.append((_dims(match.group(1)), _TORCH_OF[match.group(2)], copies))
    for line in module.splitlines():
        if "memref.alloca()" in line and "memory_space<vmem>" in line:
            match = _MEMREF.search(line)
            buffers.append((_dims(match.group(1)), _TORCH_OF[match.group(2)], 1))
    return buffers


_VECTOR = re.compile(r"vector<([0-9x]+?)x(bf16|f32|f16|i32|i16|i8|i1)>")


def lowered_vectors(module: str) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """Every vector type one lowered Mosaic kernel computes with, as (shape, dtype): the
    values its body materializes (a vector too large for the register file lives in VMEM)."""
    return sorted({(_dims(match.group(1)), _TORCH_OF[match.group(2)]) for match in _VECTOR.finditer(module)},
                  key=repr)


def _dims(text: str) -> tuple[int, ...]:
    return tuple(int(d) for d in text.split("x") if d)


def _on_mesh(host, mesh_shape: tuple[int, ...], structs: list) -> tuple[Any, list]:
    """`host` run by every device of a mesh on its shard (a new leading axis split over the
    mesh). An abstract mesh: lowering needs no devices, so any mesh lowers in any process."""
    from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec

    count = 1
    for size in mesh_shape:
        count *= size
    names = tuple(f"mesh{axis}" for axis in range(len(mesh_shape)))
    mesh = AbstractMesh(tuple(mesh_shape), names)
    spec = PartitionSpec(names)

    def body(*shards):
        result = host(*(shard[0] for shard in shards))
        return jax.tree.map(lambda leaf: leaf[None], result)

    sharded = jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False)
    sharding = NamedSharding(mesh, spec)
    return sharded, [jax.ShapeDtypeStruct((count, *s.shape), s.dtype, sharding=sharding) for s in structs]


def _jax_dtype(dtype: torch.dtype):
    """The JAX dtype of a kernel argument's dtype (codegen's table: float8 too); a dtype no
    kernel takes is the UnsupportedDtype a call of the kernel raises."""
    return getattr(jnp, jnp_dtype(dtype).removeprefix("jnp."))


__all__ = ["code_and_output", "check_compiled_lowering", "check_tpu_lowering", "lowered_vmem_buffers",
           "reference_rand", "run_ref", "schedule_report", "torch_dtype_of"]
