"""What the Mac this runs on supports, read without importing torch where possible."""

from __future__ import annotations

import platform as _host

#: The first macOS release whose MPS kernels take bfloat16.
BF16_MACOS = (14, 0)


def macos_version() -> tuple[int, ...] | None:
    """The macOS version as numbers, or ``None`` elsewhere."""
    release = _host.mac_ver()[0]
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
