"""Flattened worklists with a head axis (issue #8 §2): jagged q of shape [rows, H, D]
run per head as a second grid axis (`hl.grid([n, H])`), per item (an inner
`hl.grid(H)`), or all heads in one tile (`q[tile_q, :, :]`), and dense K/V per
segment (`k[seq, :, :, :]`). Each is checked per segment against torch under every
loop type; a form that cannot be flattened runs per segment and says why."""
from __future__ import annotations

import itertools
import math

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite.plan import Memory
from pallasite.plan.loops import LOOP_TYPES
from pallasite.testing import check_tpu_lowering, code_and_output, run_ref

LENGTHS = (13, 0, 3, 21, 1)  # unaligned: tiles straddle segments; an empty and a one-row segment
HEADS = 2


def offsets_of(lengths) -> torch.Tensor:
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)


def plan_of(kernel, args, **config):
    bound = kernel.bind(tuple(args))
    return bound.plan(bound.resolve_config(pallasite.Config(**config))).calls[0]


@pallasite.kernel
def heads_grid_attention(q, k, v, offsets):
    """Segment x head programs: `for seq, h in hl.grid([n, H])`, softmax over the segment."""
    total, heads, d = q.size()
    out = torch.zeros_like(q)
    scale = 1.0 / math.sqrt(d)
    for seq, h in hl.grid([offsets.size(0) - 1, heads]):
        start = offsets[seq]
        end = offsets[seq + 1]
        for tile_q in hl.tile(start, end):
            q_blk = q[tile_q, h, :]
            m_i = hl.full([tile_q], float("-inf"), dtype=torch.float32)
            l_i = hl.zeros([tile_q], dtype=torch.float32)
            acc = hl.zeros([tile_q, d], dtype=torch.float32)
            for tile_k in hl.tile(start, end):
                qk = hl.dot(q_blk, k[tile_k, h, :].T) * scale
                m_new = torch.maximum(m_i, torch.amax(qk, -1))
                p = torch.exp(qk - m_new[:, None])
                alpha = torch.exp(m_i - m_new)
                l_i = l_i * alpha + torch.sum(p, -1)
                acc = hl.dot(p, v[tile_k, h, :], acc=acc * alpha[:, None])
                m_i = m_new
            out[tile_q, h, :] = acc / l_i[:, None]
    return out


@pallasite.kernel
def heads_per_item_attention(q, k, v, offsets):
    """`for h in hl.grid(H)` inside the segment: every item runs all heads of its q tile."""
    total, heads, d = q.size()
    out = torch.zeros_like(q)
    scale = 1.0 / math.sqrt(d)
    for seq in hl.grid(offsets.size(0) - 1):
        start = offsets[seq]
        end = offsets[seq + 1]
        for h in hl.grid(heads):
            for tile_q in hl.tile(start, end):
                q_blk = q[tile_q, h, :]
                m_i = hl.full([tile_q], float("-inf"), dtype=torch.float32)
                l_i = hl.zeros([tile_q], dtype=torch.float32)
                acc = hl.zeros([tile_q, d], dtype=torch.float32)
                for tile_k in hl.tile(start, end):
                    qk = hl.dot(q_blk, k[tile_k, h, :].T) * scale
                    m_new = torch.maximum(m_i, torch.amax(qk, -1))
                    p = torch.exp(qk - m_new[:, None])
                    alpha = torch.exp(m_i - m_new)
                    l_i = l_i * alpha + torch.sum(p, -1)
                    acc = hl.dot(p, v[tile_k, h, :], acc=acc * alpha[:, None])
                    m_i = m_new
                out[tile_q, h, :] = acc / l_i[:, None]
    return out


