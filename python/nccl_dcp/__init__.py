"""nccl_dcp: the fused all-to-all + LSE-weighted reduce of nccl-dcp, called
from PyTorch on PyTorch's own NCCL communicator. No build-time dependency on
PyTorch: libnccl_dcp.so is loaded with ctypes (see _library.py for where it
is looked for).

    import nccl_dcp
    ctx = nccl_dcp.Context(group, head_dim=512, local_heads=16, dtype=torch.bfloat16, lse_base=2)
    out = ctx(partial_out, partial_lse)    # [B, cp*Hl, D] + [B, cp*Hl] -> [B, Hl, D]
    ctx.close()
"""

from ._library import NcclDcpArgumentError, NcclDcpError, NcclVersionError, library
from .context import Context

__all__ = ["Context", "NcclDcpError", "NcclDcpArgumentError", "NcclVersionError", "library", "version"]


def version():
    """(nccl-dcp library version code, NCCL version tuple it is bound to)."""
    lib = library()
    return lib.version, lib.nccl_version
