"""Reference mode's errors say what the compiled kernel's say: a host tensor used whole in
device code is named, with the `w[:]` that reads it as a block."""
from __future__ import annotations

import pytest
import torch

import pallasite
import pallasite.language as hl
from pallasite import exc
from pallasite.testing import run_ref


@pallasite.kernel
def layer_norm_whole_weight(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tm in hl.tile(x.size(0)):
        out[tm, :] = torch.nn.functional.layer_norm(x[tm, :], [x.size(1)], w, b)
    return out


def test_reference_mode_names_the_host_tensor_used_whole_as_compiling_does():
    """Trial NN: with a config, reference mode said "A host tensor is used whole" where the
    compiled kernel names 'w' and says `w[:]`."""
    x, w, b = torch.randn(16, 128), torch.randn(128), torch.randn(128)
    for run in (lambda: layer_norm_whole_weight(x, w, b),
                lambda: run_ref(layer_norm_whole_weight, (x, w, b), block_sizes=[8])):
        with pytest.raises(exc.IndexingError, match=r"Host tensor 'w' is used whole .* w\[:\]"):
            run()
