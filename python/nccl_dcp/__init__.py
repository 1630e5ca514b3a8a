"""nccl_dcp: the fused all-to-all + LSE-weighted reduce of nccl-dcp, called
from PyTorch on PyTorch's own NCCL communicator. No build-time dependency on
PyTorch: libnccl_dcp.so is loaded with ctypes (see _library.py for where it
is looked for), and it must be this package's version (major.minor).

    import nccl_dcp
    ctx = nccl_dcp.Context(group, head_dim=512, local_heads=16, dtype=torch.bfloat16, lse_base=2)
    out = ctx(partial_out, partial_lse)    # [B, cp*Hl, D] + [B, cp*Hl] -> [B, Hl, D]
    ctx.check()                            # raises if a peer failed (for graph replays)
    ctx.close()                            # or ctx.abort() after a failure

Under torch.compile, ctx(...) becomes torch.ops.nccl_dcp.a2a_lse_reduce
(see _ops.py).
"""

from ._library import LibraryVersionError, NcclDcpArgumentError, NcclDcpError, NcclVersionError, library
from .context import Context, create_group, destroy_group, group, workspace_size

__version__ = "0.4.0"  # the library's NCCL_DCP_VERSION_CODE must be 0.4.x (checked at load)

__all__ = ["Context", "NcclDcpError", "NcclDcpArgumentError", "NcclVersionError", "LibraryVersionError",
           "create_group", "destroy_group", "group", "library", "version", "workspace_size", "__version__"]


def version():
    """(nccl-dcp library version code, NCCL version tuple it is bound to)."""
    lib = library()
    return lib.version, lib.nccl_version
