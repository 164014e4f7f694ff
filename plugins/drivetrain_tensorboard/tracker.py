"""TensorBoard through ``torch.utils.tensorboard``: event files under ``<logging_dir>/<project>``."""

from __future__ import annotations

import logging
import os
from typing import Any

from drivetrain.plugin_api import GeneralTracker, flatten_config, is_number, plain_value

logger = logging.getLogger(__name__)

# TensorBoard's hyper-parameter panel takes these types only; anything else is written as text.
_HPARAM_TYPES = (int, float, str, bool)


class TensorBoardTracker(GeneralTracker):
    """Writes scalars, text, images and hyper-parameters to TensorBoard event files.

    Args:
        run_name: the project name; the event files go to ``<logging_dir>/<run_name>``.
        logging_dir: the run's logging directory.
        **kwargs: passed to ``SummaryWriter`` (``flush_secs``, ``max_queue``, ...).
    """

    name = "tensorboard"
    requires_logging_directory = True
    main_process_only = True

    def __init__(self, run_name: str, logging_dir: str | os.PathLike, **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.logging_dir = os.path.join(os.fspath(logging_dir), run_name)
        self.writer_kwargs = kwargs
        self.writer: Any = None

    @property
    def tracker(self) -> Any:
        return self.writer

    def start(self) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(self.logging_dir, **self.writer_kwargs)

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        import yaml

        flat = flatten_config(values)
        hparams = {k: (v if isinstance(v, _HPARAM_TYPES) else str(v)) for k, v in flat.items()}
        # run_name="." keeps the hyper-parameters in the run's own directory.
        self.writer.add_hparams(hparams, metric_dict={}, run_name=".")
        self.writer.flush()
        os.makedirs(self.logging_dir, exist_ok=True)
        with open(os.path.join(self.logging_dir, "hparams.yml"), "w", encoding="utf-8") as handle:
            yaml.safe_dump(hparams, handle, sort_keys=True)

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        for key, value in values.items():
            value = plain_value(value)
            if is_number(value) or isinstance(value, bool):
                self.writer.add_scalar(key, value, global_step=step, **kwargs)
            elif isinstance(value, str):
                self.writer.add_text(key, value, global_step=step, **kwargs)
            elif isinstance(value, dict):
                scalars = {k: plain_value(v) for k, v in value.items()}
                self.writer.add_scalars(key, scalars, global_step=step, **kwargs)
            else:
                logger.warning("the tensorboard tracker skips %r: it logs numbers, strings and dicts of numbers "
                               "(images go through log_images), not %s", key, type(value).__name__)
        self.writer.flush()

    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Log batches of images: each value is an ``(N, C, H, W)`` array or tensor
        (pass ``dataformats="NHWC"`` for channels last)."""
        for key, images in values.items():
            self.writer.add_images(key, images, global_step=step, **kwargs)
        self.writer.flush()

    def finish(self) -> None:
        if self.writer is not None:
            self.writer.close()
