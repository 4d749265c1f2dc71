"""Row-wise argmax of a float32 matrix into an int32 vector.

Shows an index-valued reduction over the untiled dimension and a 1-D output
indexed by the row tile. The result is int32 on purpose: TPUs have no 64-bit
vectors, so pallasite rejects int64 tensors (torch's default index dtype).
"""

from __future__ import annotations

import torch

import pallasite
import pallasite.language as hl


@pallasite.kernel
def argmax(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty([m], dtype=torch.int32, device=x.device)
    for tile_m in hl.tile(m):
        out[tile_m] = torch.argmax(x[tile_m, :], dim=1).to(torch.int32)
    return out


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.argmax(x, dim=1).to(torch.int32)


def example_inputs() -> tuple:
    torch.manual_seed(0)
    return (torch.randn(300, 500),)


def check() -> float:
    inputs = example_inputs()
    result = argmax(*inputs)
    expected = reference(*inputs)
    torch.testing.assert_close(result, expected, atol=0, rtol=0)
    return (result - expected).abs().max().item()


if __name__ == "__main__":
    print(f"argmax: max abs error {check():.2e}")