@pallasite.kernel
def heads_in_tile_silu(q, k, v, offsets):
    """All heads in one tile (`q[tile_q, :, :]`), batched over heads: silu(q k^T) v / D."""
    total, heads, d = q.size()
    out = torch.zeros_like(q)
    for seq in hl.grid(offsets.size(0) - 1):
        start = offsets[seq]
        end = offsets[seq + 1]
        for tile_q in hl.tile(start, end):
            q_blk = q[tile_q, :, :].transpose(0, 1)
            acc = hl.zeros([heads, tile_q, d], dtype=torch.float32)
            for tile_k in hl.tile(start, end):
                qk = torch.bmm(q_blk, k[tile_k, :, :].permute(1, 2, 0))
                acc = torch.baddbmm(acc, torch.nn.functional.silu(qk), v[tile_k, :, :].transpose(0, 1))
            out[tile_q, :, :] = (acc / d).transpose(0, 1)
    return out


@pallasite.kernel
def dense_kv_heads(q, k, v, offsets):
    """Jagged q [rows, H, D]; segment s attends its own dense keys `k[seq, :, :, :]` ([n, H, S, D])."""
    total, heads, d = q.size()
    out = torch.zeros_like(q)
    scale = 1.0 / math.sqrt(d)
    for seq in hl.grid(offsets.size(0) - 1):
        k_seg = k[seq, :, :, :]  # the segment's whole K: its block index changes only with the owner
        for tile_q in hl.tile(offsets[seq], offsets[seq + 1]):
            q_blk = q[tile_q, :, :].transpose(0, 1)
            p = torch.softmax(torch.bmm(q_blk, k_seg.transpose(1, 2)) * scale, -1)
            out[tile_q, :, :] = torch.bmm(p, v[seq, :, :, :]).transpose(0, 1)
    return out


def inputs(d: int = 64, dense_keys: int = 0, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(sum(LENGTHS), HEADS, d, generator=generator)
    shape = (len(LENGTHS), HEADS, dense_keys, d) if dense_keys else q.shape
    k, v = (torch.randn(*shape, generator=generator) for _ in range(2))
    return q, k, v, offsets_of(LENGTHS)


def softmax_reference(q, k, v, offsets):
    out = torch.zeros_like(q)
    bounds = offsets.tolist()
    for s, (begin, end) in enumerate(zip(bounds[:-1], bounds[1:])):
        qs = q[begin:end].transpose(0, 1)  # [H, n, D]
        ks, vs = ((t[s] if t.dim() == 4 else t[begin:end].transpose(0, 1)) for t in (k, v))
        p = torch.softmax(qs @ ks.transpose(1, 2) / math.sqrt(q.size(2)), -1)
        out[begin:end] = (p @ vs).transpose(0, 1)
    return out


def silu_reference(q, k, v, offsets):
    out = torch.zeros_like(q)
    bounds = offsets.tolist()
    for begin, end in zip(bounds[:-1], bounds[1:]):
        qs, ks, vs = (t[begin:end].transpose(0, 1) for t in (q, k, v))
        out[begin:end] = (torch.nn.functional.silu(qs @ ks.transpose(1, 2)) @ vs / q.size(2)).transpose(0, 1)
    return out


FORMS = {  # kernel, inputs, reference, block sizes
    "grid": (heads_grid_attention, inputs, softmax_reference, [8, 8]),
    "per-item": (heads_per_item_attention, inputs, softmax_reference, [8, 8]),
    "in-tile": (heads_in_tile_silu, inputs, silu_reference, [8, 8]),
    "dense-kv": (dense_kv_heads, lambda: inputs(dense_keys=16), softmax_reference, [8]),
}


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_head_forms_flatten_and_match_torch_per_segment(loop_type):
    for name, (kernel, make, reference, blocks) in FORMS.items():
        args = make()
        call = plan_of(kernel, args, block_sizes=blocks, pallas_loop_type=loop_type)
        assert call.worklist is not None, (name, call.worklist_reason)
        _, out = code_and_output(kernel, args, block_sizes=blocks, pallas_loop_type=loop_type)
        torch.testing.assert_close(out, reference(*args), atol=1e-4, rtol=1e-4, msg=name)


def test_a_head_grid_axis_stays_a_parallel_grid_axis_before_the_items():
    args = inputs()
    call = plan_of(heads_grid_attention, args, block_sizes=[8, 8])
    worklist = call.worklist
    assert worklist.heads == ("h",) and worklist.item_axis == 1
    assert [axis.dim.name for axis in call.grid] == ["h", "work_item"]
    # each (head, item) program copies only its rows of its head to HBM (`out_hbm.at[rows, h]`,
    # plan/worklist_isolation.py): heads and items both split across cores
    assert [axis.semantics.value for axis in call.grid] == ["parallel", "parallel"]
    (write_back,) = worklist.write_backs
    assert [dim.name if dim is not None else None for dim in write_back.head_axes] == ["h", None]
    assert write_back.scratch_shape == (8, args[0].size(2))  # the head axis is not in the scratch
    # an inner hl.grid of heads runs in every item
    per_item = plan_of(heads_per_item_attention, args, block_sizes=[8, 8]).worklist
    assert per_item.per_item_grid == "h" and per_item.heads == ()
    # flattening is a schedule change: bitwise the per-segment grid's result (heads outer there
    # too, since the output's block is the head's)
    _, flat = code_and_output(heads_grid_attention, args, block_sizes=[8, 8])
    _, per_segment = code_and_output(heads_grid_attention, args, block_sizes=[8, 8],
                                     pallas_flatten_worklist=False, loop_orders=[[1, 0]])
    assert torch.equal(flat, per_segment)
    eager = run_ref(heads_grid_attention, args, config={"block_sizes": [8, 8]})
    torch.testing.assert_close(flat, eager, atol=1e-5, rtol=1e-5)


def test_head_forms_lower_to_mosaic():
    for name, (kernel, make, _, blocks) in FORMS.items():
        q, k, v, offsets = make()
        args = (q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16), offsets)
        for loop_type in (LOOP_TYPES if name == "grid" else ("fori_loop",)):
            check_tpu_lowering(kernel, args, block_sizes=[16] * len(blocks), pallas_loop_type=loop_type)


