"""The VMEM ceiling model (plan/vmem.py, issue #10): every buffer Mosaic allocates, the
chip's scoped default and capacity; checked against the lowered Mosaic kernels."""
from __future__ import annotations

import pytest
import torch

import pallasite
from pallasite import exc
from pallasite.plan.vmem import SCOPED_VMEM_DEFAULT, buffer_bytes, padded_bytes
from pallasite.testing import check_tpu_lowering, lowered_vmem_buffers

from examples.attention import attention
from plan_helpers import matmul  # the shared test matmul (inner K loop, no config)

CHIPS = ("v5e", "v6e", "v7x")


def _rand(*shape, dtype=torch.bfloat16, count=3):
    return tuple(torch.randn(*shape).to(dtype) for _ in range(count))


# A small sweep: each loop strategy, blocks from one vreg tile to whole axes, deeper buffers.
SWEEP = [
    (attention, lambda: _rand(2, 512, 128), dict(block_sizes=[128, 128], pallas_loop_type="unroll")),
    (attention, lambda: _rand(2, 512, 128), dict(block_sizes=[256, 128], pallas_loop_type="fori_loop")),
    (attention, lambda: _rand(2, 512, 128), dict(block_sizes=[256, 256], pallas_loop_type="emit_pipeline",
                                                 pallas_load_buffer_count=3)),
    (attention, lambda: _rand(2, 512, 64, dtype=torch.float32),
     dict(block_sizes=[512, 128], pallas_loop_type="emit_pipeline")),
    (matmul, lambda: _rand(512, 384, count=1) + _rand(384, 256, count=1),
     dict(block_sizes=[128, 128, 128], pallas_loop_type="unroll")),
    (matmul, lambda: _rand(512, 384, count=1) + _rand(384, 256, count=1),
     dict(block_sizes=[256, 256, 128], pallas_loop_type="fori_loop", pallas_load_buffer_count=3)),
    (matmul, lambda: _rand(512, 384, count=1) + _rand(384, 256, count=1),
     dict(block_sizes=[512, 256, 128], pallas_loop_type="emit_pipeline")),
]


@pytest.mark.parametrize("case", range(len(SWEEP)))
def test_accepted_configs_lower_and_the_estimate_covers_their_buffers(case):
    kernel, make_args, config = SWEEP[case]
    args = make_args()
    bound = kernel.bind(args)
    plans = {chip: bound.plan(bound.resolve_config(pallasite.Config(**config)), chip) for chip in CHIPS}
    modules: dict[str, list[str]] = {}
    check_tpu_lowering(kernel, args, chips=CHIPS, mosaic=modules, **config)
    for chip in CHIPS:
        calls = plans[chip].calls
        assert len(modules[chip]) == len(calls)
        for call, module in zip(calls, modules[chip]):
            lowered = lowered_vmem_buffers(module)
            assert lowered, module[:500]
            declared = sum(copies * padded_bytes(shape, dtype) for shape, dtype, copies in lowered)
            assert call.vmem_bytes >= declared, (chip, call.vmem_bytes, lowered)
            # the plan's own buffers are exactly what the kernel declares
            assert buffer_bytes(call) == declared, (chip, buffer_bytes(call), lowered)


def test_sublane_packing_follows_the_dtype():
    # one (1, 256) row: 8 rows of float32, 16 of bfloat16, 32 of int8 per native tile
    assert padded_bytes((1, 256), torch.float32) == 8 * 256 * 4
    assert padded_bytes((1, 256), torch.bfloat16) == 16 * 256 * 2
    assert padded_bytes((1, 256), torch.int8) == 32 * 256
    assert padded_bytes((1, 256), torch.bool) == 32 * 256
    assert padded_bytes((3, 100), torch.float32) == 8 * 128 * 4  # lanes pad to 128


def test_deeper_streams_add_one_window_each():
    args = tuple(torch.empty(2, 1024, 128, dtype=torch.bfloat16, device="meta") for _ in range(3))
    base = dict(block_sizes=[256, 256], pallas_loop_type="fori_loop")
    sizes = [attention.bind(args).plan({**base, "pallas_load_buffer_count": n}, "v7x").calls[0].vmem_bytes
             for n in (2, 3)]
    window = padded_bytes((1, 256, 128), torch.bfloat16)
    assert sizes[1] - sizes[0] == 2 * window  # k and v


def _matmul_call(blocks, chip, dtype=torch.float32, size=4096):
    args = tuple(torch.empty(size, size, dtype=dtype, device="meta") for _ in range(2))
    return matmul.bind(args).plan({"block_sizes": blocks, "pallas_loop_type": "fori_loop"}, chip).calls[0]


@pytest.mark.parametrize("chip", CHIPS)
def test_the_limit_is_set_only_past_the_scoped_default(chip):
    small = _matmul_call([256, 256, 256], chip, size=1024)
    assert small.vmem_bytes <= SCOPED_VMEM_DEFAULT["7x" if chip == "v7x" else chip]
    assert small.vmem_limit_bytes is None
    big = _matmul_call([2048, 1024, 512], chip)  # an 8 MiB f32 output block, double-buffered
    default = SCOPED_VMEM_DEFAULT["7x" if chip == "v7x" else chip]
    assert big.vmem_bytes > default
    assert big.vmem_bytes <= big.vmem_limit_bytes
    code = matmul.bind(tuple(torch.empty(4096, 4096, device="meta") for _ in range(2))).to_code(
        {"block_sizes": [2048, 1024, 512], "pallas_loop_type": "fori_loop"}, chip=chip)
    assert f"vmem_limit_bytes={big.vmem_limit_bytes}" in code


def test_a_config_over_capacity_is_rejected_with_the_numbers():
    with pytest.raises(exc.InvalidConfig, match=r"estimated at \d+\.\d MiB, over TPU 7x's 64 MiB of VMEM"):
        _matmul_call([2048, 2048, 1024], "v7x")
    # v5e and v6e have 128 MiB: the same config that overflows v7x fits there
    assert _matmul_call([2048, 2048, 1024], "v6e").vmem_limit_bytes is not None


def test_a_vmem_limit_over_the_chips_vmem_is_refused_for_that_chip():
    # 96 MiB of scoped VMEM is more than v7x has: Mosaic would be asked for memory that does not exist
    config = {"block_sizes": [256, 256, 256], "pallas_loop_type": "fori_loop", "vmem_limit_bytes": 96 * 2**20}
    args = tuple(torch.empty(1024, 1024, device="meta") for _ in range(2))
    with pytest.raises(exc.InvalidConfig, match=r"vmem_limit_bytes=100663296 \(96 MiB\) is over the 64 MiB of VMEM"):
        matmul.bind(args).plan(config, "v7x")
    assert matmul.bind(args).plan(config, "v6e").calls[0].vmem_limit_bytes == 96 * 2**20


def test_live_values_count_and_the_model_grows_with_the_body():
    args = tuple(torch.empty(2, 2048, 128, dtype=torch.bfloat16, device="meta") for _ in range(3))
    config = dict(block_sizes=[512, 512], pallas_loop_type="emit_pipeline")
    call = attention.bind(args).plan(config, "v7x").calls[0]
    scores = padded_bytes((1, 512, 512), torch.float32)  # q @ k^T: 1 MiB, never in the signature
    assert call.vmem_bytes - buffer_bytes(call) >= 2 * scores
