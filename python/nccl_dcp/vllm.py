"""vLLM's DCP all-to-all call, on nccl-dcp: the same function, arguments and
results as vLLM's dcp_a2a_lse_reduce (vllm/v1/attention/ops/dcp_alltoall.py),
one fused kernel instead of two all_to_all_single calls and a combine.

    # from vllm.v1.attention.ops.dcp_alltoall import dcp_a2a_lse_reduce
    from nccl_dcp.vllm import dcp_a2a_lse_reduce

    out = dcp_a2a_lse_reduce(cp_attn_out, cp_attn_lse, dcp_group)                    # [B, H/cp, D]
    out, lse = dcp_a2a_lse_reduce(cp_attn_out, cp_attn_lse, dcp_group, return_lse=True,
                                  is_lse_base_on_e=True)                             # + [B, H/cp]

cp_attn_out [B, H, D] holds this rank's partial attention for all H heads
(its KV shard), cp_attn_lse [B, H] their log-sum-exps (fp32, bf16 or fp16);
rank r gets heads [r*H/cp, (r+1)*H/cp) merged over the ranks, and with
return_lse the merged LSE, in cp_attn_lse's dtype as vLLM returns it.
cp_group is vLLM's GroupCoordinator (its device_group is used) or a
ProcessGroup. One context per (group, head dim, heads, dtypes, LSE base),
made on the first call and cached; close_contexts() closes them
(collective, before destroy_process_group()). CPU tensors (or a group
without NCCL) run nccl_dcp.reference instead: the same result, no kernel.
"""

import torch.distributed as dist

from . import _dropin, reference

_contexts = _dropin.ContextCache()


def dcp_a2a_lse_reduce(cp_attn_out, cp_attn_lse, cp_group, ctx=None, return_lse=False, is_lse_base_on_e=True):
    """vLLM's signature; ctx (vLLM's CPTritonContext) is accepted and unused, as there."""
    del ctx
    group = _dropin.process_group(cp_group)
    cp = dist.get_world_size(group)
    if cp == 1:  # as vLLM: nothing to exchange
        return (cp_attn_out, cp_attn_lse) if return_lse else cp_attn_out
    if cp_attn_out.dim() != 3 or tuple(cp_attn_lse.shape) != tuple(cp_attn_out.shape[:2]):
        raise ValueError(f"cp_attn_out must be [B, H, D] and cp_attn_lse [B, H]; got {tuple(cp_attn_out.shape)} and "
                         f"{tuple(cp_attn_lse.shape)}")
    batch, heads, head_dim = cp_attn_out.shape
    if heads % cp:
        raise ValueError(f"cp_attn_out has {heads} heads, not a multiple of the group's {cp} ranks")
    local_heads, base = heads // cp, _dropin.lse_base(is_lse_base_on_e)
    if cp_attn_out.stride(-1) != 1:
        cp_attn_out = cp_attn_out.contiguous()
    if cp_attn_lse.stride(-1) != 1:
        cp_attn_lse = cp_attn_lse.contiguous()
    if _dropin.uses_library(cp_attn_out, group):
        c = _contexts.get(group, cp_attn_out.device, head_dim=head_dim, local_heads=local_heads, dtype=cp_attn_out.dtype, lse_base=base,
                          lse_dtype=cp_attn_lse.dtype)
        if not return_lse:
            return c(cp_attn_out, cp_attn_lse)
        out, out_lse = c(cp_attn_out, cp_attn_lse, return_lse=True)
    else:
        out, out_lse = reference.a2a_lse_reduce(cp_attn_out, cp_attn_lse, local_heads, base, group)
        if not return_lse:
            return out
    return out, out_lse if out_lse.dtype == cp_attn_lse.dtype else out_lse.to(cp_attn_lse.dtype)


def close_contexts():
    """Closes the contexts the calls made: collective (every rank), before
    the process groups are destroyed."""
    _contexts.close()