@pallasite.kernel
def per_head_lengths(q, offsets, lengths):
    """Segment s, head h covers rows [offsets[s], offsets[s] + lengths[s, h]): the q range
    depends on the head, which the host cannot compute per segment."""
    total, heads, d = q.size()
    out = torch.zeros_like(q)
    for seq in hl.grid(offsets.size(0) - 1):
        start = offsets[seq]
        for h in hl.grid(heads):
            for tile_q in hl.tile(start, start + lengths[seq, h]):
                out[tile_q, h, :] = q[tile_q, h, :] * 2.0
    return out


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_head_dependent_q_range_runs_per_segment_and_says_why(loop_type):
    q = torch.randn(sum(LENGTHS), HEADS, 128)
    offsets = offsets_of(LENGTHS)
    lengths = torch.tensor([[n, n // 2] for n in LENGTHS], dtype=torch.int32)
    call = plan_of(per_head_lengths, (q, offsets, lengths), block_sizes=[8], pallas_loop_type=loop_type)
    assert call.worklist is None
    assert call.worklist_reason.startswith("the q loop's bounds cannot be computed on the host")
    _, out = code_and_output(per_head_lengths, (q, offsets, lengths), block_sizes=[8], pallas_loop_type=loop_type)
    expected = torch.zeros_like(q)
    for s, begin in enumerate(offsets.tolist()[:-1]):
        for h in range(HEADS):
            n = int(lengths[s, h])
            expected[begin:begin + n, h] = q[begin:begin + n, h] * 2
    torch.testing.assert_close(out, expected)
    if loop_type == "fori_loop":
        check_tpu_lowering(per_head_lengths, (q, offsets, lengths), block_sizes=[8], pallas_loop_type=loop_type)


@pallasite.kernel
def heads_scale(x, offsets):
    """Segment x head programs with a store per head: `out[tile_q, h, :]`."""
    total, heads, d = x.size()
    out = torch.zeros_like(x)
    for seq, h in hl.grid([offsets.size(0) - 1, heads]):
        for tile_q in hl.tile(offsets[seq], offsets[seq + 1]):
            out[tile_q, h, :] = x[tile_q, h, :] * 2.0 + h
    return out


def heads_scale_reference(x, offsets):
    return x * 2.0 + torch.arange(x.size(1), dtype=x.dtype)[None, :, None]


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
@pytest.mark.parametrize("flatten", [True, False], ids=["flattened", "per-segment"])
def test_all_empty_segments_with_a_head_grid_return_the_empty_output(loop_type, flatten):
    """Offsets [0, 0, 0] and a [0, H, D] input: the empty tensor goes to the call padded, and
    the head's row block keeps the unit axis Mosaic squeezes (it was an IllegalBlockSize)."""
    for heads in (2, 8):
        x = torch.randn(0, heads, 128)
        _, out = code_and_output(heads_scale, (x, offsets_of((0, 0))), block_sizes=[8],
                                 pallas_loop_type=loop_type, pallas_flatten_worklist=flatten)
        assert out.shape == (0, heads, 128)


@pytest.mark.parametrize("loop_type", LOOP_TYPES)
def test_a_per_segment_head_grid_puts_the_heads_outside_on_its_own(loop_type):
    """`pallas_flatten_worklist=False` on `hl.grid([n, H])`: each head's output block is
    revisited by every segment, so the plan walks the segments innermost (heads outer)
    without the user's `loop_orders`; the result is the flattened schedule's. Under fori_loop
    the output streams instead (tests/test_partial_write_back.py), in the grid's own order."""
    x = torch.randn(sum(LENGTHS), HEADS, 128)
    offsets = offsets_of(LENGTHS)
    call = plan_of(heads_scale, (x, offsets), block_sizes=[8], pallas_loop_type=loop_type,
                   pallas_flatten_worklist=False)
    if loop_type == "fori_loop":  # 'out' streams (each tile writes back its rows): no block is revisited
        assert [op.memory for op in call.outputs] == [Memory.HBM]
        assert [axis.dim.name for axis in call.grid] == ["seq", "h"] and not call.grid_order_reason
    else:
        assert [axis.dim.name for axis in call.grid] == ["h", "seq"]
        assert [axis.semantics.value for axis in call.grid] == ["parallel", "arbitrary"]
        assert "revisit" in call.grid_order_reason and "'out'" in call.grid_order_reason
    _, per_segment = code_and_output(heads_scale, (x, offsets), block_sizes=[8], pallas_loop_type=loop_type,
                                     pallas_flatten_worklist=False)
    torch.testing.assert_close(per_segment, heads_scale_reference(x, offsets))
    _, flat = code_and_output(heads_scale, (x, offsets), block_sizes=[8], pallas_loop_type=loop_type)
    assert torch.equal(flat, per_segment)
    if loop_type == "fori_loop":
        check_tpu_lowering(heads_scale, (x, offsets), block_sizes=[8], pallas_loop_type=loop_type,
                           pallas_flatten_worklist=False)


def test_a_users_grid_order_that_makes_programs_overwrite_each_other_is_still_refused():
    """The plan reorders only a grid the user did not order: an explicit `loop_orders` that
    puts the revisiting axis outside keeps the error, which names the written tensor."""
    x = torch.randn(sum(LENGTHS), HEADS, 128)
    with pytest.raises(pallasite.exc.UnsupportedOperation, match="'out' is written with a block that does not "
                                                                 "change along grid axis 0"):
        code_and_output(heads_scale, (x, offsets_of(LENGTHS)), block_sizes=[8],
                        pallas_flatten_worklist=False, loop_orders=[[0, 1]])
