"""Context: one nccl-dcp context on a PyTorch (or any) NCCL communicator,
called on torch tensors.

    ctx = nccl_dcp.Context(group, head_dim=512, local_heads=16, dtype=torch.bfloat16, lse_base=2)
    out = ctx(partial_out, partial_lse)            # [B, Hl, D]; any stream; graph-capturable
    out, out_lse = ctx(partial_out, partial_lse, return_lse=True)
    tok = nccl_dcp.Context(group, 512, 16, torch.bfloat16, 2, scatter="token", lse_dtype=torch.bfloat16)
    out = tok(partial_out, partial_lse, row_counts=[3, 5], seq_lens=seq_lens, query_start_loc=qsl)  # [n_r, H, D]
    ctx.check()                                    # raises if a peer failed (graph replays)
    ctx.close()                                    # collective, like creation (ctx.abort() after a failure)

Streams work as in NCCL: a call runs on the stream given (default:
PyTorch's current stream, under torch.cuda.graph the capturing one) and the
library orders it after the context's previous call, whatever stream that
one ran on, eagerly and under stream capture. Ordering the DATA is the
caller's job, as for any CUDA op: inputs must be ready on the call's stream.

An eager call costs one cached layout lookup and one library call: the
tensors' layout (shapes, strides) is checked once and its ncclDcpStrides_t
kept, their dtypes, devices and pointer alignment are checked every call
(and the library checks pointers, extents and overlaps every call); no
host sync, no allocation beyond `out` / `out_lse` when they are not given.
The lookup and the call run in C (_fastcall.c) when that helper was built
(pip install ./python), else in Python through ctypes (PyLauncher). Calls
with row_counts / seq_lens / query_start_loc, and every TOKEN call, take
the same cached path after a few more checks in Python (the additions'
dtypes, devices and shapes; out's rows against the split), a few
microseconds more.
"""

import ctypes
import math
import os
import warnings

from . import _abi
from ._library import NcclDcpError, check_nccl_versions, library, loaded_nccl_paths, torch_nccl_version
from ._validate import UNKNOWN_ROWS, CallSpec, check_call, check_call_args, dtype_name, make_strides

try:
    from . import _fastcall  # optional C helper: the eager hot path (see _fastcall.c for why)
except ImportError:
    _fastcall = None

# The library's config fields under the names of Context's arguments.
_CONFIG_ARGS = {"headDim": "head_dim", "localHeads": "local_heads", "dtype": "dtype", "lseBase": "lse_base",
                "maxBatch": "max_batch", "protocol": "protocol", "timeoutMs": "timeout_ms", "scatter": "scatter",
                "lseDtype": "lse_dtype", "wire": "wire"}
_NCCL_INVALID_USAGE = 5


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


def scatter_name(scatter):
    """The canonical name ("head", "token", "none") of a scatter mode given
    by name (any case) or ncclDcpScatter_t value."""
    if isinstance(scatter, str) and scatter.lower() in _abi.SCATTERS:
        return scatter.lower()
    if isinstance(scatter, int) and not isinstance(scatter, bool) and 0 <= scatter < len(_abi.SCATTERS):
        return _abi.SCATTERS[scatter]
    raise ValueError(f"scatter must be one of {', '.join(repr(x) for x in _abi.SCATTERS)}, got {scatter!r}")


def wire_name(wire):
    """The canonical name ("native", "fp8") of a wire format given by name
    (any case; "fp8_e4m3" too) or ncclDcpWire_t value."""
    if isinstance(wire, str) and wire.lower() in ("fp8_e4m3", "fp8e4m3", "e4m3"):
        return "fp8"
    if isinstance(wire, str) and wire.lower() in _abi.WIRES:
        return wire.lower()
    if isinstance(wire, int) and not isinstance(wire, bool) and 0 <= wire < len(_abi.WIRES):
        return _abi.WIRES[wire]
    raise ValueError(f"wire must be one of {', '.join(repr(x) for x in _abi.WIRES)}, got {wire!r}")


def lse_dtype_name(lse_dtype):
    """Canonical name of the partial LSEs' dtype (None: float32)."""
    name = "float32" if lse_dtype is None else dtype_name(lse_dtype)
    if name not in _abi.NCCL_DTYPES:
        raise ValueError(f"lse_dtype must be float32, bfloat16 or float16, got {lse_dtype!r}")
    return name


