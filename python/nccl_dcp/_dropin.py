"""What the drop-ins (vllm.py, flashinfer.py) share: the process group of a
call, who runs it -- the library (CUDA tensors on a group with an NCCL
backend) or nccl_dcp.reference (anything else: CPU tensors over gloo, for
tests and CPU runs; the same result in plain PyTorch) -- and a cache of
contexts, one per group and configuration, made on first use.

Making a context is collective, as NCCL's communicators are: the first call
of a configuration makes it on every rank at once, so that call must come
on every rank (engines call every layer on every rank anyway) and outside
CUDA-graph capture (engines warm up eagerly before capturing).
"""

import threading

import torch
import torch.distributed as dist

from . import context as _context

# The class the cache makes contexts of (the CPU tests swap in a stand-in).
Context = _context.Context


def process_group(group):
    """The torch.distributed ProcessGroup of what an engine passes: vLLM's
    GroupCoordinator (its device_group), a group name (FlashInfer takes
    one), a ProcessGroup, or None (the default group)."""
    if group is None:
        return dist.group.WORLD
    if isinstance(group, str):
        return dist.distributed_c10d._resolve_process_group(group)
    return getattr(group, "device_group", group)


def uses_library(tensor, group):
    """True when nccl-dcp runs the call: a CUDA tensor on a group whose CUDA
    backend is NCCL. Otherwise nccl_dcp.reference does (same result)."""
    if not isinstance(tensor, torch.Tensor) or not tensor.is_cuda:
        return False
    return "nccl" in str(dist.get_backend(group)).lower()


def lse_base(is_lse_base_on_e):
    return "e" if is_lse_base_on_e else 2


class ContextCache:
    """Contexts by (group, the tensors' device, configuration). The group is
    kept with its contexts, so its id() stays its own while they are cached."""

    def __init__(self):
        self._lock = threading.Lock()
        self._entries = {}

    def get(self, group, device, **config):
        """The context for calls on `device`'s tensors (made on that CUDA
        device: the group's communicator there)."""
        key = (id(group), str(device), tuple(sorted((k, str(v)) for k, v in config.items())))
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] is group and not getattr(entry[1], "closed", False):
                return entry[1]
        if device.type == "cuda":
            with torch.cuda.device(device):
                ctx = Context(group, **config)  # collective: outside the lock
        else:
            ctx = Context(group, **config)
        with self._lock:
            self._entries[key] = (group, ctx)
        return ctx

    def __len__(self):
        return len(self._entries)

    def close(self):
        """Closes every cached context: collective, every rank, before the
        groups are destroyed (destroy_process_group())."""
        with self._lock:
            entries, self._entries = list(self._entries.values()), {}
        for _, ctx in entries:
            ctx.close()
