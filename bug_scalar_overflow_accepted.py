import torch, pallasite
import pallasite.language as hl

@pallasite.kernel
def where_i8(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = torch.where(x[t] > 0, x[t], 300)     # torch: "value cannot be converted to type int8_t without overflow"
    return out

@pallasite.kernel
def clamp_f32(x):
    out = torch.empty_like(x)
    for t in hl.tile(x.size(0)):
        out[t] = torch.clamp(x[t], max=1e40)           # torch: "value cannot be converted to type float without overflow"
    return out

x8 = torch.tensor([-5, 5, 0, 100], dtype=torch.int8)
xf = torch.tensor([1.0, -2.0, 3e38])
for k, x, tf in ((where_i8, x8, lambda x: torch.where(x > 0, x, 300)), (clamp_f32, xf, lambda x: torch.clamp(x, max=1e40))):
    try: print("torch    ", tf(x))
    except Exception as e: print("torch    ", type(e).__name__, e)
    try: print("pallasite", k(x))
    except Exception as e: print("pallasite", type(e).__name__, str(e).splitlines()[0])
