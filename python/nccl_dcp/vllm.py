"""vLLM's DCP all-to-all call, on nccl-dcp: the same function, arguments and
results as vLLM's dcp_a2a_lse_reduce (vllm/v1/attention/ops/dcp.py; before
that, vllm/v1/attention/ops/dcp_alltoall.py), one fused kernel instead of
vLLM's all-to-all and combine kernels.

    # from vllm.v1.attention.ops.dcp import dcp_a2a_lse_reduce
    from nccl_dcp.vllm import dcp_a2a_lse_reduce

    out = dcp_a2a_lse_reduce(cp_attn_out, cp_attn_lse, dcp_group)                    # [B, H/cp, D]
    out, lse = dcp_a2a_lse_reduce(cp_attn_out, cp_attn_lse, dcp_group, return_lse=True,
                                  is_lse_base_on_e=True, seq_lens=seq_lens,
                                  query_start_loc=query_start_loc)                   # + [B, H/cp] fp32

cp_attn_out [B, H, D] holds this rank's partial attention for all H heads
(its KV shard), cp_attn_lse [B, H] their log-sum-exps (fp32, bf16 or fp16);
rank r gets heads [r*H/cp, (r+1)*H/cp) merged over the ranks, and with
return_lse the merged LSE, float32 whatever cp_attn_lse's dtype, as vLLM
returns it (a one-rank group returns its inputs unchanged, as vLLM does).
seq_lens [numSeqs] (this rank's local KV lengths) and query_start_loc
[numSeqs + 1] (int32, on the tensors' GPU; both or neither), as vLLM passes
them: rows of a sequence whose local length is 0, and rows past
query_start_loc[-1] (padding), are empty on this rank, whatever their
partials hold.
cp_group is vLLM's GroupCoordinator (its device_group is used) or a
ProcessGroup. One context per (group, head dim, heads, dtypes, LSE base),
made on the first call and cached; close_contexts() closes them
(collective, before destroy_process_group()). CPU tensors (or a group
without NCCL) run nccl_dcp.reference instead: the same result, no kernel.
"""

import torch
import torch.distributed as dist

from . import _dropin, reference

_contexts = _dropin.ContextCache()

# Context's argument names in its errors, as this function's caller knows them.
_NAMES = {"partial_out": "cp_attn_out", "partial_lse": "cp_attn_lse", "lse_dtype": "cp_attn_lse's dtype",
          "^dtype": "cp_attn_out's dtype"}


def dcp_a2a_lse_reduce(cp_attn_out, cp_attn_lse, cp_group, ctx=None, return_lse=False, is_lse_base_on_e=True,
                       seq_lens=None, query_start_loc=None):
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
    _check_empty_shards(seq_lens, query_start_loc)
    local_heads, base = heads // cp, _dropin.lse_base(is_lse_base_on_e)
    cp_attn_out = _as_the_library_takes_it(cp_attn_out)
    if cp_attn_lse.stride(-1) != 1:
        cp_attn_lse = cp_attn_lse.contiguous()
    if _dropin.uses_library(cp_attn_out, group):
        # vLLM's kernel takes any integer dtype; the library int32 (vLLM passes int32).
        seq_lens, query_start_loc = (_as_int32(t) for t in (seq_lens, query_start_loc))
        with _dropin.caller_names(_NAMES):
            c = _contexts.get(group, cp_attn_out.device, head_dim=head_dim, local_heads=local_heads,
                              dtype=cp_attn_out.dtype, lse_base=base, lse_dtype=cp_attn_lse.dtype)
            # The merged LSE is float32 (Context's out_lse), as vLLM returns it.
            return c(cp_attn_out, cp_attn_lse, return_lse=return_lse, seq_lens=seq_lens,
                     query_start_loc=query_start_loc)
    out, out_lse = reference.a2a_lse_reduce(cp_attn_out, cp_attn_lse, local_heads, base, group, seq_lens=seq_lens,
                                            query_start_loc=query_start_loc)
    return (out, out_lse) if return_lse else out


def _as_the_library_takes_it(t):
    """cp_attn_out as it is where the library can read it in place (unit
    last stride, every other stride and the pointer 16-byte aligned), else
    a packed copy: vLLM takes any strides, so its callers may pass views
    the library would refuse."""
    elt = t.element_size()
    strided_ok = all(size <= 1 or (stride > 0 and stride * elt % 16 == 0)
                     for size, stride in zip(t.shape[:-1], t.stride()[:-1]))
    if t.stride(-1) == 1 and strided_ok and t.data_ptr() % 16 == 0:
        return t
    packed = t.contiguous()
    return packed if packed.data_ptr() != t.data_ptr() else t.clone()  # contiguous but misaligned: a fresh one


def _as_int32(t):
    return t.to(torch.int32) if isinstance(t, torch.Tensor) and t.dtype == torch.int64 else t


def _check_empty_shards(seq_lens, query_start_loc):
    """vLLM's rules for the empty-shard metadata: both or neither,
    seq_lens [numSeqs] and query_start_loc [numSeqs + 1] (dtypes and
    devices are Context's to check)."""
    if seq_lens is None and query_start_loc is None:
        return
    if seq_lens is None or query_start_loc is None:
        given, missing = ("seq_lens", "query_start_loc") if seq_lens is not None else ("query_start_loc", "seq_lens")
        raise ValueError(f"{given} is given without {missing}: give both or neither")
    s, q = tuple(getattr(seq_lens, "shape", ())), tuple(getattr(query_start_loc, "shape", ()))
    if len(s) != 1 or len(q) != 1 or q[0] != s[0] + 1:
        raise ValueError(f"seq_lens must be [numSeqs] and query_start_loc [numSeqs + 1]; got {list(s)} and {list(q)}")


def close_contexts():
    """Closes the contexts the calls made: collective (every rank), before
    the process groups are destroyed."""
    _contexts.close()
