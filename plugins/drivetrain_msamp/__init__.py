"""fp8 through Microsoft's MS-AMP (installed from its source tree; not on the package index)."""
