"""Weights & Biases: one ``wandb`` run per ``init_trackers`` call."""

from __future__ import annotations

import os
from typing import Any

from drivetrain.plugin_api import LibraryRunTracker, plain_value


class WandBTracker(LibraryRunTracker):
    """Logs to a Weights & Biases run.

    ``WANDB_MODE`` (``offline``, ``disabled``) and every other ``WANDB_*`` variable are
    honoured by the library itself. The run's local files go to ``dir``: the ``dir`` init
    kwarg if given, else ``WANDB_DIR`` if set, else the run's logging directory if it has
    one, else the library's default (the current directory).

    Args:
        run_name: the project name (``wandb.init(project=...)``).
        logging_dir: the run's logging directory, when it has one.
        **kwargs: passed to ``wandb.init`` (``entity``, ``name``, ``tags``, ``mode``, ...).
    """

    name = "wandb"
    requires_logging_directory = False
    main_process_only = True

    def start(self) -> None:
        import wandb

        kwargs = dict(self.init_kwargs)
        kwargs.setdefault("project", self.run_name)
        if "dir" not in kwargs and not os.environ.get("WANDB_DIR") and self.logging_dir is not None:
            kwargs["dir"] = self.logging_dir
        if kwargs.get("dir"):
            os.makedirs(kwargs["dir"], exist_ok=True)
        self.run = wandb.init(**kwargs)

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.run.config.update(values, allow_val_change=True)

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.run.log({key: plain_value(value) for key, value in values.items()}, step=step, **kwargs)

    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Each value is a list (or batch) of images: arrays, tensors or PIL images."""
        import wandb

        self.run.log({key: [wandb.Image(image) for image in images] for key, images in values.items()},
                     step=step, **kwargs)

    def log_table(self, table_name: str, columns: list[str] | None = None, data: list[list[Any]] | None = None,
                  dataframe: Any = None, step: int | None = None, **kwargs: Any) -> None:
        import wandb

        given = {"columns": columns, "data": data, "dataframe": dataframe}
        table = wandb.Table(**{key: value for key, value in given.items() if value is not None})
        self.run.log({table_name: table}, step=step, **kwargs)

    def on_checkpoint(self, event: str, directory: str) -> None:
        """Record the latest checkpoint path in the run summary (``checkpoint/last_save``)."""
        self.run.summary[f"checkpoint/last_{event}"] = directory

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
