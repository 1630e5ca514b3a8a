"""The PyTorch side, imported only when a Context is used: the raw
ncclComm_t of a ProcessGroup, streams, output allocation.
"""

import torch
import torch.distributed as dist

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def torch_dtype(name):
    return _DTYPES[name]


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
    device = torch.device("cuda", torch.cuda.current_device())
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


def stream_handle(stream, device):
    """cudaStream_t (an int) of a torch.cuda.Stream, an int handle, or None
    (PyTorch's current stream on device: under torch.cuda.graph, the
    capturing stream)."""
    if stream is None:
        return int(torch.cuda.current_stream(device).cuda_stream)
    handle = getattr(stream, "cuda_stream", stream)
    if not isinstance(handle, int):
        raise ValueError(f"stream must be a torch.cuda.Stream or a cudaStream_t int, got {type(stream).__name__}")
    stream_device = getattr(stream, "device", None)
    if stream_device is not None and stream_device != torch.device("cuda", device):
        raise ValueError(f"stream is on {stream_device}, but the context's communicator is on cuda:{device}")
    return handle


def empty(shape, dtype_name, device):
    return torch.empty(shape, dtype=_DTYPES[dtype_name], device=torch.device("cuda", device))
