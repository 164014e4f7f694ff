"""``accelerate.commands.config.cluster``: the questions of ``drivetrain config`` as a function.

The questions are drivetrain's own (:mod:`drivetrain.config.questionnaire`): the core's, then
those of each installed plugin whose section applies.
"""

from __future__ import annotations

from ...config.questionnaire import run_questionnaire
from .config_args import ClusterConfig


def get_cluster_input() -> ClusterConfig:
    """Ask the questions on standard input and return the answers as a :class:`ClusterConfig`
    (not written; ``to_yaml_file`` writes it)."""
    return ClusterConfig.from_dict(run_questionnaire())


__all__ = ["get_cluster_input"]
