"""``accelerate.commands.menu``: the chooser Accelerate's questionnaire shows.

drivetrain asks with numbered lists read from standard input (they work in any terminal, a
pipe or a notebook); :class:`BulletMenu` keeps code written against Accelerate's menu running
on that. The submodules keep Accelerate's import paths for the terminal helpers.
"""

from .selection_menu import BulletMenu

__all__ = ["BulletMenu"]
