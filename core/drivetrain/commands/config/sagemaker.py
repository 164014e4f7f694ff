"""``accelerate.commands.config.sagemaker``: drivetrain reads Accelerate's SageMaker config files
(:class:`~drivetrain.commands.config.config_args.SageMakerConfig`) but does not start jobs on
Amazon SageMaker, so it asks no SageMaker questions."""

from __future__ import annotations

from ...kernel.errors import UsageError
from .config_args import SageMakerConfig


def get_sagemaker_input() -> SageMakerConfig:
    """Refused: drivetrain does not launch on SageMaker.

    Raises:
        UsageError: always; the message says how to run drivetrain inside a SageMaker job.
    """
    raise UsageError("drivetrain does not configure SageMaker launches: start the job with SageMaker's own "
                     "estimator and run `drivetrain launch` inside it (answer LOCAL_MACHINE to `drivetrain config`)")


__all__ = ["SageMakerConfig", "get_sagemaker_input"]
