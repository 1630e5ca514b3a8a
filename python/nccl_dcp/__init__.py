"""nccl_dcp: the fused all-to-all + LSE-weighted reduce of nccl-dcp, called
from PyTorch on PyTorch's own NCCL communicator. No build-time dependency on
PyTorch: libnccl_dcp.so is loaded with ctypes on first use (see _library.py
for where it is looked for), and it must be this package's version
(major.minor) and built against the NCCL minor release this process runs.

    import nccl_dcp
    ctx = nccl_dcp.Context(group, head_dim=512, local_heads=16, dtype=torch.bfloat16, lse_base=2)
    out = ctx(partial_out, partial_lse)    # [B, cp*Hl, D] + [B, cp*Hl] -> [B, Hl, D]
    ctx.check()                            # raises if a peer failed (for graph replays)
    ctx.close()                            # or ctx.abort() after a failure

Drop-ins for the engines' own calls: nccl_dcp.vllm.dcp_a2a_lse_reduce and
nccl_dcp.flashinfer.decode_cp_a2a_lse_reduce.

When torch is importable, importing the package registers the custom ops
torch.ops.nccl_dcp.a2a_lse_reduce (functional) and a2a_lse_reduce_out (out=,
declared mutated): torch.compile sees ctx(...) as one of them (_ops.py).
Importing needs no GPU and loads no library; nccl_dcp.reference (the same
operation in plain PyTorch) runs on CPU tensors.
"""

from ._library import LibraryVersionError, NcclDcpArgumentError, NcclDcpError, NcclVersionError, library
from .context import Context, create_group, destroy_group, group, workspace_size

__version__ = "0.5.0"  # the library's NCCL_DCP_VERSION_CODE must be 0.5.x (checked at load)

__all__ = ["Context", "NcclDcpError", "NcclDcpArgumentError", "NcclVersionError", "LibraryVersionError",
           "create_group", "destroy_group", "group", "library", "version", "workspace_size", "__version__"]

try:
    import torch as _torch_module  # noqa: F401 -- the ops below need it; without it the package still imports
except ImportError:
    _torch_module = None
if _torch_module is not None:
    from . import _ops  # noqa: F401 -- registers torch.ops.nccl_dcp.*


def version():
    """(nccl-dcp library version code, NCCL version tuple it is bound to)."""
    lib = library()
    return lib.version, lib.nccl_version
