"""FlashInfer's decode_cp_a2a_lse_reduce, on nccl-dcp: the same three
functions, arguments and layout as flashinfer.comm's (FlashInfer 0.7):

    # from flashinfer.comm import (decode_cp_a2a_lse_reduce,
    #                              decode_cp_a2a_lse_reduce_create_workspace)
    from nccl_dcp.flashinfer import decode_cp_a2a_lse_reduce, decode_cp_a2a_lse_reduce_create_workspace

    ws = decode_cp_a2a_lse_reduce_create_workspace(max_tokens, local_heads, cp_size, head_dim, dtype, group)
    out = decode_cp_a2a_lse_reduce(partial_o, partial_lse, ws, cp_rank, cp_size)   # [B, heads, D]

partial_o [B, heads, cp, D] (fp16 / bf16; partial_o[:, :, p] is what rank p
merges: its head j is global head p*heads + j), partial_lse [B, heads, cp]
fp32; the result is [B, heads, D] in partial_o's dtype, no merged LSE;
is_lse_base_on_e=False (base 2, FlashInfer's MLA) by default. Both inputs
are passed to the library as strided views, never copied. The workspace is
an object of this module, not a tensor: it holds the group and one nccl-dcp
context per LSE base, made by the first call with that base (collective:
before CUDA-graph capture, as FlashInfer asks of its workspace). Unlike
FlashInfer's, one workspace serves any stream. workspace.close() is
collective. CPU tensors run nccl_dcp.reference instead (tests, CPU runs).
"""

import torch
import torch.distributed as dist

from . import _dropin, reference
from .context import workspace_size

_MAX_CP = 64  # FlashInfer's bound, and nccl-dcp's (NCCL_DCP_MAX_RANKS)
_MAX_CHUNK = 1 << 20  # NCCL_DCP_MAX_BATCH_CAPACITY: more tokens run in chunks of it


def decode_cp_a2a_lse_reduce_workspace_size(max_tokens, local_heads, cp_size, head_dim, dtype):
    """Bytes of symmetric memory one rank's workspace holds (rows past
    max_tokens run in chunks of it)."""
    _check_geometry(max_tokens, local_heads, cp_size, head_dim, dtype)
    return workspace_size(cp_size, head_dim, local_heads, dtype, 2, max_batch=min(max_tokens, _MAX_CHUNK))


class Workspace:
    """What decode_cp_a2a_lse_reduce_create_workspace returns."""

    def __init__(self, max_tokens, local_heads, cp_size, head_dim, dtype, group):
        _check_geometry(max_tokens, local_heads, cp_size, head_dim, dtype)
        self.group = _dropin.process_group(group)
        self.rank, n = dist.get_rank(self.group), dist.get_world_size(self.group)
        if n != cp_size:
            raise ValueError(f"cp_size {cp_size} but the group has {n} ranks")
        self.max_tokens, self.local_heads, self.cp_size, self.head_dim, self.dtype = (
            max_tokens, local_heads, cp_size, head_dim, dtype)
        self._contexts = _dropin.ContextCache()

    def context(self, base, device):
        return self._contexts.get(self.group, device, head_dim=self.head_dim, local_heads=self.local_heads, dtype=self.dtype,
                                  lse_base=base, max_batch=min(self.max_tokens, _MAX_CHUNK))

    def close(self):
        """Closes the workspace's contexts: collective, before the group is destroyed."""
        self._contexts.close()


def decode_cp_a2a_lse_reduce_create_workspace(max_tokens, local_heads, cp_size, head_dim, dtype, group):
    """group: a ProcessGroup or its name, the CP ranks."""
    return Workspace(max_tokens, local_heads, cp_size, head_dim, dtype, group)


def decode_cp_a2a_lse_reduce(partial_o, partial_lse, workspace, cp_rank, cp_size, is_lse_base_on_e=False,
                             enable_pdl=None):
    """FlashInfer's signature; enable_pdl is accepted and unused (nccl-dcp
    launches with programmatic dependent launch unless NCCL_DCP_PDL=0)."""
    del enable_pdl
    if not isinstance(workspace, Workspace):
        raise ValueError("workspace was not created by nccl_dcp.flashinfer.decode_cp_a2a_lse_reduce_create_workspace")
    if (cp_rank, cp_size) != (workspace.rank, workspace.cp_size):
        raise ValueError(f"cp_rank {cp_rank} / cp_size {cp_size}, but the workspace's group has this rank as "
                         f"{workspace.rank} of {workspace.cp_size}")
    want = (workspace.local_heads, cp_size, workspace.head_dim)
    if partial_o.dim() != 4 or tuple(partial_o.shape[1:]) != want:
        raise ValueError(f"partial_o must be [B, {want[0]}, {want[1]}, {want[2]}] ([B, heads, cp, D]), got "
                         f"{tuple(partial_o.shape)}")
    if tuple(partial_lse.shape) != tuple(partial_o.shape[:3]):
        raise ValueError(f"partial_lse must be [B, heads, cp] = {tuple(partial_o.shape[:3])}, got "
                         f"{tuple(partial_lse.shape)}")
    if partial_o.dtype != workspace.dtype:
        raise ValueError(f"partial_o is {partial_o.dtype}, the workspace {workspace.dtype}")
    if partial_lse.dtype != torch.float32:
        raise ValueError(f"partial_lse must be float32, got {partial_lse.dtype}")
    # [B, heads, cp, D] seen as [B, cp, heads, D]: the transposed view the library takes as it is.
    po, pl = partial_o.transpose(1, 2), partial_lse.transpose(1, 2)
    base = _dropin.lse_base(is_lse_base_on_e)
    if _dropin.uses_library(partial_o, workspace.group):
        return workspace.context(base, partial_o.device)(po, pl)
    return reference.a2a_lse_reduce(po, pl, workspace.local_heads, base, workspace.group)[0]


def _check_geometry(max_tokens, local_heads, cp_size, head_dim, dtype):
    if min(max_tokens, local_heads, cp_size, head_dim) <= 0:
        raise ValueError("workspace geometry must be positive")
    if cp_size > _MAX_CP:
        raise ValueError(f"cp_size must not exceed {_MAX_CP}")
    if dtype not in (torch.float16, torch.bfloat16):
        raise TypeError("dtype must be torch.float16 or torch.bfloat16")
