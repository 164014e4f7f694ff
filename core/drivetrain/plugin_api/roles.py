"""The run and its role objects: the base classes a strategy and a precision subclass.

``StrategySpec(hooks="pkg.module:MyStrategy")`` names a :class:`Strategy` subclass and
``PrecisionSpec(hooks=...)`` a :class:`Precision` subclass; each run builds one object of the
chosen ones (``run.strategy``, ``run.precision``) and the core calls their methods on every step.
:class:`Run` is what the ``run`` argument of a run hook, and a role object's ``self.run``, offer.
"""

from ..kernel.roles import Precision, Run, Strategy

__all__ = ["Precision", "Run", "Strategy"]
