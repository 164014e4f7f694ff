"""Aim: a run in the Aim repository at the logging directory (``<logging_dir>/.aim``)."""

from __future__ import annotations

import logging
import os
from typing import Any

from drivetrain.plugin_api import GeneralTracker, is_number, plain_value

logger = logging.getLogger(__name__)


class AimTracker(GeneralTracker):
    """Logs to an Aim run; ``aim up --repo <logging_dir>`` shows it.

    Args:
        run_name: the project name, the run's ``name``.
        logging_dir: the Aim repository (created on first use).
        **kwargs: passed to ``aim.Run`` (``experiment``, ``system_tracking_interval``,
            ``capture_terminal_logs``, ...).
    """

    name = "aim"
    requires_logging_directory = True
    main_process_only = True

    def __init__(self, run_name: str, logging_dir: str | os.PathLike = ".", **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.logging_dir = os.fspath(logging_dir)
        self.init_kwargs = kwargs
        self.writer: Any = None

    @property
    def tracker(self) -> Any:
        return self.writer

    def start(self) -> None:
        from aim import Run

        os.makedirs(self.logging_dir, exist_ok=True)
        self.writer = Run(repo=self.logging_dir, **self.init_kwargs)
        self.writer.name = self.run_name

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.writer["hparams"] = values

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        for key, value in values.items():
            value = plain_value(value)
            if is_number(value):
                self.writer.track(value, name=key, step=step, **kwargs)
            else:
                logger.warning("the aim tracker skips %r: Aim metrics are numbers, not %s (images go through "
                               "log_images)", key, type(value).__name__)

    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Each value is an image (array, tensor or PIL image) or an ``(image, caption)`` pair.

        ``kwargs`` go to ``aim.Image`` under ``aim_image`` and to ``Run.track`` under
        ``track``.
        """
        from aim import Image

        image_kwargs = kwargs.get("aim_image", {})
        track_kwargs = kwargs.get("track", {})
        for key, value in values.items():
            image, caption = value if isinstance(value, tuple) else (value, "")
            self.writer.track(Image(image, caption=caption, **image_kwargs), name=key, step=step, **track_kwargs)

    def on_checkpoint(self, event: str, directory: str) -> None:
        """Record the latest checkpoint path as the run parameter ``checkpoint.last_save``."""
        self.writer["checkpoint", f"last_{event}"] = directory

    def finish(self) -> None:
        if self.writer is not None:
            self.writer.close()
