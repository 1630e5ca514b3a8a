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

import contextlib
import re
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
    return _nccl_backend(group)


def library_device(group):
    """The device whose tensors nccl-dcp would merge on this group, before
    any call: the current CUDA device where the group's CUDA backend is
    NCCL, else None (nccl_dcp.reference runs the calls)."""
    if not torch.cuda.is_available() or not _nccl_backend(group):
        return None
    return torch.device("cuda", torch.cuda.current_device())


def _nccl_backend(group):
    return "nccl" in str(dist.get_backend(group)).lower()


def lse_base(is_lse_base_on_e, name="is_lse_base_on_e"):
    """Context's lse_base of an engine's bool flag (True: natural-log LSEs,
    False: base 2; numpy's bool too). Anything else is refused: a string
    such as FlashInfer's lse_mode "base2" is truthy and would silently read
    as base e."""
    if not isinstance(is_lse_base_on_e, bool) and type(is_lse_base_on_e).__name__ != "bool_":
        raise TypeError(f"{name} must be a bool (True: natural-log LSEs, False: base 2), got "
                        f"{is_lse_base_on_e!r}")
    return "e" if is_lse_base_on_e else 2


@contextlib.contextmanager
def caller_names(names, note=""):
    """Re-raises a ValueError of Context (made or called inside) with its
    argument names replaced by the caller's: names maps a Context name
    (partial_out, partial_lse, lse_dtype; "^dtype" for a message that
    starts with dtype) to the drop-in's own; note is appended. The same
    exception object (its type and attributes: NcclDcpArgumentError's
    result) with a new message."""
    try:
        yield
    except ValueError as e:
        if e.args and isinstance(e.args[0], str):
            message = e.args[0]
            for name, caller in names.items():
                pattern = rf"{name}\b" if name.startswith("^") else rf"\b{name}\b"
                message = re.sub(pattern, lambda m, caller=caller: caller, message)
            e.args = (message + note,) + e.args[1:]
        raise


class ContextCache:
    """Contexts by (group, the tensors' device, configuration). The group is
    kept with its contexts, so its id() stays its own while they are cached.

    Thread-safe: threads asking for one key at once get one context. Making
    one is collective (every rank pairs its creations in order), so a second
    creation for the same key would pair with a peer's next creation, or
    hang, and be left unclosed: one thread makes it, under that key's own
    lock (not the cache's: other keys go on meanwhile), and the others wait
    for it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._entries = {}
        self._making = {}  # key -> the lock held while that key's context is made (kept: one per key)

    def _cached(self, key, group):
        entry = self._entries.get(key)
        if entry is not None and entry[0] is group and not getattr(entry[1], "closed", False):
            return entry[1]
        return None

    def get(self, group, device, **config):
        """The context for calls on `device`'s tensors (made on that CUDA
        device: the group's communicator there)."""
        key = (id(group), str(device), tuple(sorted((k, str(v)) for k, v in config.items())))
        with self._lock:
            ctx = self._cached(key, group)
            if ctx is not None:
                return ctx
            making = self._making.setdefault(key, threading.Lock())
        with making:  # one creation per key at a time; the collective runs outside self._lock
            with self._lock:
                ctx = self._cached(key, group)  # made by the thread this one waited for
                if ctx is not None:
                    return ctx
            if device.type == "cuda":
                with torch.cuda.device(device):
                    ctx = Context(group, **config)
            else:
                ctx = Context(group, **config)
            with self._lock:
                self._entries[key] = (group, ctx)
        return ctx

    def __len__(self):
        return len(self._entries)

    def close(self):
        """Closes every cached context: collective, every rank, before the
        groups are destroyed (destroy_process_group()). Every context is
        closed (and dropped from the cache) even when one close() raises;
        then the first error is raised, the others noted on it."""
        with self._lock:
            entries, self._entries = list(self._entries.values()), {}
        errors = []
        for _, ctx in entries:
            try:
                ctx.close()
            except Exception as e:  # the rest are still closed
                errors.append(e)
        if errors:
            first = errors[0]
            if len(errors) > 1:
                _add_note(first, f"{len(errors) - 1} more close() failed after it: " +
                          "; ".join(f"{type(e).__name__}: {e}" for e in errors[1:]))
            raise first


def _add_note(error, note):
    """error.add_note(note) (Python 3.11+), else appended to its message."""
    if hasattr(error, "add_note"):
        error.add_note(note)
    elif error.args and isinstance(error.args[0], str):
        error.args = (f"{error.args[0]} ({note})",) + error.args[1:]
