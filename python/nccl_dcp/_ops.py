"""The collective as torch.library custom ops, for torch.compile:

    torch.ops.nccl_dcp.a2a_lse_reduce(ctx_id, partial_out, partial_lse,
                                      row_counts=None, seq_lens=None, query_start_loc=None) -> (out, out_lse)
        functional: returns new tensors of the context's scatter mode,
        out HEAD [B, Hl, D] / TOKEN [n_r, H, D] / NONE [B, H, D] and
        out_lse [rows, heads] fp32; row_counts: host counts (a list of
        ints, TOKEN), n_r = row_counts[rank], else the even split;
    torch.ops.nccl_dcp.a2a_lse_reduce_out(ctx_id, partial_out, partial_lse, out, out_lse, row_counts=None,
                                          row_counts_device=None, seq_lens=None, query_start_loc=None) -> ()
        writes the preallocated out (and out_lse, which may be None); the
        only one that takes device counts (row_counts_device: the host
        cannot size out for them).

Registered when nccl_dcp is imported with torch importable (no library is
loaded, no GPU needed until a call runs).

ctx_id is Context.op_id: a plain int naming an open Context of this
process in a registry (never a pointer, nor a Python object in the graph).
That is what keeps the handle safe in torch.compile's caches: a traced
graph holds only the int; Dynamo guards on the attribute it read it from,
so another Context recompiles rather than reusing the graph; an id is never
reused within a process, so a graph kept past its context's close() finds
no context and raises ValueError instead of reaching a freed one; and a
graph from the FX cache in a new process is only reused when tracing gave
the same id there, that is for the context the trace itself read.

Both ops run on the current CUDA stream, do no host synchronization and
allocate only their outputs, so they are safe under
torch.compile(fullgraph=True) and in CUDA graphs (mode="reduce-overhead",
torch.cuda.graph). a2a_lse_reduce_out declares out and out_lse mutated
(mutates_args); the functional a2a_lse_reduce returns new tensors and is
marked as having a side effect (it is a collective: every rank must run it,
in the same order), so a graph whose outputs go unused keeps it. Their fake
implementations give the output shapes from the context's head_dim,
local_heads, scatter mode, rank and the call's host row_counts, with no GPU
and no library call.

Context.__call__ routes here by itself while torch.compile traces, so
`torch.compile(fn, fullgraph=True)` of a function that calls `ctx(...)`
compiles without a graph break; eager calls take the direct ctypes path
(the dispatcher would cost more host time than the call).
"""

import itertools
import threading
import weakref
from typing import List, Optional, Tuple

import torch

from ._validate import even_rows

_lock = threading.Lock()
_ids = itertools.count(1)
_contexts = weakref.WeakValueDictionary()


def register(ctx):
    """A new op id for ctx (an id is never reused in a process)."""
    with _lock:
        op_id = next(_ids)
        _contexts[op_id] = ctx
    return op_id


def unregister(op_id):
    with _lock:
        _contexts.pop(op_id, None)


def lookup(op_id):
    # Under torch.compile a context id that changed between calls can come
    # as a SymInt (automatic dynamic): int() specializes the graph on its
    # value, a guard, so each context keeps a graph of its own.
    op_id = op_id if type(op_id) is int else int(op_id)
    ctx = _contexts.get(op_id)
    if ctx is None:
        raise ValueError(f"ctx_id {op_id} names no open nccl_dcp.Context of this process (closed, aborted, or "
                         f"never created): pass Context.op_id")
    return ctx


@torch.library.custom_op("nccl_dcp::a2a_lse_reduce_out", mutates_args=("out", "out_lse"))
def a2a_lse_reduce_out(ctx_id: int, partial_out: torch.Tensor, partial_lse: torch.Tensor, out: torch.Tensor,
                       out_lse: Optional[torch.Tensor], row_counts: Optional[List[int]] = None,
                       row_counts_device: Optional[torch.Tensor] = None, seq_lens: Optional[torch.Tensor] = None,
                       query_start_loc: Optional[torch.Tensor] = None) -> None:
    lookup(ctx_id)._launch(partial_out, partial_lse, out, out_lse, None, _counts(row_counts, row_counts_device),
                           seq_lens, query_start_loc)


@a2a_lse_reduce_out.register_fake
def _(ctx_id, partial_out, partial_lse, out, out_lse, row_counts=None, row_counts_device=None, seq_lens=None,
      query_start_loc=None):
    lookup(ctx_id)
    return None


