"""FlashInfer's decode_cp_a2a_lse_reduce, on nccl-dcp: the same three
functions, arguments and layout as flashinfer.comm's (FlashInfer 0.7.1+,
where the LSE base is lse_mode):

    # from flashinfer.comm import (decode_cp_a2a_lse_reduce,
    #                              decode_cp_a2a_lse_reduce_create_workspace)
    from nccl_dcp.flashinfer import decode_cp_a2a_lse_reduce, decode_cp_a2a_lse_reduce_create_workspace

    ws = decode_cp_a2a_lse_reduce_create_workspace(max_tokens, local_heads, cp_size, head_dim, dtype, group)
    out = decode_cp_a2a_lse_reduce(partial_o, partial_lse, ws, cp_rank, cp_size)   # [B, heads, D]
    out = decode_cp_a2a_lse_reduce(partial_o, partial_lse, ws, cp_rank, cp_size, "basee")  # natural-log LSEs

partial_o [..., cp, D] (fp16 / bf16; partial_o[..., p, :] is what rank p
merges), partial_lse [..., cp] fp32 with the same leading dims; the result
is [..., D] in partial_o's dtype, no merged LSE. Every leading entry is
merged on its own, as there: the usual [B, heads, cp, D] with heads the
workspace's local_heads, or any other leading shape ([T, cp, D], ...).
lse_mode "base2" (FlashInfer's MLA, the default) or "basee". The API
before the merge (PR #4929 as first proposed, issue #4575) took
is_lse_base_on_e (a bool) and enable_pdl instead: both still accepted, by
keyword only.
[B, local_heads, cp, D] inputs are passed to the library as strided views,
never copied; other leading shapes as views too when their leading dims
can be merged into one (else a copy of them). The workspace is an object
of this module, not a tensor: it holds the group and the nccl-dcp contexts
its calls need, one per LSE base (and one of a single head per row, for
leading entries that are not a multiple of local_heads). Creating the
workspace makes the context of its lse_mode ("base2", FlashInfer's
default; a keyword of ours) on the current CUDA device, collectively, as
FlashInfer's creation does its collective work, so a first call can be
captured in a CUDA graph; any other context is made by the first call
that needs it (collective: before capture). Unlike FlashInfer's, one
workspace serves any stream. workspace.close() is collective. CPU tensors
run nccl_dcp.reference instead (tests, CPU runs).
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

    def __init__(self, max_tokens, local_heads, cp_size, head_dim, dtype, group, lse_mode="base2"):
        _check_geometry(max_tokens, local_heads, cp_size, head_dim, dtype)
        base = None if lse_mode is None else _lse_base(lse_mode, None)
        self.group = _dropin.process_group(group)
        self.rank, n = dist.get_rank(self.group), dist.get_world_size(self.group)
        if n != cp_size:
            raise ValueError(f"cp_size {cp_size} but the group has {n} ranks")
        self.max_tokens, self.local_heads, self.cp_size, self.head_dim, self.dtype = (
            max_tokens, local_heads, cp_size, head_dim, dtype)
        self._contexts = _dropin.ContextCache()
        device = _dropin.library_device(self.group)
        if base is not None and device is not None:
            self.context(base, device)  # collective now, as FlashInfer's creation: not at a captured first call

    def context(self, base, device, local_heads=None):
        """The context of one LSE base: local_heads heads per row (the
        workspace's, or 1 for leading entries that are not a multiple of
        it), max_tokens * its local_heads entries per chunk."""
        local_heads = self.local_heads if local_heads is None else local_heads
        rows = self.max_tokens * self.local_heads // local_heads
        return self._contexts.get(self.group, device, head_dim=self.head_dim, local_heads=local_heads, dtype=self.dtype,
                                  lse_base=base, max_batch=min(rows, _MAX_CHUNK))

    def close(self):
        """Closes the workspace's contexts: collective, before the group is destroyed."""
        self._contexts.close()


def decode_cp_a2a_lse_reduce_create_workspace(max_tokens, local_heads, cp_size, head_dim, dtype, group, *,
                                              lse_mode="base2"):
    """group: a ProcessGroup or its name, the CP ranks. Collective. lse_mode
    (ours, by keyword): the LSE base whose context is made now, on the
    current CUDA device ("base2" or "basee"; None: at its first call)."""
    return Workspace(max_tokens, local_heads, cp_size, head_dim, dtype, group, lse_mode)


_LSE_MODES = {"base2": False, "basee": True}
# Context's argument names in its errors, as this function's caller knows them.
_NAMES = {"partial_out": "partial_o"}
_NAMES_NOTE = " (partial_o and partial_lse as the library takes them: [rows, cp, heads, D] and [rows, cp, heads] views)"


