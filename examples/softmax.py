"""Row softmax: each program owns a block of whole rows.

Shows a 1-D ``hl.tile`` loop over rows with the full row loaded (``x[tile_m,
:]``), reductions over the untiled dimension with ``keepdim``, math in float32
for any input dtype, and a cast back to the output dtype. Checked with float32
and bfloat16 inputs.
"""

from __future__ import annotations

import torch

import pallasite
import pallasite.language as hl


@pallasite.kernel
def softmax(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        row = x[tile_m, :].to(torch.float32)
        row = row - torch.amax(row, dim=1, keepdim=True)
        e = torch.exp(row)
        out[tile_m, :] = (e / torch.sum(e, dim=1, keepdim=True)).to(out.dtype)
    return out


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.to(torch.float32), dim=1).to(x.dtype)


def example_inputs(dtype: torch.dtype = torch.float32) -> tuple:
    torch.manual_seed(0)
    return (torch.randn(250, 384).to(dtype),)


# (atol, rtol) per input dtype; bfloat16 results may differ by one rounding step.
TOLERANCES = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1e-2, 1e-2)}


def check() -> float:
    worst = 0.0
    for dtype, (atol, rtol) in TOLERANCES.items():
        inputs = example_inputs(dtype)
        result = softmax(*inputs)
        expected = reference(*inputs)
        torch.testing.assert_close(result, expected, atol=atol, rtol=rtol)
        worst = max(worst, (result.float() - expected.float()).abs().max().item())
    return worst


if __name__ == "__main__":
    print(f"softmax: max abs error {check():.2e}")
