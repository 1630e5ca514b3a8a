"""The PyTorch side, imported only when a Context is created: the raw
ncclComm_t of a ProcessGroup, its timeout and its state, streams.
Importing it registers the torch.library ops (_ops.py).
"""

from datetime import timedelta

import torch
import torch.distributed as dist

from . import _abi, _ops  # noqa: F401 -- importing _ops registers torch.ops.nccl_dcp.*

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}

# cudaStream_t of the current stream of a device, as an int, without
# building a torch.cuda.Stream (what Inductor's generated code calls).
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
if _raw_stream is None:  # pragma: no cover -- every PyTorch from 2.0 has it
    def _raw_stream(device):
        return torch.cuda.current_stream(device).cuda_stream

current_raw_stream = _raw_stream


def torch_dtype(name):
    return _DTYPES[name]


def cuda_device(index):
    return torch.device("cuda", index)


def _cuda_device():
    return torch.device("cuda", torch.cuda.current_device())


def comm_ptr_of(group):
    """The raw ncclComm_t of a ProcessGroup's NCCL backend on the current
    CUDA device: group._get_backend(cuda)._comm_ptr() (ProcessGroupNCCL,
    PyTorch >= 2.8, pytorch/pytorch#152496).

    ProcessGroupNCCL creates its communicator lazily (at the first
    collective, unless init_process_group got device_id=) and _comm_ptr()
    returns 0 until then, so one small all-reduce runs first. Every rank
    of the group must call this (Context creation is collective anyway)."""
    if not dist.is_initialized():
        raise ValueError("group_or_comm_ptr is a process group but torch.distributed is not initialized")
    device = _cuda_device()
    try:
        backend = group._get_backend(device)
    except (RuntimeError, AttributeError) as e:
        raise ValueError(f"group_or_comm_ptr {group!r} has no backend for {device}: {e}") from e
    get_ptr = getattr(backend, "_comm_ptr", None)
    if get_ptr is None:
        raise ValueError(
            f"group_or_comm_ptr: the {device} backend {type(backend).__name__} does not expose _comm_ptr(); "
            f"an NCCL process group of PyTorch >= 2.8 (ProcessGroupNCCL) is needed, or pass an ncclComm_t as an int")
    dist.all_reduce(torch.zeros(1, device=device), group=group)
    torch.cuda.current_stream(device).synchronize()
    ptr = int(get_ptr())
    if ptr == 0:
        raise ValueError(
            f"group_or_comm_ptr: ProcessGroupNCCL has no communicator on {device} (is this rank's current "
            f"device the one the group was created for? torch.cuda.set_device(local_rank) first)")
    return ptr


def group_timeout(group, device=None):
    """The timeout of a ProcessGroup as a timedelta: its backend's options
    on device (default: the current CUDA device) (`backend.options._timeout`,
    PyTorch 2.8 to 2.11 at least), else torch.distributed's default for NCCL
    groups, else None."""
    try:
        backend = group._get_backend(device if device is not None else _cuda_device())
        timeout = getattr(getattr(backend, "options", None), "_timeout", None)
        if isinstance(timeout, timedelta):
            return timeout
    except Exception:  # an older or another backend: fall back to the default below
        pass
    c10d = dist.distributed_c10d
    for name in ("default_pg_nccl_timeout", "default_pg_timeout"):
        timeout = getattr(c10d, name, None)
        if isinstance(timeout, timedelta):
            return timeout
    return None


def timeout_ms_of(timeout):
    """Milliseconds of a timedelta for ncclDcpConfig_t.timeoutMs, within a
    C int (about 24.8 days at most); None for None or a non-positive one."""
    if timeout is None or timeout.total_seconds() <= 0:
        return None
    return min(int(timeout.total_seconds() * 1000), _abi.INT_MAX)


def group_gone(group, comm, device):
    """None while `group` still holds the communicator `comm` on `device`,
    else why not: torch.distributed is shut down, the group was destroyed
    (destroy_process_group) or aborted, or its communicator is another one.
    Touches no communicator: it asks torch.distributed's bookkeeping, then
    ProcessGroupNCCL for its pointer (which refuses once aborted)."""
    gone = group_destroyed(group)
    if gone:
        return gone
    try:
        with torch.cuda.device(device):
            ptr = int(group._get_backend(torch.device("cuda", device))._comm_ptr())
    except Exception as e:  # an aborted ProcessGroupNCCL raises here
        return f"its process group's communicator is gone ({type(e).__name__}: {e})"
    if ptr != comm:
        return f"its process group's communicator on cuda:{device} is no longer {comm:#x} (aborted or re-created)"
    return None


def group_destroyed(group):
    """group_gone's first half, torch.distributed's bookkeeping only."""
    if not dist.is_initialized():
        return "torch.distributed is no longer initialized (destroy_process_group() ran)"
    pg_map = getattr(getattr(dist.distributed_c10d, "_world", None), "pg_map", None)
    if pg_map is not None and group not in pg_map:
        return "its process group was destroyed or aborted"
    return None


def stream_handle(stream, device):
    """cudaStream_t (an int) of a torch.cuda.Stream, an int handle, or None
    (PyTorch's current stream on device: under torch.cuda.graph, the
    capturing stream)."""
    if stream is None:
        return int(_raw_stream(device))
    handle = getattr(stream, "cuda_stream", stream)
    if isinstance(handle, bool) or not isinstance(handle, int) or not 0 <= handle <= _abi.SIZE_MAX:
        raise ValueError(f"stream must be a torch.cuda.Stream or a cudaStream_t int, got {stream!r}")
    stream_device = getattr(stream, "device", None)
    if stream_device is not None and stream_device != torch.device("cuda", device):
        raise ValueError(f"stream is on {stream_device}, but the context's communicator is on cuda:{device}")
    return handle


def empty(shape, dtype_name, device):
    return torch.empty(shape, dtype=_DTYPES[dtype_name], device=torch.device("cuda", device))
