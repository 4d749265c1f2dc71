"""hl.all_reduce: a sum over every device of a mesh, expanded into remote copies.

The multi-device runs (8, 4 and 2 CPU devices, race detector on, seeded interleavings,
lowered to Mosaic) run in a subprocess (tests/all_reduce_cases.py); examples/tp_all_reduce.py
(a tensor-parallel residual stack) runs in tests/test_examples.py. Here: the expansion's
code, the algorithm chosen by payload, and the errors, on one device.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.frontend.collectives import choose_algorithm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# "sums 8 one_shot f32 16x256": a 128 KiB receive buffer per device, which hung JAX's
# interpreter before the spare CPU device (docs/design/remote-copies.md).
CASES = ["sums 8 one_shot f32 16x256", "sums 8 reduce_scatter bf16 3x1024 float32", "sums 4 auto i32 2x4x256",
         "sums 4 auto f16 256 float32", "sums 2 one_shot f32 1x128 bfloat16", "algorithms_agree 4",
         "algorithms_agree 8", "bad_tables 4"]


def test_on_cpu_mesh():
    """Every device gets the float32 (int32) sum of every device's values in the output's
    dtype, the same bits on each, for one-shot, reduce-scatter and the payload's choice;
    1-D to 3-D; race-free under each seed; every compiled variant lowers for v5e/v6e/v7x.
    A peers table that repeats a device, a wrong rank, or a table for another mesh size
    is an error, not a wrong sum or a hang (`bad_tables`)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-m", "tests.all_reduce_cases", *CASES], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count("OK ") == len(CASES), done.stdout


@pallasite.kernel(static_shapes=True)
def residual(x: torch.Tensor, peers: torch.Tensor, rank: torch.Tensor, algorithm: hl.constexpr = None) -> torch.Tensor:
    m, h = x.shape
    partial = torch.empty([m, h], dtype=torch.float32, device=x.device)
    total = torch.empty_like(x)
    for tm, tn in hl.tile([m, h]):
        partial[tm, tn] = x[tm, tn].float() * 2
    hl.all_reduce(total, partial, peers[0, :], rank[0], algorithm=algorithm)
    return total


def _args(m, h, world=8, dtype=torch.bfloat16, algorithm=None):
    return (torch.zeros(m, h, dtype=dtype), torch.arange(1, world, dtype=torch.int32)[None],
            torch.zeros(1, dtype=torch.int32), algorithm)


def _code(*args, **kwargs) -> str:
    return residual.bind(_args(*args, **kwargs)).to_code()


def test_one_shot_code_reads_like_the_algorithm():
    """One device loop after the partial's: a barrier with every peer, the partial in this
    device's slot, one copy site pushed to each peer and waited world - 1 times, then the
    slots summed; each line commented with the user's call and the expansion's statement."""
    code = _code(1, 1024, algorithm="one_shot")
    assert code.count("pl.pallas_call(") == 2
    assert "all_reduce_recv_ref[me, :, :] = partial" in code
    assert code.count("pltpu.make_async_remote_copy(") == 1
    assert code.count(".wait_recv()") == 7
    # the slots summed in rank order, one add each (not a sum over the axis, whose order is
    # the compiler's: trial O saw one-shot and reduce-scatter differ in 940 of 2048 lanes)
    assert code.count("all_reduce_recv_ref[") >= 8 and "jnp.sum" not in code
    assert "# hl.all_reduce (one-shot): hl.remote_barrier(peers[:], rank=me)" in code
    assert "hl.all_reduce(total, partial, peers[0, :], rank[0], algorithm=algorithm)" in code


def test_the_barrier_checks_the_peer_table():
    """The expansion's barrier names every device of the mesh with `rank=me`: the peers go
    through CHECKS.peer_group before any signal (the count when traced, the values in
    interpret mode), and its message names the peer group (trial O: a table that misses or
    repeats a device, or a wrong rank, gave a wrong sum or a hang, unchecked)."""
    bound = residual.bind(_args(1, 1024, algorithm="one_shot"))
    code = bound.to_code()
    assert code.index("CHECKS.peer_group(") < code.index("pl.semaphore_signal(barrier_sems")
    assert "device_id=peer_group[6]" in code
    (group,) = [check for call in bound.plan().calls for check in call.range_checks if check.peer_group]
    assert len(group.device) == 8
    assert "must name every device of the {limit}-device mesh once" in group.message