def decode_cp_a2a_lse_reduce(partial_o, partial_lse, workspace, cp_rank, cp_size, lse_mode=None, *,
                             is_lse_base_on_e=None, enable_pdl=None):
    """FlashInfer's signature (0.7.1+: lse_mode "base2" or "basee", default
    "base2"). is_lse_base_on_e (a bool) and enable_pdl, the pre-merge
    API's arguments, are accepted by keyword: enable_pdl is unused (nccl-dcp
    launches with programmatic dependent launch unless NCCL_DCP_PDL=0)."""
    del enable_pdl
    base = _lse_base(lse_mode, is_lse_base_on_e)
    if not isinstance(workspace, Workspace):
        raise ValueError("workspace was not created by nccl_dcp.flashinfer.decode_cp_a2a_lse_reduce_create_workspace")
    if (cp_rank, cp_size) != (workspace.rank, workspace.cp_size):
        raise ValueError(f"cp_rank {cp_rank} / cp_size {cp_size}, but the workspace's group has this rank as "
                         f"{workspace.rank} of {workspace.cp_size}")
    cp, d, hl = workspace.cp_size, workspace.head_dim, workspace.local_heads
    if partial_o.dim() < 3 or tuple(partial_o.shape[-2:]) != (cp, d):
        raise ValueError(f"partial_o must be [..., cp_size, head_dim] = [..., {cp}, {d}] (at least 3-D, as "
                         f"[B, heads, {cp}, {d}]), got {tuple(partial_o.shape)}")
    lead = tuple(partial_o.shape[:-2])
    if tuple(partial_lse.shape) != lead + (cp,):
        raise ValueError(f"partial_lse must be [..., cp_size] with partial_o's leading dims = {lead + (cp,)}, got "
                         f"{tuple(partial_lse.shape)}")
    if partial_o.dtype != workspace.dtype:
        raise ValueError(f"partial_o is {partial_o.dtype}, the workspace {workspace.dtype}")
    if partial_lse.dtype != torch.float32:
        raise ValueError(f"partial_lse must be float32, got {partial_lse.dtype}")
    as_is = len(lead) == 2 and lead[1] == hl
    if as_is:
        po, pl, heads = partial_o, partial_lse, hl  # [B, Hl, cp, D]: as it is
    else:
        # Every leading entry merges on its own: n entries as rows of Hl heads
        # (or of one head, when n is not a multiple of Hl).
        n = 1
        for size in lead:
            n *= size
        heads = hl if n % hl == 0 else 1
        po = partial_o.reshape(n // heads, heads, cp, d)  # a view when the leading dims merge
        pl = partial_lse.reshape(n // heads, heads, cp)
    # [rows, heads, cp, D] seen as [rows, cp, heads, D]: the transposed view the library takes as it is.
    po, pl = po.transpose(1, 2), pl.transpose(1, 2)
    if _dropin.uses_library(partial_o, workspace.group):
        with _dropin.caller_names(_NAMES, _NAMES_NOTE):
            out = workspace.context(base, partial_o.device, heads)(po, pl)
    else:
        out = reference.a2a_lse_reduce(po, pl, heads, base, workspace.group)[0]
    return out if as_is else out.reshape(lead + (d,))


def _lse_base(lse_mode, is_lse_base_on_e):
    """Context's lse_base of lse_mode (FlashInfer 0.7.1+) and/or
    is_lse_base_on_e (the pre-merge API): either, or both when they agree."""
    if lse_mode is not None and (not isinstance(lse_mode, str) or lse_mode not in _LSE_MODES):
        hint = (" (the pre-merge API took is_lse_base_on_e here: pass it by keyword)"
                if isinstance(lse_mode, bool) else "")
        raise ValueError(f"lse_mode must be 'base2' or 'basee', got {lse_mode!r}{hint}")
    if is_lse_base_on_e is None:
        return _dropin.lse_base(_LSE_MODES[lse_mode or "base2"])
    base = _dropin.lse_base(is_lse_base_on_e)  # TypeError unless a bool
    if lse_mode is not None and _LSE_MODES[lse_mode] != is_lse_base_on_e:
        raise ValueError(f"lse_mode {lse_mode!r} and is_lse_base_on_e={is_lse_base_on_e} disagree: pass one of them")
    return base


def _check_geometry(max_tokens, local_heads, cp_size, head_dim, dtype):
    if min(max_tokens, local_heads, cp_size, head_dim) <= 0:
        raise ValueError("workspace geometry must be positive")
    if cp_size > _MAX_CP:
        raise ValueError(f"cp_size must not exceed {_MAX_CP}")
    if dtype not in (torch.float16, torch.bfloat16):
        raise TypeError("dtype must be torch.float16 or torch.bfloat16")
