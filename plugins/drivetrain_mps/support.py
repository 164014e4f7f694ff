"""What the Mac this runs on supports, read without importing torch where possible."""

from __future__ import annotations

import sys

#: The first macOS release whose MPS kernels take bfloat16.
BF16_MACOS = (14, 0)
#: Whether this is a Mac; elsewhere the platform module (costly to import) is never read.
ON_MACOS = sys.platform == "darwin"


def macos_version() -> tuple[int, ...] | None:
    """The macOS version as numbers, or ``None`` elsewhere."""
    if not ON_MACOS:
        return None
    import platform

    release = platform.mac_ver()[0]
    if not release:
        return None
    return tuple(int(part) for part in release.split(".") if part.isdigit())


def bf16_supported() -> bool:
    """Whether MPS runs bfloat16 here (macOS 14 or newer)."""
    version = macos_version()
    return version is not None and version >= BF16_MACOS


def precisions() -> tuple[str, ...]:
    """The mixed precisions torch's MPS autocast offers on this Mac."""
    return ("fp16", "bf16") if bf16_supported() else ("fp16",)
