"""The same operation in plain PyTorch: all_to_all_single of the partials
and the LSEs, then the merge in fp32. The baseline of the tests and of the
example, and a readable statement of the math (include/nccl_dcp.h):

    l_s = lse_s with NaN and +inf read as -inf
    m   = max_s l_s (0 if all are -inf),  w_s = base^(l_s - m),  W = sum_s w_s
    out = sum_s (w_s / W) o_s  (0 if W == 0; a source with w_s == 0 is skipped, never multiplied)
    lse = m + log_base(W)      (-inf if W == 0)

accumulated in fp32 in source order s = 0..cp-1.
"""

import torch
import torch.distributed as dist

from . import _abi
from .context import lse_base_code

# One unit of rounding of each dtype, relative: the tolerance of a compare
# (the library's own reference uses the same, src/reference.cc).
_EPSILON = {torch.bfloat16: 1.0 / 128, torch.float16: 1.0 / 1024, torch.float32: 1e-5}


def merge(parts, lses, lse_base, dtype=torch.float32):
    """Merges cp sources: parts [cp, B, Hl, D], lses [cp, B, Hl] (source
    first). Returns (out [B, Hl, D], lse [B, Hl]) in dtype: float32 as the
    library accumulates, or float64 for an oracle."""
    base2 = lse_base_code(lse_base) == _abi.LSE_BASE_2
    exp = torch.exp2 if base2 else torch.exp
    log = torch.log2 if base2 else torch.log
    l = lses.to(dtype)
    # No host tensor: the reference also runs inside CUDA graph capture.
    l = torch.where(torch.isnan(l) | (l == float("inf")), torch.full_like(l, float("-inf")), l)
    m = l.amax(dim=0)
    m = torch.where(m == float("-inf"), torch.zeros_like(m), m)
    w = exp(l - m)
    total = torch.zeros_like(m)
    for s in range(l.shape[0]):
        total = total + w[s]
    weight = torch.where(total > 0, w / total, torch.zeros_like(w))
    out = torch.zeros(parts.shape[1:], dtype=dtype, device=parts.device)
    for s in range(parts.shape[0]):
        ws = weight[s].unsqueeze(-1)
        out = torch.where(ws != 0, out + ws * parts[s].to(dtype), out)
    lse = torch.where(total > 0, m + log(total), torch.full_like(m, float("-inf")))
    return out, lse


def exchange(partial_out, partial_lse, local_heads, group=None):
    """The all-to-all: every rank sends heads [p*Hl, (p+1)*Hl) to rank p.
    partial_out [B, cp*Hl, D] or [B, cp, Hl, D] (any strides), partial_lse
    [B, cp*Hl] or [B, cp, Hl]. Returns (parts [cp, B, Hl, D], lses [cp, B, Hl]),
    source first."""
    cp = dist.get_world_size(group)
    batch, d = partial_out.shape[0], partial_out.shape[-1]
    send = partial_out.reshape(batch, cp, local_heads, d).transpose(0, 1).contiguous()
    send_lse = partial_lse.reshape(batch, cp, local_heads).transpose(0, 1).float().contiguous()
    parts, lses = torch.empty_like(send), torch.empty_like(send_lse)
    dist.all_to_all_single(parts, send, group=group)
    dist.all_to_all_single(lses, send_lse, group=group)
    return parts, lses


def a2a_lse_reduce(partial_out, partial_lse, local_heads, lse_base, group=None):
    """The whole operation in PyTorch: exchange, then merge. Returns
    (out [B, Hl, D] in partial_out's dtype, lse [B, Hl] fp32)."""
    parts, lses = exchange(partial_out, partial_lse, local_heads, group)
    out, lse = merge(parts, lses, lse_base)
    return out.to(partial_out.dtype), lse


def count_mismatches(out, out_lse, want_out, want_lse):
    """Elements of (out, out_lse) that differ from the fp32 reference
    (want_out, want_lse) by more than the dtype's rounding; a non-finite out
    always counts. Returns a 0-dim int64 tensor (no host sync)."""
    eps = _EPSILON[out.dtype]
    got, want = out.float(), want_out.float()
    bad = ~(torch.isfinite(got) & ((got - want).abs() <= 1e-5 + eps * want.abs()))
    count = bad.sum()
    if out_lse is not None:
        both_inf = torch.isinf(want_lse) & (out_lse == want_lse)
        close = (torch.isfinite(out_lse) & torch.isfinite(want_lse)
                 & ((out_lse - want_lse).abs() <= 1e-5 * (1 + want_lse.abs())))
        count = count + (~(both_inf | close)).sum()
    return count
