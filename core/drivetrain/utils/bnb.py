"""``accelerate.utils.bnb``: Accelerate's names of that module, served from ``drivetrain.utils``."""

from ._accelerate_module import module_namespace

__getattr__, __dir__ = module_namespace(__name__)
