"""Argument checks of a call, before anything reaches the library.

Works on anything tensor-shaped (duck typing, no torch import): a tensor is
read through `.shape`, `.stride()`, `.dtype`, `.device` (`.type`,
`.index`) and `.data_ptr()`, so the checks run without torch and without a
GPU (tests/test_validate.py uses a small fake tensor). Every failure is a
ValueError naming the argument and the rule it broke.

Accepted layouts (element strides; the last dimension contiguous), with
H = cp*Hl and the context's scatter mode:
  partial_out  [B, cp*Hl, D]  or [B, cp, Hl, D]  (e.g. the attention
               kernel's [B, Hl, cp, D] buffer passed as .transpose(1, 2))
  partial_lse  [B, cp*Hl]     or [B, cp, Hl], of the context's lse_dtype
               (float32 by default; bfloat16 or float16)
  out          HEAD [B, Hl, D]; TOKEN [n_r, H, D]; NONE [B, H, D]
  out_lse      the rows and heads of out, float32
where n_r is this rank's rows of the TOKEN split: the even split (the first
B % cp ranks take one row more) or the call's row_counts.
Strides are passed to the library as they are (ncclDcpStrides_t), never
copied. A dimension of size 1 is passed as 0 ("packed"): its stride is
never used, and torch may give it any value.
"""

from dataclasses import dataclass

from . import _abi

# Bytes per element of the dtypes the library moves, by canonical name.
ELEMENT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
_DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32",
                  "float": "float32"}


def dtype_name(dtype):
    """Canonical name of a dtype given as a torch.dtype or a string
    ("bf16", "torch.bfloat16", ...)."""
    name = dtype if isinstance(dtype, str) else str(dtype)
    if name.startswith("torch."):
        name = name[len("torch."):]
    return _DTYPE_ALIASES.get(name, name)


@dataclass(frozen=True)
class CallSpec:
    """What one context's calls must look like."""

    cp: int            # ranks of the communicator
    local_heads: int   # Hl
    head_dim: int      # D
    dtype: str         # canonical name of partial_out's and out's element type
    device: int        # CUDA device index of the communicator
    scatter: str = "head"       # "head", "token" or "none" (ncclDcpScatter_t)
    lse_dtype: str = "float32"  # canonical name of partial_lse's element type
    rank: int = 0               # this rank (the TOKEN split)

    @property
    def heads(self):
        """Heads per row of out: Hl for HEAD, H = cp*Hl for TOKEN and NONE."""
        return self.local_heads if self.scatter == "head" else self.cp * self.local_heads


# out_rows of check_call: the rows of out are not known on the host (TOKEN
# with device row counts); only its heads and layout are checked.
UNKNOWN_ROWS = -1


def even_rows(batch, cp, rank):
    """Rows of `rank` in the even TOKEN split of batch rows: the first
    batch % cp ranks take one row more (works on torch SymInts too)."""
    return (batch + cp - 1 - rank) // cp


def out_rows(spec, batch, row_counts=None):
    """Rows of out on spec.rank: the batch (HEAD, NONE), or this rank's
    share of the TOKEN split (even, or the host row_counts)."""
    if spec.scatter != "token":
        return batch
    if row_counts is not None:
        return row_counts[spec.rank]
    return even_rows(batch, spec.cp, spec.rank)


@dataclass(frozen=True)
class CallArgs:
    """A checked call: the batch and the library's strides."""

    batch: int
    strides: dict  # ncclDcpStrides_t field -> elements (0 = packed / unused)


def _shape(t):
    return tuple(int(s) for s in t.shape)


def _strides(t):
    return tuple(int(s) for s in t.stride())


def _check_device(name, t, spec):
    dev = t.device
    if getattr(dev, "type", None) != "cuda" or getattr(dev, "index", None) != spec.device:
        raise ValueError(f"{name} is on {dev}, but the context's communicator is on cuda:{spec.device}")


def _check_dtype(name, t, want):
    got = dtype_name(t.dtype)
    if got != want:
        raise ValueError(f"{name} has dtype {got}, expected {want}")


def _check_shape(name, t, layouts):
    """layouts: {rank: (expected shape with None = any, text)}. Returns the shape."""
    shape = _shape(t)
    layout = layouts.get(len(shape))
    if layout is None or any(w is not None and w != s for w, s in zip(layout[0], shape)):
        wanted = " or ".join(text for _, text in layouts.values())
        raise ValueError(f"{name} has shape {list(shape)}, expected {wanted}")
    return shape


