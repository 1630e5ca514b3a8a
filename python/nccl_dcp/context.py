"""Context: one nccl-dcp context on a PyTorch (or any) NCCL communicator,
called on torch tensors.

    ctx = nccl_dcp.Context(group, head_dim=512, local_heads=16, dtype=torch.bfloat16, lse_base=2)
    out = ctx(partial_out, partial_lse)            # [B, Hl, D]; graph-capturable
    out, out_lse = ctx(partial_out, partial_lse, return_lse=True)
    ctx.close()                                    # collective, like creation

A call does only Python checks and one library call: no host sync, no
allocation beyond `out` / `out_lse` when they are not given, so it can be
captured by torch.cuda.graph and replayed.
"""

import ctypes
import math
import warnings

from . import _abi
from ._library import NcclDcpError, check_nccl_versions, library, loaded_nccl_paths, torch_nccl_version
from ._validate import CallSpec, check_call, dtype_name, layout_key, make_strides

# The library's config fields under the names of Context's arguments.
_CONFIG_ARGS = {"headDim": "head_dim", "localHeads": "local_heads", "dtype": "dtype", "lseBase": "lse_base",
                "maxBatch": "max_batch", "protocol": "protocol", "timeoutMs": "timeout_ms"}


def lse_base_code(lse_base):
    """ncclDcpLseBase_t of 2 / "2" / "e" / math.e."""
    if lse_base in (2, "2"):
        return _abi.LSE_BASE_2
    if lse_base == "e" or (isinstance(lse_base, float) and lse_base == math.e):
        return _abi.LSE_BASE_E
    raise ValueError(f"lse_base must be 2 or 'e' (math.e), got {lse_base!r}")


def protocol_code(protocol):
    """ncclDcpProtocol_t of a protocol name; None = NCCL_DCP_PROTO, else AUTO."""
    if protocol is None:
        return _abi.NCCL_CONFIG_UNDEF_INT
    code = _abi.PROTOCOLS.get(str(protocol).upper())
    if code is None:
        raise ValueError(f"protocol must be one of {', '.join(_abi.PROTOCOLS)} or None, got {protocol!r}")
    return code


def _optional_int(name, value):
    if value is None:
        return _abi.NCCL_CONFIG_UNDEF_INT
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int or None, got {value!r}")
    return value