def test_peer_group_check_when_traced():
    from pallasite.runtime.checks import RangeChecks
    checks = RangeChecks({0: ("the peers and the rank must name every device of the {limit}-device mesh once; "
                              "got {lo}", "f.py:1")})
    assert checks.peer_group(0, 0, [1, 2, 3], limit=4, run_time=False) == [1, 2, 3]
    with pytest.raises(exc.IndexingError, match="of the 8-device mesh once; got 3 peers"):
        checks.peer_group(0, 0, [1, 2, 3], limit=8, run_time=False)


def test_reduce_scatter_code_moves_chunks():
    code = _code(16, 1024, algorithm="reduce_scatter")
    assert "all_reduce_scatter" in code and "all_reduce_gather" in code and "all_reduce_recv" not in code
    assert code.count("pltpu.make_async_remote_copy(") == 2  # the scatter's site and the gather's


@pytest.mark.parametrize("m, world, expected", [(1, 8, "one_shot"), (64, 8, "reduce_scatter"),
                                                (64, 2, "one_shot"), (64, 3, "one_shot")])
def test_algorithm_by_payload(m, world, expected):
    """A one-row decode step's partial is one-shot; 64 rows of 1024 float32 lanes on 8
    devices reduce-scatter; 2 devices never (it saves no bytes); a last dim the device
    count does not divide stays one-shot."""
    code = _code(m, 1024 if world != 3 else 1000, world=world)
    assert ("all_reduce_scatter" in code) == (expected == "reduce_scatter"), code[:3000]


def test_choice_follows_bytes_saved_against_a_round():
    assert choose_algorithm(4 * 1024, 8, "v7x") == "one_shot"
    assert choose_algorithm(256 * 1024, 8, "v7x") == "reduce_scatter"
    assert choose_algorithm(256 * 1024 * 1024, 2, "v7x") == "one_shot"


def test_errors_name_the_call():
    @pallasite.kernel(static_shapes=True)
    def inside(x: torch.Tensor, peers: torch.Tensor, rank: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tm in hl.tile(x.size(0)):
            hl.all_reduce(out, x, peers[0, :], rank[0])
        return out

    args = _args(8, 128)[:3]
    with pytest.raises(exc.UnsupportedSyntax, match="outside any hl.tile") as caught:
        inside.bind(args)
    assert "hl.all_reduce(out, x, peers[0, :], rank[0])" in str(caught.value)
    with pytest.raises(exc.UnsupportedOperation, match="algorithm is 'ring'"):
        residual.bind(_args(8, 128, algorithm="ring"))
    with pytest.raises(exc.ShapeMismatch, match="must divide it"):
        residual.bind(_args(8, 100, algorithm="reduce_scatter"))

    @pallasite.kernel(static_shapes=True)
    def misfit(x: torch.Tensor, peers: torch.Tensor, rank: torch.Tensor) -> torch.Tensor:
        out = torch.empty([x.size(0), 64], dtype=x.dtype, device=x.device)
        hl.all_reduce(out, x, peers, rank[0])
        return out

    with pytest.raises(exc.ShapeMismatch, match="must have one shape"):
        misfit.bind(args)


def test_peers_and_rank_forms():
    @pallasite.kernel(static_shapes=True)
    def whole_table(x: torch.Tensor, peers: torch.Tensor, rank: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        hl.all_reduce(out, x, peers, rank)
        return out

    with pytest.raises(exc.UnsupportedOperation, match=r"peers\[0, :\]"):
        whole_table.bind(_args(8, 128)[:3])
    flat = (torch.zeros(8, 128), torch.arange(1, 4, dtype=torch.int32), torch.zeros(1, dtype=torch.int32))
    assert "all_reduce_recv" in whole_table.bind(flat).to_code()  # 1-D peers, rank as [1]


def test_bool_and_single_device_refused():
    with pytest.raises(exc.UnsupportedDtype, match="bool"):
        residual.bind(_args(8, 128, dtype=torch.bool))
    with pytest.raises(exc.UnsupportedOperation, match="reference mode"):
        pallasite.testing.run_ref(residual, _args(8, 128, dtype=torch.float32))
    with pytest.raises(exc.UnsupportedOperation, match="jax.shard_map"):
        residual(*_args(8, 128, dtype=torch.float32))