def c_int_arg(name, value, lo=_abi.INT_MIN + 1, hi=_abi.INT_MAX, what=""):
    """value, checked to be an int in [lo, hi] (by default: a C int other
    than INT_MIN, which the config reads as "unset"): ctypes would wrap
    anything else silently (2**32 -> 0)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} {value} is out of range [{lo}, {hi}]{what}")
    return value


def _optional_int(name, value, lo=_abi.INT_MIN + 1, what=""):
    if value is None:
        return _abi.NCCL_CONFIG_UNDEF_INT
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int or None, got {value!r}")
    return c_int_arg(name, value, lo=lo, what=what)


def make_config(head_dim, local_heads, dtype, lse_base, max_batch=None, protocol=None, timeout_ms=None,
                scatter="head", lse_dtype="float32", wire="native"):
    """The ncclDcpConfig_t of Context's arguments, checked by the library
    (ncclDcpWorkspaceSize: local, no GPU) so the rules live in one place;
    a rejected value raises ValueError naming the argument."""
    name = dtype_name(dtype)
    if name not in _abi.NCCL_DTYPES:
        raise ValueError(f"dtype must be bfloat16, float16 or float32, got {dtype!r}")
    c_int_arg("head_dim", head_dim)
    c_int_arg("local_heads", local_heads)
    cfg = _abi.Config(headDim=head_dim, localHeads=local_heads, dtype=_abi.NCCL_DTYPES[name],
                      lseBase=lse_base_code(lse_base), maxBatch=_optional_int("max_batch", max_batch),
                      protocol=protocol_code(protocol),
                      timeoutMs=_optional_int("timeout_ms", timeout_ms, lo=0,
                                              what=" (milliseconds; 0 waits forever)"),
                      scatter=_abi.SCATTERS.index(scatter_name(scatter)),
                      lseDtype=_abi.NCCL_DTYPES[lse_dtype_name(lse_dtype)],
                      wire=_abi.WIRES.index(wire_name(wire)))
    _workspace_size(cfg, 1)
    return cfg


def _workspace_size(cfg, n_ranks):
    lib = library()
    size = ctypes.c_size_t(0)
    try:
        lib.check(lib.cdll.ncclDcpWorkspaceSize(ctypes.byref(cfg), n_ranks, ctypes.byref(size)),
                  "ncclDcpWorkspaceSize")
    except NcclDcpError as e:
        field = next((f for f in _CONFIG_ARGS if f"config->{f}" in str(e)), None)
        arg = _CONFIG_ARGS.get(field, "n_ranks" if "nRanks" in str(e) else "config")
        raise ValueError(f"{arg}: {e}") from e
    return size.value


def workspace_size(n_ranks, head_dim, local_heads, dtype, lse_base, max_batch=None, protocol=None, *,
                   scatter="head", lse_dtype="float32", wire="native"):
    """Bytes of symmetric workspace one rank of n_ranks needs for this
    configuration (ncclDcpWorkspaceSize): what Context allocates, and the
    least a window region given to Context(window=...) must hold (TOKEN
    holds all H heads per row: cp times HEAD's; NONE too, or twice HEAD's
    in two phases: NCCL_DCP_NONE_ALGO; wire "fp8" about half)."""
    cfg = make_config(head_dim, local_heads, dtype, lse_base, max_batch, protocol, scatter=scatter,
                      lse_dtype=lse_dtype, wire=wire)
    return _workspace_size(cfg, c_int_arg("n_ranks", n_ranks))


class Context:
    """An nccl-dcp context on a communicator (collective: every rank of the
    communicator creates it with equal arguments, and closes it).

    group_or_comm_ptr: a torch.distributed ProcessGroup with an NCCL backend
    (its communicator on the current CUDA device), or a raw ncclComm_t as an
    int. head_dim (D) and local_heads (Hl) shape the tensors; dtype is
    bfloat16, float16 or float32 (a torch.dtype or a name); lse_base is 2 or
    'e'. max_batch (rows per chunk of the workspace) and protocol ('AUTO',
    'LL', 'LL128', 'SIMPLE') default to NCCL_DCP_MAX_BATCH / NCCL_DCP_PROTO,
    else the library's defaults, when None.

    timeout_ms bounds every device-side wait of a call (a peer that never
    calls): past it the kernel stops waiting, records ncclRemoteError and
    the context is POISONED: that call's outputs are undefined, and every
    later call, eager or replayed from a CUDA graph, writes NaN into all of
    its out / out_lse and returns at once; an eager call then raises
    NcclDcpError, and ctx.check() raises it for engines that only replay
    graphs. Nothing recovers a poisoned context: abort() it (and usually the
    communicator). 0 waits forever. Default (None): NCCL_DCP_TIMEOUT_MS when
    set, else the ProcessGroup's own timeout (init_process_group(timeout=),
    PyTorch's 10 minutes for NCCL when not given), else, for a raw
    ncclComm_t, the library's default (60000 ms). At most 2**31 - 1 ms. All
    ranks must use the same value (checked at creation).

    scatter: where the merged heads go (the library's ncclDcpScatter_t; H =
    cp*Hl; every rank passes partials [B, H, D] and LSEs [B, H]):
      "head"  (default) rank r gets its Hl heads of every row: out [B, Hl, D];
      "token" rank r gets every head of its slice of rows: out [n_r, H, D],
              the slices contiguous in rank order; n_r by the even split
              (the first B % cp ranks take one row more) or a call's
              row_counts (see __call__);
      "none"  every rank gets everything: out [B, H, D].
    out_lse has out's rows and heads, float32, in every mode.
    lse_dtype: the dtype of partial_lse, torch.float32 (default),
    torch.bfloat16 or torch.float16 (vLLM's kernels give bf16 LSEs); the
    merge still runs in fp32 and out_lse stays float32. Both are part of
    the config: equal on every rank (checked at creation).
    wire: what crosses the link, "native" (default: the partials as dtype
    holds them) or "fp8" (e4m3 with one fp32 scale per (row, head): about
    half the bytes, ~2% relative RMS error, the own share exact; bfloat16
    or float16, head_dim % 16 == 0, scatter "head" only). Part of the
    config too.

    window, window_offset, window_bytes: carve the workspace from an
    ncclWindow_t (an int) that the application registered on the
    communicator, [window_offset, window_offset + window_bytes), instead of
    allocating one (ncclDcpContextCreateInWindow); window_bytes defaults to
    workspace_size(). The window must outlive the context.
    """

    _launcher = None  # set by _adopt: a closed or half-made Context never calls the library
    _plain = True  # set by _adopt: HEAD or NONE, whose out has the batch's rows

    @staticmethod
    def _fast(*args):
        return -1

    def __init__(self, group_or_comm_ptr, head_dim, local_heads, dtype, lse_base, max_batch=None, protocol=None,
                 timeout_ms=None, *, window=None, window_offset=0, window_bytes=None, scatter="head",
                 lse_dtype="float32", wire="native"):
        self._h = None
        self._op_id = None
        self._lib = lib = library()
        # PyTorch may have been imported after the library was loaded.
        check_nccl_versions(lib.path, lib.built_nccl_version, lib.nccl_version, torch_nccl_version(),
                            loaded_nccl_paths())
        cfg = make_config(head_dim, local_heads, dtype, lse_base, max_batch, protocol, timeout_ms, scatter, lse_dtype,
                          wire)
        self.wire = wire_name(wire)
        if window is not None:
            c_int_arg("window", window, lo=1, hi=_abi.SIZE_MAX, what=" (an ncclWindow_t)")
            c_int_arg("window_offset", window_offset, lo=0, hi=_abi.SIZE_MAX)
            if window_bytes is not None:
                c_int_arg("window_bytes", window_bytes, lo=0, hi=_abi.SIZE_MAX)
        self._group = None if isinstance(group_or_comm_ptr, int) else group_or_comm_ptr  # keeps the group alive
        comm = self._comm_ptr(group_or_comm_ptr)
        from . import _torch
        if timeout_ms is None and self._group is not None and not os.environ.get("NCCL_DCP_TIMEOUT_MS"):
            group_ms = _torch.timeout_ms_of(_torch.group_timeout(self._group))
            if group_ms is not None:
                cfg.timeoutMs = group_ms
        self.timeout_ms = None if cfg.timeoutMs == _abi.NCCL_CONFIG_UNDEF_INT else cfg.timeoutMs
        rank, n_ranks, device = lib.comm_info(comm)
        self.rank, self.n_ranks, self._comm = rank, n_ranks, comm
        self.spec = CallSpec(cp=n_ranks, local_heads=local_heads, head_dim=head_dim, dtype=dtype_name(dtype),
                             device=device, scatter=scatter_name(scatter), lse_dtype=lse_dtype_name(lse_dtype),
                             rank=rank)
        handle = ctypes.c_void_p(None)
        if window is None:
            lib.check(lib.cdll.ncclDcpContextCreate(comm, ctypes.byref(cfg), ctypes.byref(handle)),
                      "ncclDcpContextCreate")
        else:
            if window_bytes is None:
                window_bytes = _workspace_size(cfg, n_ranks)
            lib.check(lib.cdll.ncclDcpContextCreateInWindow(comm, window, window_offset, window_bytes,
                                                            ctypes.byref(cfg), ctypes.byref(handle)),
                      "ncclDcpContextCreateInWindow")
        self._adopt(handle.value)

    def _adopt(self, handle):
        """Takes ownership of a created ncclDcpContext_t: the fast path's state."""
        from . import _ops, _torch
        self._h = handle
        self._op_id = _ops.register(self)
        self._registered = {}  # register_output's tensors by handle
        self._stream_handle = _torch.stream_handle
        self._compiling = _is_compiling_fn()
        self._device = self.spec.device
        self._hl, self._d = self.spec.local_heads, self.spec.head_dim
        self._heads = self.spec.heads  # heads per out row: Hl (HEAD), H (TOKEN, NONE)
        self._plain = self.spec.scatter != "token"  # out's rows are the batch: the launcher may make out
        self._start_launcher(_torch.cuda_device(self._device), _torch.current_raw_stream)

    def _start_launcher(self, device, raw_stream, native=True):
        """The eager hot path (_fastcall.Launcher, else PyLauncher) for
        tensors on `device`; raw_stream(index) gives the current stream.
        Tests call it again for CPU tensors, or with native=False."""
        from . import _torch
        from ._validate import ELEMENT_BYTES
        fn = ctypes.cast(self._lib.cdll.ncclDcpA2aLseReduceEx, ctypes.c_void_p).value
        cls = _fastcall.Launcher if native and _fastcall is not None else PyLauncher
        self._raw_stream = raw_stream
        self._out_lse_dtype = _torch.torch_dtype("float32")
        self._launcher = cls(fn, self._h, raw_stream, self._device, device, _torch.torch_dtype(self.spec.dtype),
                             _torch.torch_dtype(self.spec.lse_dtype), self._heads, self._d, self._out_lse_dtype,
                             ELEMENT_BYTES[self.spec.lse_dtype])
        self._fast = self._launcher.launch

    @staticmethod
    def _comm_ptr(group_or_comm_ptr):
        if isinstance(group_or_comm_ptr, bool):
            raise ValueError("group_or_comm_ptr must be a ProcessGroup or an ncclComm_t int, got a bool")
        if isinstance(group_or_comm_ptr, int):
            if group_or_comm_ptr == 0:
                raise ValueError("group_or_comm_ptr is 0 (a NULL ncclComm_t)")
            return c_int_arg("group_or_comm_ptr", group_or_comm_ptr, lo=1, hi=_abi.SIZE_MAX,
                             what=" (an ncclComm_t; 0 is NULL)")
        if not hasattr(group_or_comm_ptr, "_get_backend"):
            raise ValueError(f"group_or_comm_ptr must be a ProcessGroup or an ncclComm_t int, got "
                             f"{type(group_or_comm_ptr).__name__}")
        from . import _torch
        return _torch.comm_ptr_of(group_or_comm_ptr)

    @property
    def op_id(self):
        """The int that names this context to torch.ops.nccl_dcp.* (see _ops.py)."""
        if self._op_id is None:
            raise ValueError("the context is closed")
        return self._op_id

    # ---- the collective

    def __call__(self, partial_out, partial_lse, out=None, out_lse=None, stream=None, *, return_lse=False,
                 row_counts=None, seq_lens=None, query_start_loc=None):
        """Merges every rank's partials: returns out, or (out, out_lse) when
        out_lse is given or return_lse. out is the scatter mode's (HEAD
        [B, Hl, D], TOKEN [n_r, H, D], NONE [B, H, D]; out_lse its [rows,
        heads], float32), made when not given. Enqueued on stream (default:
        PyTorch's current stream); any stream, any mix of streams: the
        library orders the calls of one context. Every rank must call with
        the same batch (and the same row_counts), in the same order.
        Raises NcclDcpError when the context is poisoned (see Context).

        row_counts (scatter="token" only): this call's split, one count per
        rank (>= 0, summing to B; rank r gets rows [n_0+..+n_{r-1}, +n_r)):
          - a list or tuple of ints: host counts, checked now; out has
            row_counts[rank] rows. A call captured in a CUDA graph keeps
            the counts it was captured with.
          - an int32 tensor of cp entries on this GPU: device counts, read
            by the kernels when they run, so each replay of a captured graph
            may use new counts (write them into the same tensor). Checked
            there: counts that are negative or do not sum to B poison the
            context (ctx.check() raises ncclInvalidArgument). out is then
            REQUIRED (and out_lse, for the LSEs): the host cannot know n_r
            without a device-to-host copy, a sync that breaks CUDA-graph
            capture, so it cannot size out; it must hold the rows the counts
            give this rank (B rows always do: [B, H, D], of which the first
            n_r are written).
        Without row_counts the TOKEN split is even (the first B % cp ranks
        take one row more).
        seq_lens [numSeqs] and query_start_loc [numSeqs + 1] (vLLM's; int32
        tensors on this GPU, both or neither; any mode): rows of a sequence
        whose local length (seq_lens) is 0 on this rank, and rows outside
        [query_start_loc[0], query_start_loc[-1]) (padding), are empty on
        this rank whatever its partials hold (NaN, garbage): their LSE
        reads as -inf. A row empty on every rank merges to out 0 and
        out_lse -inf. Read by the kernels when they run (graph-safe: write
        new values into the same tensors between replays; numSeqs is fixed
        at capture)."""
        if self._compiling():
            if stream is not None:
                raise ValueError("stream= is not supported under torch.compile: the op runs on the current stream")
            from . import _ops
            return _ops.call(self, partial_out, partial_lse, out, out_lse, return_lse, row_counts, seq_lens,
                             query_start_loc)
        if row_counts is not None or seq_lens is not None or query_start_loc is not None or not self._plain:
            return self._call_ex(partial_out, partial_lse, out, out_lse, stream, return_lse, row_counts, seq_lens,
                                 query_start_loc)
        if out_lse is None and return_lse:
            try:
                out_lse = partial_lse.new_empty((partial_lse.shape[0], self._heads), dtype=self._out_lse_dtype)
            except (AttributeError, IndexError, TypeError):
                pass  # not a tensor: _launch_checked's checks say which argument
        res = self._fast(partial_out, partial_lse, out, out_lse, stream)  # out (made when None), or an int
        if res is not out:
            out = res if res.__class__ is not int else self._launch_checked(res, partial_out, partial_lse, out,
                                                                              out_lse, stream)
        return (out, out_lse) if out_lse is not None else out

    def _extras(self, partial_out, row_counts, seq_lens, query_start_loc):
        """The call's checked additions (CallExtras), or None when
        partial_out is not a tensor (check_call then says so)."""
        try:
            batch = int(partial_out.shape[0])
        except (AttributeError, IndexError, TypeError, ValueError):
            return None
        return check_call_args(self.spec, batch, row_counts, seq_lens, query_start_loc)

    def _call_ex(self, partial_out, partial_lse, out, out_lse, stream, return_lse, row_counts, seq_lens,
                 query_start_loc):
        """__call__ with additions, or on a TOKEN context: out and out_lse
        made here with the split's rows, then _launch_ex."""
        extras = self._extras(partial_out, row_counts, seq_lens, query_start_loc)
        if extras is None:
            check_call(self.spec, partial_out, partial_lse, out, out_lse)  # raises: not a tensor
        if extras.device_counts and (out is None or (out_lse is None and return_lse)):
            name = "out" if out is None else "out_lse"
            raise ValueError(f"{name} is required with device row_counts: the host cannot know this rank's rows "
                             f"n_r without a device-to-host copy (a sync, impossible under CUDA-graph capture); pass "
                             f"{name} with room for the rows the counts give rank {self.rank} (B rows always do)")
        try:
            if out is None:
                out = partial_out.new_empty((extras.rows, self._heads, self._d))
            if out_lse is None and return_lse:
                out_lse = partial_lse.new_empty((extras.rows, self._heads), dtype=self._out_lse_dtype)
        except (AttributeError, IndexError, TypeError):
            pass  # not a tensor: check_call says which argument
        self._launch_ex(partial_out, partial_lse, out, out_lse, stream, extras)
        return (out, out_lse) if out_lse is not None else out

    def _launch_ex(self, partial_out, partial_lse, out, out_lse, stream, extras):
        """One library call with checked additions: out's rows checked here
        against the split (the layout cache does not see the counts), then
        the launcher's call, else checked first."""
        rows = extras.rows
        if rows != UNKNOWN_ROWS:
            try:
                bad = out.shape[0] != rows or (out_lse is not None and out_lse.shape[0] != rows)
            except (AttributeError, IndexError, TypeError):
                bad = True
            if bad:
                check_call(self.spec, partial_out, partial_lse, out, out_lse, rows)  # raises, naming it
        address = ctypes.addressof(extras.struct) if extras.struct is not None else None
        res = self._fast(partial_out, partial_lse, out, out_lse, stream, address)
        if res is not out:
            self._launch_checked(res, partial_out, partial_lse, out, out_lse, stream, extras)

    def _launch(self, partial_out, partial_lse, out, out_lse, stream, row_counts=None, seq_lens=None,
                query_start_loc=None):
        """One library call on a given out (the torch.library ops'): the
        launcher's, else checked first."""
        if row_counts is not None or seq_lens is not None or query_start_loc is not None or not self._plain:
            extras = self._extras(partial_out, row_counts, seq_lens, query_start_loc)
            if extras is None:
                check_call(self.spec, partial_out, partial_lse, out, out_lse)  # raises: not a tensor
            self._launch_ex(partial_out, partial_lse, out, out_lse, stream, extras)
            return
        res = self._fast(partial_out, partial_lse, out, out_lse, stream)
        if res is not out:
            self._launch_checked(res, partial_out, partial_lse, out, out_lse, stream)

    def _launch_checked(self, r, partial_out, partial_lse, out, out_lse, stream, extras=None):
        """After the launcher returned the int r: raises the library's
        error (r > 0); else (r < 0, not called) makes out when None (HEAD
        and NONE without additions only), checks the call (ValueError
        naming the bad argument), caches its layout and makes it. Returns
        out."""
        if r > 0:
            self._lib.check(r, "ncclDcpA2aLseReduceEx")  # raises
        h = self._h
        if h is None:
            raise ValueError("the context is closed")
        if out is None:
            try:
                out = partial_out.new_empty(partial_out.shape[0], self._heads, self._d)
            except (AttributeError, IndexError, TypeError):
                pass  # not a tensor: check_call says which argument
        struct = extras.struct if extras is not None else None
        address = ctypes.addressof(struct) if struct is not None else None
        if stream is not None:
            handle = self._stream_handle(stream, self._device)  # raises ValueError on a bad one
            if not isinstance(stream, int):  # a torch.cuda.Stream: the launcher takes its handle
                res = self._fast(partial_out, partial_lse, out, out_lse, handle, address)
                if res is out:
                    return out
                if res > 0:
                    self._lib.check(res, "ncclDcpA2aLseReduceEx")  # raises
            stream = handle
        args = check_call(self.spec, partial_out, partial_lse, out, out_lse,
                          extras.rows if extras is not None else None)  # raises ValueError
        strides = make_strides(args)
        self._launcher.remember(partial_out, partial_lse, out, out_lse, args.batch, strides)
        s = self._raw_stream(self._device) if stream is None else stream
        p3 = out_lse.data_ptr() if out_lse is not None else None
        self._lib.check(self._lib.cdll.ncclDcpA2aLseReduceEx(h, partial_out.data_ptr(), partial_lse.data_ptr(),
                                                             out.data_ptr(), p3, args.batch, ctypes.byref(strides),
                                                             ctypes.byref(struct) if struct is not None else None,
                                                             s), "ncclDcpA2aLseReduceEx")
        return out

    def bind_stream(self, stream):
        """No-op kept for compatibility: since 0.2 a context takes calls on
        any stream (the library orders them). Checks stream and the handle."""
        from . import _torch
        s = _torch.stream_handle(stream, self.spec.device)
        self._lib.check(self._lib.cdll.ncclDcpContextBindStream(self._live_handle(), s), "ncclDcpContextBindStream")

    # ---- registered outputs

    def register_output(self, out, out_lse=None):
        """Registers out (and out_lse) for NONE's phase 2 straight into the
        peers' outputs (ncclDcpOutputRegister): a context of scatter "none"
        in two phases then writes every call whose out / out_lse lie inside
        them into its peers' tensors directly, one crossing instead of two.
        COLLECTIVE: every rank registers tensors of the same sizes, and
        later passes its calls' outputs at the same offsets with the same
        strides (keep one persistent output per context, as a CUDA graph
        does). With the nccl-window provider the memory must be NCCL's
        (ncclMemAlloc: a torch.cuda.MemPool over NCCL's allocator), each
        tensor at the same offset of its allocation on every rank, a
        multiple of 4096 (NCCL maps a peer's window at this rank's offset;
        checked on every rank at once: all refuse together); elsewhere
        registering is accepted and calls stage. Contiguous CUDA tensors of
        the context's device; out_lse float32. The context keeps both
        tensors alive until they are deregistered (or the context closed or
        aborted). Returns a handle for deregister_output(); close() and
        abort() release what is left."""
        h = self._live_handle()
        out_ptr, out_bytes = _registrable(out, "out", self.spec.device)
        lse_ptr, lse_bytes = (None, 0) if out_lse is None else _registrable(out_lse, "out_lse", self.spec.device)
        handle = ctypes.c_void_p()
        self._lib.check(self._lib.cdll.ncclDcpOutputRegister(h, out_ptr, out_bytes, lse_ptr, lse_bytes,
                                                             ctypes.byref(handle)),
                        "ncclDcpOutputRegister")
        # The tensors stay alive while registered: freed, their memory could
        # go to another tensor that the peers would then write.
        self._registered[handle.value] = (out, out_lse)
        return handle.value

    def deregister_output(self, handle):
        """Undoes register_output (ncclDcpOutputDeregister): waits for the
        context's last call, then releases the registration. Every rank
        deregisters between the same two calls."""
        self._lib.check(self._lib.cdll.ncclDcpOutputDeregister(self._live_handle(), handle),
                        "ncclDcpOutputDeregister")
        self._registered.pop(handle, None)

    # ---- state

    def async_error(self):
        """None, or the NcclDcpError a device-side wait recorded (a peer that
        did not take part in time), or the kernels (device row_counts they
        refused): the context is then poisoned. Reads
        host-mapped memory; no synchronization."""
        err = ctypes.c_int(0)
        self._lib.check(self._lib.cdll.ncclDcpGetAsyncError(self._live_handle(), ctypes.byref(err)),
                        "ncclDcpGetAsyncError")
        if err.value == _abi.NCCL_SUCCESS:
            return None
        if err.value == _abi.NCCL_INVALID_ARGUMENT:  # what the kernels refuse: device row_counts
            return NcclDcpError(err.value, f"nccl_dcp context (rank {self.rank} of {self.n_ranks}) is poisoned: "
                                           f"ncclInvalidArgument (device row_counts that are negative or do not "
                                           f"sum to the batch); its calls now write NaN. abort() it")
        return NcclDcpError(err.value, f"nccl_dcp context (rank {self.rank} of {self.n_ranks}) is poisoned: "
                                       f"{_abi.result_name(err.value)} (a device-side wait timed out after "
                                       f"{self.timeout_ms if self.timeout_ms is not None else 'the default'} ms, "
                                       f"or a peer is gone); its calls now write NaN. abort() it")

    def check(self):
        """Raises the context's asynchronous error (NcclDcpError) if a call
        failed on the GPU: for engines that only replay CUDA graphs and so
        never see an eager call fail. Call it once per step or so; it does
        not synchronize, so it sees what finished so far."""
        err = self.async_error()
        if err is not None:
            raise err

    def topology(self):
        """The context's path, provider, protocol and links (ncclDcpGetTopology), as a dict."""
        topo = _abi.Topology()
        self._lib.check(self._lib.cdll.ncclDcpGetTopology(self._live_handle(), ctypes.byref(topo)),
                        "ncclDcpGetTopology")
        n = topo.nRanks
        return {
            "rank": topo.rank, "n_ranks": n, "lsa_size": topo.lsaSize,
            "path": _name(_abi.PATHS, topo.path),
            "provider": _name(_abi.PROVIDERS, topo.provider),
            "path_note": topo.pathNote.decode(errors="replace"),
            "protocol": next((k for k, v in _abi.PROTOCOLS.items() if v == topo.protocol), topo.protocol),
            "classified": bool(topo.classified),
            "links": [_name(_abi.LINKS, x) for x in topo.link[:n]],
            "nvlink_gbps": list(topo.nvlinkGBps[:n]),
            "bus_ids": [topo.busId[i].value.decode() for i in range(n)],
            "numa_nodes": list(topo.numaNode[:n]),
            "cpusets": [topo.cpuset[i].value.decode() for i in range(n)],
            "source_detail": topo.sourceDetail.decode(errors="replace"),
            "simple_min_rows": topo.simpleMinRows,
        }

    # ---- lifetime
    #
    # close() and abort() need the communicator (destroy and abort
    # deregister the workspace's window on it), and torch.distributed frees
    # it in destroy_process_group() / abort: the context cannot keep it
    # alive. So both first ask torch.distributed whether the group still
    # holds the communicator the context was made on (_torch.group_gone),
    # and if not, never call the library: close() raises NcclDcpError and
    # abort() warns; either way the handle is dropped and its GPU memory
    # stays allocated until the process exits (freeing it would need the
    # communicator). Close contexts before destroying their group. For a
    # raw ncclComm_t nothing can be checked: close before ncclCommDestroy.

    def close(self):
        """Destroys the context: COLLECTIVE, every rank calls it, before the
        process group is destroyed. Idempotent."""
        h = self._detach()
        if h is None:
            return
        gone = self._group_gone()
        if gone:
            raise NcclDcpError(_NCCL_INVALID_USAGE, f"close(): {gone}, so the context cannot be destroyed (that "
                                                    f"needs the communicator); it is dropped and its GPU memory "
                                                    f"stays allocated until the process exits. Close contexts "
                                                    f"before destroy_process_group()")
        self._lib.check(self._lib.cdll.ncclDcpContextDestroy(h), "ncclDcpContextDestroy")
        self._registered.clear()  # released with the context: the tensors may go

    def abort(self):
        """Abandons the context after a failure (ctx.check() raised, a peer
        died): LOCAL, never waits on a peer (ncclDcpContextAbort). Call it
        before aborting or destroying the process group. Idempotent."""
        h = self._detach()
        if h is None:
            return
        gone = self._group_gone()
        if gone:
            warnings.warn(f"nccl_dcp.Context.abort(): {gone}; the context is dropped without calling the library "
                          f"(its GPU memory stays allocated until the process exits)", RuntimeWarning, stacklevel=2)
            return
        self._lib.check(self._lib.cdll.ncclDcpContextAbort(h), "ncclDcpContextAbort")
        self._registered.clear()

    def _detach(self):
        h, self._h = self._h, None
        if self._launcher is not None:
            self._launcher.close()
        if self._op_id is not None:
            from . import _ops
            _ops.unregister(self._op_id)
            self._op_id = None
        return h

    def _group_gone(self):
        if self._group is None:
            return None
        from . import _torch
        return _torch.group_gone(self._group, self._comm, self.spec.device)

    @property
    def closed(self):
        return self._h is None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        """Leaving normally, or on an error that left the context sound:
        close() (collective). Leaving on an error after a peer failed (exc
        is an NcclDcpError of ncclRemoteError, or the context reports an
        asynchronous error): abort() (local), as close() would wait up to
        the timeout on the failed peer and then raise over exc."""
        if leaves_by_abort(self, exc):
            self.abort()
        else:
            self.close()

    def __del__(self):
        # Destroy is collective: never run it from the garbage collector.
        if getattr(self, "_h", None) is not None:
            warnings.warn("nccl_dcp.Context was not closed: its workspace stays registered on the communicator "
                          "(call close() on every rank)", ResourceWarning, stacklevel=2)

    def _live_handle(self):
        if self._h is None:
            raise ValueError("the context is closed")
        return self._h


def _registrable(t, name, device):
    """(data_ptr, bytes) of a tensor register_output accepts."""
    import torch
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, not {type(t).__name__}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device}, the context on {device}")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (its whole storage range is registered)")
    if name == "out_lse" and t.dtype != torch.float32:
        raise ValueError(f"out_lse must be float32, not {t.dtype}")
    return t.data_ptr(), t.numel() * t.element_size()


