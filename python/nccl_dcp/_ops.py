"""The collective as torch.library custom ops, for torch.compile:

    torch.ops.nccl_dcp.a2a_lse_reduce(ctx_id, partial_out, partial_lse) -> (out, out_lse)
        functional: returns new tensors [B, Hl, D] and [B, Hl] fp32;
    torch.ops.nccl_dcp.a2a_lse_reduce_out(ctx_id, partial_out, partial_lse, out, out_lse) -> ()
        writes the preallocated out (and out_lse, which may be None).

ctx_id is Context.op_id: an int naming an open Context of this process
(never a pointer, so a stale id is refused, not dereferenced). Both ops run
on the current CUDA stream, do no host synchronization and allocate only
their outputs, so they are safe under torch.compile(fullgraph=True) and in
CUDA graphs (mode="reduce-overhead", torch.cuda.graph). Their fake
implementations give the output shapes from the context's head_dim and
local_heads, with no GPU and no library call.

Context.__call__ routes here by itself while torch.compile traces, so
`torch.compile(fn, fullgraph=True)` of a function that calls `ctx(...)`
compiles without a graph break; eager calls take the direct ctypes path
(the dispatcher would cost more host time than the call).
"""

import itertools
import threading
import weakref
from typing import Optional, Tuple

import torch

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
    ctx = _contexts.get(op_id)
    if ctx is None:
        raise ValueError(f"ctx_id {op_id} names no open nccl_dcp.Context of this process (closed, aborted, or "
                         f"never created): pass Context.op_id")
    return ctx


@torch.library.custom_op("nccl_dcp::a2a_lse_reduce_out", mutates_args=("out", "out_lse"))
def a2a_lse_reduce_out(ctx_id: int, partial_out: torch.Tensor, partial_lse: torch.Tensor, out: torch.Tensor,
                       out_lse: Optional[torch.Tensor]) -> None:
    lookup(ctx_id)._launch(partial_out, partial_lse, out, out_lse, None)


@a2a_lse_reduce_out.register_fake
def _(ctx_id, partial_out, partial_lse, out, out_lse):
    lookup(ctx_id)
    return None


@torch.library.custom_op("nccl_dcp::a2a_lse_reduce", mutates_args=())
def a2a_lse_reduce(ctx_id: int, partial_out: torch.Tensor,
                   partial_lse: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    ctx = lookup(ctx_id)
    out, out_lse = _outputs(ctx, partial_out, partial_lse)
    ctx._launch(partial_out, partial_lse, out, out_lse, None)
    return out, out_lse


@a2a_lse_reduce.register_fake
def _(ctx_id, partial_out, partial_lse):
    return _outputs(lookup(ctx_id), partial_out, partial_lse)


def _outputs(ctx, partial_out, partial_lse):
    spec = ctx.spec
    batch = partial_out.shape[0]
    return (partial_out.new_empty((batch, spec.local_heads, spec.head_dim)),
            partial_lse.new_empty((batch, spec.local_heads)))


def call(ctx, partial_out, partial_lse, out, out_lse, return_lse):
    """Context.__call__ under torch.compile: one of the two ops."""
    if out is None and out_lse is None:
        out, out_lse = torch.ops.nccl_dcp.a2a_lse_reduce(ctx.op_id, partial_out, partial_lse)
        return (out, out_lse) if return_lse else out
    if out is None:
        out = _outputs(ctx, partial_out, partial_lse)[0]
    if out_lse is None and return_lse:
        out_lse = _outputs(ctx, partial_out, partial_lse)[1]
    torch.ops.nccl_dcp.a2a_lse_reduce_out(ctx.op_id, partial_out, partial_lse, out, out_lse)
    return (out, out_lse) if out_lse is not None else out
