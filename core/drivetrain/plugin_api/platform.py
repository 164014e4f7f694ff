"""The base class of a platform plugin's device (imports torch: import it from the factory's
module, never from the module discovery imports)."""

from ..runtime.device_platform import Platform

__all__ = ["Platform"]