def leaves_by_abort(ctx, exc):
    """Whether a with-block of ctx left on exc (None: normally) abandons the
    context (abort()) instead of closing it: exc is the library's
    ncclRemoteError (a device-side wait timed out: a peer did not take
    part), or ctx, still open, reports an asynchronous error (poisoned)."""
    if exc is None:
        return False
    if isinstance(exc, NcclDcpError) and getattr(exc, "result", None) == _abi.NCCL_REMOTE_ERROR:
        return True
    if ctx.closed:
        return False
    try:
        return ctx.async_error() is not None
    except Exception:  # the state cannot be read: close() as before, which says what is wrong
        return False


# ncclDcpA2aLseReduceEx for PyLauncher: plain pointers (ints) are converted
# more cheaply than the bound POINTER(Strides) (the strides and the call's
# args go by address).
_REDUCE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


class PyLauncher:
    """_fastcall.Launcher in Python, through ctypes: the same contract (see
    _fastcall.c), used when the C helper is not built. Its layout key holds
    each tensor's dtype and device too, so a hit is a call whose every
    property but its pointers was checked; the pointers' alignment is
    checked on every call, as there."""

    def __init__(self, fn, handle, raw_stream, device_index, device, dtype, lse_dtype, local_heads, head_dim,
                 out_lse_dtype=None, lse_align=4):
        self._fn = _REDUCE_FN(fn)
        self._h = handle
        self._lse_mask = lse_align - 1
        self._raw_stream, self._device_index = raw_stream, device_index
        self._hl, self._d = local_heads, head_dim
        self._layouts = {}  # layout key -> (batch, ncclDcpStrides_t, its address)

    @staticmethod
    def _key(po, pl, out, out_lse):
        if out_lse is None:
            return (po.shape, po.stride(), po.dtype, po.device, pl.shape, pl.stride(), pl.dtype, pl.device,
                    out.shape, out.stride(), out.dtype, out.device)
        return (po.shape, po.stride(), po.dtype, po.device, pl.shape, pl.stride(), pl.dtype, pl.device,
                out.shape, out.stride(), out.dtype, out.device,
                out_lse.shape, out_lse.stride(), out_lse.dtype, out_lse.device)

    def launch(self, po, pl, out, out_lse, stream, args=None):
        h = self._h
        if h is None or not self._layouts or out.__class__ is int:  # an int out: not -1, the same object
            return -1 if out.__class__ is not int else -1000
        try:  # _key inline: a call less
            if out is None:
                out = po.new_empty(po.shape[0], self._hl, self._d)
            p0, p1, p2 = po.data_ptr(), pl.data_ptr(), out.data_ptr()
            if out_lse is None:
                p3 = 0
                key = (po.shape, po.stride(), po.dtype, po.device, pl.shape, pl.stride(), pl.dtype, pl.device,
                       out.shape, out.stride(), out.dtype, out.device)
            else:
                p3 = out_lse.data_ptr()
                key = self._key(po, pl, out, out_lse)
            layout = self._layouts.get(key)
        except Exception:  # not tensors: the caller's checks name the argument
            return -1
        if layout is None or (p0 | p2) & 15 or p1 & self._lse_mask or p3 & 3:
            return -1
        if args is not None and type(args) is not int:
            return -1
        if stream is None:
            stream = self._raw_stream(self._device_index)
        elif type(stream) is not int or not 0 <= stream <= _abi.SIZE_MAX:
            return -1
        r = self._fn(h, p0, p1, p2, p3, layout[0], layout[2], args, stream)
        return r if r else out

    def remember(self, po, pl, out, out_lse, batch, strides):
        try:
            key = self._key(po, pl, out, out_lse)
        except Exception:
            return False
        if len(self._layouts) >= 256:
            self._layouts.clear()
        self._layouts[key] = (batch, strides, ctypes.addressof(strides))
        return True

    def close(self):
        self._h = None

    def layouts(self):
        return len(self._layouts)


