"""A kernel's first call pays only for its kernel.

Elementwise, reduction and matmul-family shape rules run on one-element CPU probes, not on
meta tensors (`ir/ops/binders.on_probes`): torch runs an elementwise op on meta tensors
through a Python reference whose first call imports torch._dynamo (~0.9 s of a kernel's
first call), and its meta rules of the others import sympy (~0.3 s). The probe must give
exactly what torch's eager op gives on whole CPU tensors (dtype and shape), for every
registered op and dtype mix, and a kernel's first call must import neither.
(Where the meta reference disagrees with eager torch, eager wins: `bool_tensor ** True` is
bool in eager torch, int64 on meta.) Interpret-mode programs compile without LLVM's
optimizations (`runtime/interpret.compiler_options`)."""
from __future__ import annotations

import functools
import itertools
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from pallasite.ir.ops import binders
from pallasite.ir.ops.catalog import DEFINITIONS
from pallasite.ir.ops.definition import OpKind

F = torch.nn.functional

REPO = Path(__file__).resolve().parent.parent
DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int8, torch.bool)


def _operand_kinds(dtype: torch.dtype):
    """A tensor of `dtype` as a [2, 3] operand, a 0-d one, and Python numbers."""
    yield torch.empty((2, 3), dtype=dtype, device="meta")
    yield torch.empty((3,), dtype=dtype, device="meta")
    yield torch.empty((), dtype=dtype, device="meta")


SCALARS = (2, 0.5, True)


def _eager_result(function, args, kwargs=None):
    """`function` on whole CPU tensors of the meta arguments' shapes and dtypes (None if
    torch refuses: the probe then runs the meta path too, nothing to compare)."""
    def whole(item):
        return torch.ones(item.shape, dtype=item.dtype) if isinstance(item, torch.Tensor) else item

    try:
        out = function(*map(whole, args), **(kwargs or {}))
    except Exception:  # noqa: BLE001
        return None
    return out if isinstance(out, torch.Tensor) else None


def _torch_function(op):
    """What a user calls for `op` (its shape rule's default); None for pallasite's own ops."""
    if op.meta is not None:
        return op.meta
    for namespace in (torch, F):
        if hasattr(namespace, op.name):
            return getattr(namespace, op.name)
    return op.operator.function if op.operator is not None else None


ELEMENTWISE = [op for op in DEFINITIONS
               if op.kind is OpKind.ELEMENTWISE and op.name != "to" and _torch_function(op) is not None]


@pytest.mark.parametrize("op", ELEMENTWISE, ids=lambda op: op.name)
def test_the_probe_gives_the_meta_dtype_and_shape_of_every_elementwise_op(op):
    function = _torch_function(op)
    arity = len(op.signature.operands)
    rule = binders.on_probes(function)
    compared = 0
    for dtype_a, dtype_b in itertools.product(DTYPES, repeat=2):
        firsts = list(_operand_kinds(dtype_a))
        others = [*_operand_kinds(dtype_b), *SCALARS]
        for first, other in itertools.product(firsts, others):
            args = (first, other, other)[:max(arity, 1)]
            expected = _eager_result(function, args)
            if expected is None:
                continue
            got = rule(*args)
            assert (got.dtype, tuple(got.shape), got.device.type) == (expected.dtype, tuple(expected.shape), "meta"), \
                (op.name, args)
            compared += 1
    assert compared > 0, f"no dtype mix of {op.name} ran"


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "argmax", "prod"])
def test_the_probe_gives_the_meta_result_of_reductions(name):
    function = getattr(torch, name)
    rule = binders.on_probes(function, shape_of=binders._reduced_shape)
    x = torch.empty((4, 5, 6), dtype=torch.float32, device="meta")
    for dtype, kwargs in itertools.product((torch.float32, torch.bfloat16, torch.int32, torch.bool),
                                           ({}, {"dim": 1}, {"dim": 2, "keepdim": True}, {"dim": (0, 2)})):
        if name == "argmax" and isinstance(kwargs.get("dim"), tuple):
            continue
        x = x.to(dtype)
        expected = _eager_result(function, (x,), kwargs)
        if expected is None:
            continue
        got = rule(x, **kwargs)
        assert (got.dtype, tuple(got.shape)) == (expected.dtype, tuple(expected.shape)), (name, dtype, kwargs)


def test_a_broadcast_error_is_torchs_message_from_the_meta_run():
    rule = binders.on_probes(torch.add)
    with pytest.raises(RuntimeError, match="broadcast") as probed:
        rule(torch.empty((2, 3), device="meta"), torch.empty((4,), device="meta"))
    with pytest.raises(RuntimeError) as on_meta:
        torch.add(torch.empty((2, 3), device="meta"), torch.empty((4,), device="meta"))
    assert str(probed.value) == str(on_meta.value)