@torch.library.custom_op("nccl_dcp::a2a_lse_reduce", mutates_args=())
def a2a_lse_reduce(ctx_id: int, partial_out: torch.Tensor, partial_lse: torch.Tensor,
                   row_counts: Optional[List[int]] = None, seq_lens: Optional[torch.Tensor] = None,
                   query_start_loc: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    ctx = lookup(ctx_id)
    out, out_lse = _outputs(ctx, partial_out, partial_lse, row_counts)
    ctx._launch(partial_out, partial_lse, out, out_lse, None, _counts(row_counts, None), seq_lens, query_start_loc)
    return out, out_lse


@a2a_lse_reduce.register_fake
def _(ctx_id, partial_out, partial_lse, row_counts=None, seq_lens=None, query_start_loc=None):
    return _outputs(lookup(ctx_id), partial_out, partial_lse, row_counts)


def _keep_in_graphs():
    """A collective is never dead code: FX's eliminate_dead_code (and so
    Inductor) keeps the functional op even when its outputs go unused (the
    out= op is kept anyway: it mutates its arguments)."""
    has_side_effect = getattr(torch.fx.node, "has_side_effect", None)
    if has_side_effect is not None:  # PyTorch >= 2.1
        has_side_effect(torch.ops.nccl_dcp.a2a_lse_reduce.default)


_keep_in_graphs()


def _counts(row_counts, row_counts_device):
    """The row_counts of Context: the host list, else the device tensor."""
    if row_counts is not None and row_counts_device is not None:
        raise ValueError("row_counts and row_counts_device are both given: give one form")
    return list(row_counts) if row_counts is not None else row_counts_device


def _outputs(ctx, partial_out, partial_lse, row_counts=None):
    """New out and out_lse of the context's scatter mode: HEAD [B, Hl, D],
    TOKEN [n_r, H, D] (n_r from the host row_counts, else the even split),
    NONE [B, H, D]; out_lse [rows, heads] float32. Works on SymInts."""
    spec = ctx.spec
    batch = partial_out.shape[0]
    if spec.scatter != "token":
        if row_counts is not None:
            raise ValueError(f"row_counts is only for scatter='token'; this context's scatter is {spec.scatter!r}")
        rows = batch
    elif row_counts is not None:
        if len(row_counts) != spec.cp:
            raise ValueError(f"row_counts has {len(row_counts)} entries, expected cp = {spec.cp} (one per rank)")
        rows = row_counts[spec.rank]
    else:
        rows = even_rows(batch, spec.cp, spec.rank)
    return (partial_out.new_empty((rows, spec.heads, spec.head_dim)),
            partial_lse.new_empty((rows, spec.heads), dtype=torch.float32))


def call(ctx, partial_out, partial_lse, out, out_lse, return_lse, row_counts=None, seq_lens=None,
         query_start_loc=None):
    """Context.__call__ under torch.compile: one of the two ops. Device
    row_counts (a tensor) need the in-place op, so out (see Context.__call__)."""
    host = list(row_counts) if isinstance(row_counts, (list, tuple)) else None
    device = row_counts if row_counts is not None and host is None else None
    if device is not None and not isinstance(device, torch.Tensor):
        raise ValueError(f"row_counts must be a list or tuple of ints (host counts) or an int32 CUDA tensor "
                         f"(device counts), got {type(row_counts).__name__}")
    if device is not None and (out is None or (out_lse is None and return_lse)):
        name = "out" if out is None else "out_lse"
        raise ValueError(f"{name} is required with device row_counts: the host cannot know this rank's rows "
                         f"(see Context.__call__)")
    if out is None and out_lse is None:
        out, out_lse = torch.ops.nccl_dcp.a2a_lse_reduce(ctx.op_id, partial_out, partial_lse, host, seq_lens,
                                                         query_start_loc)
        return (out, out_lse) if return_lse else out
    if out is None:
        out = _outputs(ctx, partial_out, partial_lse, host)[0]
    if out_lse is None and return_lse:
        out_lse = _outputs(ctx, partial_out, partial_lse, host)[1]
    torch.ops.nccl_dcp.a2a_lse_reduce_out(ctx.op_id, partial_out, partial_lse, out, out_lse, host, device, seq_lens,
                                          query_start_loc)
    return (out, out_lse) if out_lse is not None else out