def _name(names, code):
    return names[code] if 0 <= code < len(names) else code


def _is_compiling_fn():
    """torch.compiler.is_compiling (True while Dynamo traces), or a constant False."""
    try:
        import torch
        return torch.compiler.is_compiling
    except (ImportError, AttributeError):
        return lambda: False


def create_group(comm_ptrs, head_dim, local_heads, dtype, lse_base, max_batch=None, protocol=None, timeout_ms=None,
                 *, scatter="head", lse_dtype="float32", wire="native"):
    """Contexts for several communicators driven by this thread, one per GPU
    (e.g. from ncclCommInitAll), created together (ncclDcpContextCreateGroup):
    a list of Context, the i-th on comm_ptrs[i] (raw ncclComm_t ints).
    scatter, lse_dtype and wire as for Context.
    Call each on its own GPU's tensors; destroy them with destroy_group."""
    comms = [Context._comm_ptr(c) for c in comm_ptrs]
    if not comms:
        raise ValueError("comm_ptrs is empty")
    c_int_arg("len(comm_ptrs)", len(comms), lo=1)
    lib = library()
    cfg = make_config(head_dim, local_heads, dtype, lse_base, max_batch, protocol, timeout_ms, scatter, lse_dtype,
                      wire)
    infos = [lib.comm_info(c) for c in comms]
    handles = (ctypes.c_void_p * len(comms))()
    lib.check(lib.cdll.ncclDcpContextCreateGroup(len(comms), (ctypes.c_void_p * len(comms))(*comms),
                                                 ctypes.byref(cfg), handles), "ncclDcpContextCreateGroup")
    contexts = []
    for comm, (rank, n_ranks, device), handle in zip(comms, infos, handles):
        ctx = object.__new__(Context)
        ctx._lib, ctx._group, ctx._comm, ctx._h, ctx._op_id = lib, None, comm, None, None
        ctx.rank, ctx.n_ranks, ctx.wire = rank, n_ranks, wire_name(wire)
        ctx.timeout_ms = None if cfg.timeoutMs == _abi.NCCL_CONFIG_UNDEF_INT else cfg.timeoutMs
        ctx.spec = CallSpec(cp=n_ranks, local_heads=local_heads, head_dim=head_dim, dtype=dtype_name(dtype),
                            device=device, scatter=scatter_name(scatter), lse_dtype=lse_dtype_name(lse_dtype),
                            rank=rank)
        ctx._adopt(handle)
        contexts.append(ctx)
    return contexts


class group:
    """ncclDcpGroupStart/End as a context manager, for one thread that calls
    the contexts of several GPUs (made by create_group): the calls inside are
    checked at once and enqueued when the outermost group ends, the fallback
    path's all-to-alls in one NCCL group.

        with nccl_dcp.group():
            for ctx, (po, pl) in zip(contexts, inputs):
                outs.append(ctx(po, pl))
    """

    def __enter__(self):
        lib = library()
        lib.check(lib.cdll.ncclDcpGroupStart(), "ncclDcpGroupStart")
        return self

    def __exit__(self, *exc):
        lib = library()
        lib.check(lib.cdll.ncclDcpGroupEnd(), "ncclDcpGroupEnd")


def destroy_group(contexts):
    """Destroys contexts made by create_group (ncclDcpContextDestroyGroup);
    closed ones are skipped."""
    handles = [ctx._detach() for ctx in contexts]
    array = (ctypes.c_void_p * len(handles))(*handles)
    lib = library()
    lib.check(lib.cdll.ncclDcpContextDestroyGroup(len(handles), array), "ncclDcpContextDestroyGroup")