def make_config(head_dim, local_heads, dtype, lse_base, max_batch=None, protocol=None, timeout_ms=None):
    """The ncclDcpConfig_t of Context's arguments, checked by the library
    (ncclDcpWorkspaceSize: local, no GPU) so the rules live in one place;
    a rejected value raises ValueError naming the argument."""
    name = dtype_name(dtype)
    if name not in _abi.NCCL_DTYPES:
        raise ValueError(f"dtype must be bfloat16, float16 or float32, got {dtype!r}")
    for arg, value in (("head_dim", head_dim), ("local_heads", local_heads)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{arg} must be an int, got {value!r}")
    cfg = _abi.Config(headDim=head_dim, localHeads=local_heads, dtype=_abi.NCCL_DTYPES[name],
                      lseBase=lse_base_code(lse_base), maxBatch=_optional_int("max_batch", max_batch),
                      protocol=protocol_code(protocol), timeoutMs=_optional_int("timeout_ms", timeout_ms))
    lib = library()
    size = ctypes.c_size_t(0)
    try:
        lib.check(lib.cdll.ncclDcpWorkspaceSize(ctypes.byref(cfg), 1, ctypes.byref(size)), "ncclDcpWorkspaceSize")
    except NcclDcpError as e:
        field = next((f for f in _CONFIG_ARGS if f"config->{f}" in str(e)), None)
        arg = _CONFIG_ARGS.get(field, "config")
        raise ValueError(f"{arg}: {e}") from e
    return cfg


class Context:
    """An nccl-dcp context on a communicator (collective: every rank of the
    communicator creates it with equal arguments, and closes it).

    group_or_comm_ptr: a torch.distributed ProcessGroup with an NCCL backend
    (its communicator on the current CUDA device), or a raw ncclComm_t as an
    int. head_dim (D) and local_heads (Hl) shape the tensors; dtype is
    bfloat16, float16 or float32 (a torch.dtype or a name); lse_base is 2 or
    'e'. max_batch (rows per chunk of the workspace), protocol ('AUTO',
    'LL', 'LL128', 'SIMPLE') and timeout_ms default to NCCL_DCP_* / the
    library's defaults when None.
    """

    def __init__(self, group_or_comm_ptr, head_dim, local_heads, dtype, lse_base, max_batch=None, protocol=None,
                 timeout_ms=None):
        self._handle = None
        self._lib = lib = library()
        # PyTorch may have been imported after the library was loaded.
        check_nccl_versions(lib.path, lib.built_nccl_version, lib.nccl_version, torch_nccl_version(),
                            loaded_nccl_paths())
        cfg = make_config(head_dim, local_heads, dtype, lse_base, max_batch, protocol, timeout_ms)
        self._group = None if isinstance(group_or_comm_ptr, int) else group_or_comm_ptr  # keeps the comm alive
        comm = self._comm_ptr(group_or_comm_ptr)
        rank, n_ranks, device = self._lib.comm_info(comm)
        self.rank, self.n_ranks = rank, n_ranks
        self.spec = CallSpec(cp=n_ranks, local_heads=local_heads, head_dim=head_dim, dtype=dtype_name(dtype),
                             device=device)
        handle = ctypes.c_void_p(None)
        self._lib.check(self._lib.cdll.ncclDcpContextCreate(comm, ctypes.byref(cfg), ctypes.byref(handle)),
                        "ncclDcpContextCreate")
        self._handle = handle
        self._stream = None  # bound by the first call, as in the library
        self._checked = {}   # layout keys of the four tensors -> (batch, Strides): eager calls repeat layouts

    @staticmethod
    def _comm_ptr(group_or_comm_ptr):
        if isinstance(group_or_comm_ptr, bool):
            raise ValueError("group_or_comm_ptr must be a ProcessGroup or an ncclComm_t int, got a bool")
        if isinstance(group_or_comm_ptr, int):
            if group_or_comm_ptr == 0:
                raise ValueError("group_or_comm_ptr is 0 (a NULL ncclComm_t)")
            return group_or_comm_ptr
        if not hasattr(group_or_comm_ptr, "_get_backend"):
            raise ValueError(f"group_or_comm_ptr must be a ProcessGroup or an ncclComm_t int, got "
                             f"{type(group_or_comm_ptr).__name__}")
        from . import _torch
        return _torch.comm_ptr_of(group_or_comm_ptr)

    # ---- the collective

    def __call__(self, partial_out, partial_lse, out=None, out_lse=None, stream=None, *, return_lse=False):
        """Merges every rank's partials of this rank's heads: returns out
        [B, Hl, D], or (out, out_lse) when out_lse is given or return_lse.
        Enqueued on stream (default: PyTorch's current stream); every rank
        must call with the same batch, in the same order."""
        from . import _torch
        handle = self._live_handle()
        spec = self.spec
        batch = _rows(partial_out)
        if out is None:
            out = _torch.empty((batch, spec.local_heads, spec.head_dim), spec.dtype, spec.device)
        if out_lse is None and return_lse:
            out_lse = _torch.empty((batch, spec.local_heads), "float32", spec.device)
        batch, strides = self._check(partial_out, partial_lse, out, out_lse)
        s = _torch.stream_handle(stream, spec.device)
        if self._stream is not None and s != self._stream:
            raise ValueError(
                f"stream {s:#x} is not the stream {self._stream:#x} this context is bound to (its first call's): "
                f"calls on one context must be ordered. Order the old stream's work before the new one (e.g. "
                f"torch.cuda.synchronize()), then ctx.bind_stream(stream)")
        self._lib.check(self._lib.cdll.ncclDcpA2aLseReduce(
            handle, partial_out.data_ptr(), partial_lse.data_ptr(), out.data_ptr(),
            out_lse.data_ptr() if out_lse is not None else None, batch, ctypes.byref(strides), s),
            "ncclDcpA2aLseReduce")
        self._stream = s
        return (out, out_lse) if out_lse is not None else out

    def _check(self, partial_out, partial_lse, out, out_lse):
        """(batch, ncclDcpStrides_t) of a call, checked once per layout."""
        try:
            key = tuple(layout_key(t) for t in (partial_out, partial_lse, out, out_lse))
        except (AttributeError, TypeError):
            key = None  # not tensors: check_call says which
        hit = self._checked.get(key)
        if hit is None:
            args = check_call(self.spec, partial_out, partial_lse, out, out_lse)
            if len(self._checked) >= 64:
                self._checked.clear()
            hit = self._checked[key] = (args.batch, make_strides(args))
        return hit

    def bind_stream(self, stream):
        """Rebinds the context to stream (ncclDcpContextBindStream). The caller
        guarantees that work on the previous stream is ordered before it."""
        from . import _torch
        s = _torch.stream_handle(stream, self.spec.device)
        self._lib.check(self._lib.cdll.ncclDcpContextBindStream(self._live_handle(), s), "ncclDcpContextBindStream")
        self._stream = s

    # ---- state

    def async_error(self):
        """None, or the NcclDcpError a device-side wait recorded (a peer that
        did not take part): the context is then poisoned. No synchronization."""
        err = ctypes.c_int(0)
        self._lib.check(self._lib.cdll.ncclDcpGetAsyncError(self._live_handle(), ctypes.byref(err)),
                        "ncclDcpGetAsyncError")
        if err.value == _abi.NCCL_SUCCESS:
            return None
        return NcclDcpError(err.value, f"asynchronous error on the context: {_abi.result_name(err.value)}")

    def topology(self):
        """The context's path, protocol and links (ncclDcpGetTopology), as a dict."""
        topo = _abi.Topology()
        self._lib.check(self._lib.cdll.ncclDcpGetTopology(self._live_handle(), ctypes.byref(topo)),
                        "ncclDcpGetTopology")
        n = topo.nRanks
        return {
            "rank": topo.rank, "n_ranks": n, "lsa_size": topo.lsaSize,
            "path": _abi.PATHS[topo.path] if 0 <= topo.path < len(_abi.PATHS) else topo.path,
            "protocol": next((k for k, v in _abi.PROTOCOLS.items() if v == topo.protocol), topo.protocol),
            "classified": bool(topo.classified),
            "links": [_abi.LINKS[x] if 0 <= x < len(_abi.LINKS) else x for x in topo.link[:n]],
            "nvlink_gbps": list(topo.nvlinkGBps[:n]),
            "bus_ids": [topo.busId[i].value.decode() for i in range(n)],
            "numa_nodes": list(topo.numaNode[:n]),
            "cpusets": [topo.cpuset[i].value.decode() for i in range(n)],
            "source_detail": topo.sourceDetail.decode(errors="replace"),
            "simple_min_rows": topo.simpleMinRows,
        }

    # ---- lifetime

    def close(self):
        """Destroys the context: COLLECTIVE, every rank calls it. Idempotent."""
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        self._lib.check(self._lib.cdll.ncclDcpContextDestroy(handle), "ncclDcpContextDestroy")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # Destroy is collective: never run it from the garbage collector.
        if getattr(self, "_handle", None) is not None:
            warnings.warn("nccl_dcp.Context was not closed: its workspace stays registered on the communicator "
                          "(call close() on every rank)", ResourceWarning, stacklevel=2)

    def _live_handle(self):
        if self._handle is None:
            raise ValueError("the context is closed")
        return self._handle


def _rows(partial_out):
    shape = getattr(partial_out, "shape", None)
    if shape is None or len(shape) < 1:
        raise ValueError(f"partial_out must be a tensor [B, cp*Hl, D] or [B, cp, Hl, D], got "
                         f"{type(partial_out).__name__}")
    return int(shape[0])