def _dims(name, names, sizes, strides, user_dims, elt_bytes, align16):
    """Checks the strides of the dimensions named `names` (outermost first;
    the innermost contiguous run is already checked) and returns them as
    library strides: 0 for a dimension of size 1. user_dims: the tensor's
    dimension each one comes from, for the messages."""
    out = {}
    for field, size, stride, dim in zip(names, sizes, strides, user_dims):
        if size <= 1:
            out[field] = 0
            continue
        if stride > _abi.INT64_MAX // max(elt_bytes, 1):
            raise ValueError(f"{name} has stride {stride} in dim {dim}: out of range of a byte offset (int64)")
        if stride <= 0:
            raise ValueError(
                f"{name} has stride {stride} in dim {dim} (size {size}): a broadcast or reversed view cannot be "
                f"passed without a copy; use {name}.contiguous()")
        if align16 and stride * elt_bytes % 16 != 0:
            raise ValueError(
                f"{name} has stride {stride} elements ({stride * elt_bytes} bytes) in dim {dim}: every stride of "
                f"{name} must be a multiple of 16 bytes")
        out[field] = stride
    return out


def _check_inner_contiguous(name, t, shape):
    if shape[-1] > 1 and _strides(t)[-1] != 1:
        raise ValueError(f"{name} must be contiguous in its last dimension (head_dim); its stride there is "
                         f"{_strides(t)[-1]}")


def _check_aligned(name, t, alignment):
    ptr = int(t.data_ptr())
    if ptr % alignment != 0:
        raise ValueError(f"{name}.data_ptr() {ptr:#x} is not {alignment}-byte aligned")


def _check_rows(name, shape, batch):
    if shape[0] != batch:
        raise ValueError(f"{name} has {shape[0]} rows (dim 0), partial_out has {batch}")


