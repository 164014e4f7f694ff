"""``accelerate.memory_utils``, the old place of ``find_executable_batch_size``; it warns as Accelerate's does."""

import warnings

from .utils.memory import find_executable_batch_size

warnings.warn("memory_utils has been reorganized to utils.memory: import `find_executable_batch_size` from the "
              "package itself (`from drivetrain import find_executable_batch_size`) to avoid this warning.",
              FutureWarning, stacklevel=2)

__all__ = ["find_executable_batch_size"]