def test_a_kernels_first_call_does_not_import_torch_dynamo(tmp_path):
    """Every example kernel's first call, in one fresh process: torch._dynamo, sympy and
    JAX's Mosaic GPU interpreter stay out (runtime/interpret.without_gpu_interpreter)."""
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        import importlib, pallasite
        from examples.run_all import EXAMPLES
        for name in ("add", "softmax", "layer_norm", "matmul", "attention", "sliding_window_attention",
                     "argmax", "geglu", "gdn", "jagged_attention"):
            module = importlib.import_module("examples." + name)
            getattr(module, name)(*module.example_inputs())
            assert "torch._dynamo" not in sys.modules, name + " imported torch._dynamo"
            assert "sympy" not in sys.modules, name + " imported sympy"
            # JAX's interpret lowering asks for its GPU interpreter only to check the params' type
            assert "jax.experimental.mosaic.gpu" not in sys.modules, name + " imported Mosaic GPU"
            # and the block ends with the call: no None is left in sys.modules for the name
            assert sys.modules.get("jax._src.pallas.mosaic_gpu.interpret.interpret_pallas_call", 0) is not None
        print("ok")
    """)
    env = {**__import__("os").environ, "PALLASITE_CODE_DIR": str(tmp_path / "code"),
           "PALLASITE_CACHE_DIR": str(tmp_path / "cache"), "PALLASITE_AUTOTUNE_EFFORT": "none"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-3000:]


@pytest.mark.parametrize("name", ["matmul", "mm", "bmm", "addmm", "baddbmm"])
def test_the_probe_gives_the_eager_result_of_the_matmul_family(name):
    op = next(op for op in DEFINITIONS if op.name == name)
    rule = binders.on_probes(_torch_function(op), shape_of=functools.partial(binders.product_shape,
                                                                             binders._FACTOR_RANK.get(name)))
    shapes = [(5,), (4, 5), (5, 3), (2, 4, 5), (2, 5, 3), (1, 5, 3), (3, 2, 4, 5), (3,), (4, 3)]
    compared = 0
    for dtype in (torch.float32, torch.bfloat16):
        metas = [torch.empty(shape, dtype=dtype, device="meta") for shape in shapes]
        arity = 3 if name.startswith(("add", "badd")) else 2
        for args in itertools.product(metas, repeat=arity):
            expected = _eager_result(_torch_function(op), args)
            if expected is None:
                with pytest.raises(Exception):  # noqa: B017 - torch's own error, from the meta run
                    rule(*args)
                continue
            got = rule(*args)
            assert (got.dtype, tuple(got.shape)) == (expected.dtype, tuple(expected.shape)), (name, args)
            compared += 1
    assert compared > 0


def test_interpret_programs_compile_without_llvm_optimizations_and_fusion_emitters_unless_asked(monkeypatch):
    """LLVM's optimizations stay off even when the fast compile is turned off: they fuse
    `a * b + c` into one rounding (trial OO: float32 results one ulp from torch's)."""
    from pallasite.runtime import interpret

    # 16-bit results rounded as a TPU rounds them, and no multiply-add fused, always
    exact = {"xla_allow_excess_precision": False, "xla_backend_optimization_level": 0}
    assert interpret.compiler_options() == {**exact, "xla_cpu_use_fusion_emitters": False}
    monkeypatch.setenv(interpret.FAST_COMPILE_ENV, "0")
    assert interpret.compiler_options() == exact


def test_the_gpu_interpreter_is_blocked_only_inside_the_block(monkeypatch):
    from pallasite.runtime import interpret

    name = interpret._GPU_INTERPRETER
    monkeypatch.delitem(sys.modules, name, raising=False)
    with interpret.without_gpu_interpreter():
        assert sys.modules[name] is None
        with pytest.raises(ImportError):
            __import__(name)
    assert name not in sys.modules
    monkeypatch.setenv(interpret.FAST_COMPILE_ENV, "0")  # off with the fast compile
    with interpret.without_gpu_interpreter():
        assert name not in sys.modules
    marker = object()
    monkeypatch.setitem(sys.modules, name, marker)  # a process that imported it keeps it
    monkeypatch.delenv(interpret.FAST_COMPILE_ENV)
    with interpret.without_gpu_interpreter():
        assert sys.modules[name] is marker
    assert sys.modules[name] is marker
