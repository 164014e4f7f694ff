"""SwanLab: a run started with ``swanlab.init``."""

from __future__ import annotations

import inspect
import os
from typing import Any

from drivetrain.plugin_api import LibraryRunTracker, images_by_key, plain_value


class SwanLabTracker(LibraryRunTracker):
    """Logs to a SwanLab run.

    ``SWANLAB_MODE`` (``offline``, ``local``, ``disabled``) is honoured by the library. Run
    files go to the ``log_dir`` init kwarg, else ``SWANLAB_LOG_DIR`` if set, else
    ``<logging_dir>/swanlog`` when the run has a logging directory, else SwanLab's default
    ``./swanlog``.

    Args:
        run_name: the project name (``swanlab.init(project=...)``).
        logging_dir: the run's logging directory, when it has one.
        **kwargs: passed to ``swanlab.init`` (``name``, ``mode``, ``workspace``, ``tags``, ...).
    """

    name = "swanlab"
    requires_logging_directory = False
    main_process_only = True

    def start(self) -> None:
        import swanlab

        kwargs = dict(self.init_kwargs)
        kwargs.setdefault("project", self.run_name)
        # The keyword was ``logdir`` before SwanLab 0.10, ``log_dir`` since.
        keyword = "log_dir" if "log_dir" in inspect.signature(swanlab.init).parameters else "logdir"
        chosen = kwargs.get("log_dir") or kwargs.get("logdir")
        from_environment = os.environ.get("SWANLAB_LOG_DIR") or os.environ.get("SWANLAB_LOGDIR")
        if not chosen and not from_environment and self.logging_dir is not None:
            chosen = kwargs[keyword] = os.path.join(self.logging_dir, "swanlog")
        if chosen:
            os.makedirs(chosen, exist_ok=True)  # SwanLab wants the folder to exist
        self.run = swanlab.init(**kwargs)

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.run.config.update(values)

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.run.log({key: plain_value(value) for key, value in values.items()}, step=step, **kwargs)

    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Each value is an image (array, tensor, PIL image or path) or a list of them."""
        import swanlab

        self.run.log(images_by_key(values, lambda value: swanlab.Image(value, **kwargs)), step=step)

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