def _row_peer_head(flat, shape, strides, hl):
    """(sizes, strides, tensor dims) of the row, peer and head dimensions:
    flat = [B, cp*Hl, ...] (head h = p * Hl + j, so the peer stride is Hl
    head strides), else [B, cp, Hl, ...]."""
    if flat:
        return (shape[0], shape[1] // hl, hl), (strides[0], hl * strides[1], strides[1]), (0, 1, 1)
    return shape[:3], strides[:3], (0, 1, 2)


def _check_out_rows(name, shape, rows, spec, batch):
    if rows == UNKNOWN_ROWS or shape[0] == rows:
        return
    if spec.scatter != "token":
        _check_rows(name, shape, batch)
    raise ValueError(f"{name} has {shape[0]} rows (dim 0), expected n_r = {rows}: rank {spec.rank}'s rows of the "
                     f"TOKEN split of {batch} rows")


def check_call(spec, partial_out, partial_lse, out, out_lse, rows=None):
    """Checks one call's tensors against spec; returns CallArgs. out_lse may
    be None. rows: out's rows (out_rows()); None = the mode's default (the
    batch, or the even TOKEN split); UNKNOWN_ROWS = not checked."""
    cp, hl, d = spec.cp, spec.local_heads, spec.head_dim
    heads = spec.heads
    elt = ELEMENT_BYTES[spec.dtype]
    lse_elt = ELEMENT_BYTES[spec.lse_dtype]
    for name, t in (("partial_out", partial_out), ("partial_lse", partial_lse), ("out", out), ("out_lse", out_lse)):
        if (t is not None or name != "out_lse") and not all(hasattr(t, a) for a in ("shape", "stride", "dtype", "device", "data_ptr")):
            raise ValueError(f"{name} must be a tensor, got {type(t).__name__}")

    # partial_out: [B, cp*Hl, D] or [B, cp, Hl, D] of the context's dtype.
    shape = _check_shape("partial_out", partial_out, {
        3: ((None, cp * hl, d), f"[B, cp*Hl, D] = [B, {cp * hl}, {d}]"),
        4: ((None, cp, hl, d), f"[B, cp, Hl, D] = [B, {cp}, {hl}, {d}]")})
    batch = shape[0]
    if batch >= 2**31:
        raise ValueError(f"partial_out has {batch} rows: at most 2^31 - 1 per call")
    _check_dtype("partial_out", partial_out, spec.dtype)
    _check_device("partial_out", partial_out, spec)
    _check_inner_contiguous("partial_out", partial_out, shape)
    result = _dims("partial_out", ("inRow", "inPeer", "inHead"),
                   *_row_peer_head(len(shape) == 3, shape, _strides(partial_out), hl), elt, True)
    _check_aligned("partial_out", partial_out, 16)

    # partial_lse: [B, cp*Hl] or [B, cp, Hl] of the context's lse_dtype.
    shape = _check_shape("partial_lse", partial_lse, {
        2: ((None, cp * hl), f"[B, cp*Hl] = [B, {cp * hl}]"),
        3: ((None, cp, hl), f"[B, cp, Hl] = [B, {cp}, {hl}]")})
    _check_rows("partial_lse", shape, batch)
    _check_dtype("partial_lse", partial_lse, spec.lse_dtype)
    _check_device("partial_lse", partial_lse, spec)
    result.update(_dims("partial_lse", ("lseRow", "lsePeer", "lseHead"),
                        *_row_peer_head(len(shape) == 2, shape, _strides(partial_lse), hl), lse_elt, False))
    _check_aligned("partial_lse", partial_lse, lse_elt)

    # out: the mode's [rows, heads, D] of the context's dtype.
    if rows is None:
        rows = out_rows(spec, batch)
    row_text = "n_r" if spec.scatter == "token" else "B"
    if spec.scatter == "head":
        text, lse_text = f"[B, Hl, D] = [B, {hl}, {d}]", f"[B, Hl] = [B, {hl}]"
    else:
        mode = f" ({spec.scatter.upper()} scatter)"
        text = f"[{row_text}, H, D] = [{row_text}, {heads}, {d}]{mode}"
        lse_text = f"[{row_text}, H] = [{row_text}, {heads}]{mode}"
    shape = _check_shape("out", out, {3: ((None, heads, d), text)})
    _check_out_rows("out", shape, rows, spec, batch)
    _check_dtype("out", out, spec.dtype)
    _check_device("out", out, spec)
    _check_inner_contiguous("out", out, shape)
    result.update(_dims("out", ("outRow", "outHead"), shape[:2], _strides(out)[:2], (0, 1), elt, True))
    _check_aligned("out", out, 16)

    # out_lse: out's [rows, heads], float32, optional.
    if out_lse is not None:
        shape = _check_shape("out_lse", out_lse, {2: ((None, heads), lse_text)})
        _check_out_rows("out_lse", shape, rows, spec, batch)
        _check_dtype("out_lse", out_lse, "float32")
        _check_device("out_lse", out_lse, spec)
        result.update(_dims("out_lse", ("outLseRow", "outLseHead"), shape, _strides(out_lse), (0, 1), 4, False))
        _check_aligned("out_lse", out_lse, 4)
    return CallArgs(batch=batch, strides=result)


def make_strides(call_args):
    """The ncclDcpStrides_t of a checked call."""
    return _abi.Strides(**call_args.strides)


# ---- the call's additions (ncclDcpCallArgs_t)

_MAX_SEQS = 1 << 20  # NCCL_DCP_MAX_BATCH_CAPACITY: the library's bound on numSeqs


class CallExtras:
    """A checked call's ncclDcpCallArgs_t (`struct`, None when the call adds
    nothing), its out rows (out_rows(), or UNKNOWN_ROWS for device counts)
    and the host arrays it points to (kept alive with it)."""

    __slots__ = ("struct", "rows", "device_counts", "_keep")

    def __init__(self, struct, rows, device_counts, keep=None):
        self.struct, self.rows, self.device_counts, self._keep = struct, rows, device_counts, keep


def _is_tensor(x):
    return all(hasattr(x, a) for a in ("shape", "stride", "dtype", "device", "data_ptr"))


def _check_array_device(name, t, spec):
    dev = t.device
    if getattr(dev, "type", None) != "cuda" or getattr(dev, "index", None) != spec.device:
        raise ValueError(f"{name} is on {dev}, but the kernels read it: it must be an int32 tensor on "
                         f"cuda:{spec.device} (the context's communicator)")


def _int32_vector(name, t, spec, size, size_text):
    """A device int32 array the kernels read: on the context's GPU, 1-d of
    `size` entries (None = any >= 1), contiguous, 4-byte aligned."""
    _check_array_device(name, t, spec)
    _check_dtype(name, t, "int32")
    shape = _shape(t)
    if len(shape) != 1 or (size is not None and shape[0] != size) or (size is None and shape[0] < 1):
        raise ValueError(f"{name} has shape {list(shape)}, expected {size_text}")
    if shape[0] > 1 and _strides(t)[0] != 1:
        raise ValueError(f"{name} has stride {_strides(t)[0]}: it must be contiguous (use {name}.contiguous())")
    _check_aligned(name, t, 4)
    return shape[0]


def check_call_args(spec, batch, row_counts=None, seq_lens=None, query_start_loc=None):
    """Checks a call's additions against spec and the batch (partial_out's
    rows); returns CallExtras. Every failure is a ValueError naming the
    argument.

    row_counts (TOKEN only): a list or tuple of cp ints (host counts, >= 0,
    summing to batch; out then has row_counts[rank] rows), or an int32
    tensor of cp entries on the context's GPU (device counts, read by the
    kernels at run time: CUDA-graph replays may change them; the host cannot
    know out's rows, so out is required and not row-checked).
    seq_lens [numSeqs] and query_start_loc [numSeqs + 1]: int32 tensors on
    the context's GPU, both or neither (empty shards; any mode)."""
    import ctypes

    if row_counts is None and seq_lens is None and query_start_loc is None:
        return CallExtras(None, out_rows(spec, batch), False)
    struct, keep, rows, device_counts = _abi.CallArgs(), [], out_rows(spec, batch), False
    if row_counts is not None:
        if spec.scatter != "token":
            raise ValueError(f"row_counts is only for scatter='token'; this context's scatter is "
                             f"{spec.scatter!r} (its split is fixed: every rank gets "
                             f"{'its heads of' if spec.scatter == 'head' else 'all heads of'} every row)")
        if isinstance(row_counts, (list, tuple)):
            if len(row_counts) != spec.cp:
                raise ValueError(f"row_counts has {len(row_counts)} entries, expected cp = {spec.cp} (one per rank)")
            for p, n in enumerate(row_counts):
                if isinstance(n, bool) or not isinstance(n, int):
                    raise ValueError(f"row_counts[{p}] must be an int, got {n!r}")
                if n < 0:
                    raise ValueError(f"row_counts[{p}] = {n} is negative")
            total = sum(row_counts)
            if total != batch:
                raise ValueError(f"row_counts sum to {total}, not the batch {batch} (partial_out's rows)")
            array = (ctypes.c_int * spec.cp)(*row_counts)
            keep.append(array)
            struct.rowCounts = ctypes.addressof(array)
            rows = row_counts[spec.rank]
        elif _is_tensor(row_counts):
            _int32_vector("row_counts", row_counts, spec, spec.cp, f"[cp] = [{spec.cp}]")
            struct.rowCountsDevice = int(row_counts.data_ptr())
            rows, device_counts = UNKNOWN_ROWS, True
        else:
            raise ValueError(f"row_counts must be a list or tuple of ints (host counts) or an int32 CUDA tensor "
                             f"(device counts), got {type(row_counts).__name__}")
    if (seq_lens is None) != (query_start_loc is None):
        given, missing = ("seq_lens", "query_start_loc") if seq_lens is not None else ("query_start_loc", "seq_lens")
        raise ValueError(f"{given} is given without {missing}: give both or neither")
    if seq_lens is not None:
        for name, t in (("seq_lens", seq_lens), ("query_start_loc", query_start_loc)):
            if not _is_tensor(t):
                raise ValueError(f"{name} must be an int32 CUDA tensor, got {type(t).__name__}")
        n = _int32_vector("seq_lens", seq_lens, spec, None, "[numSeqs] with numSeqs >= 1")
        if n > _MAX_SEQS:
            raise ValueError(f"seq_lens has {n} entries: at most {_MAX_SEQS}")
        _int32_vector("query_start_loc", query_start_loc, spec, n + 1,
                      f"[numSeqs + 1] = [{n + 1}] (seq_lens has {n} entries)")
        struct.seqLens, struct.queryStartLoc, struct.numSeqs = int(seq_lens.data_ptr()), \
            int(query_start_loc.data_ptr()), n
    return CallExtras(struct, rows, device_counts, keep)
