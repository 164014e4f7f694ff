"""ClearML: a task created with ``Task.init`` (or the task that is already running)."""

from __future__ import annotations

import logging
import os
from typing import Any

from drivetrain.plugin_api import GeneralTracker, is_number, plain_value

logger = logging.getLogger(__name__)


class ClearMLTracker(GeneralTracker):
    """Logs to a ClearML task.

    With ``CLEARML_OFFLINE_MODE=1`` nothing is sent: the session is written to ClearML's cache
    directory (``CLEARML_CACHE_DIR``, by default ``~/.clearml/cache``) under ``offline/`` and
    can be imported later with ``Task.import_offline_session``. If a task is already running
    in the process (the script called ``Task.init`` itself), it is used and left open.

    A key ``"title/series"`` is reported as scalar ``series`` of plot ``title``; any other
    key is a plot of its own.

    Args:
        run_name: the project name; the default project and task name (``CLEARML_PROJECT``
            and ``CLEARML_TASK`` override them).
        **kwargs: passed to ``Task.init`` (``task_name``, ``tags``, ``auto_connect_frameworks``, ...).
    """

    name = "clearml"
    requires_logging_directory = False
    main_process_only = True

    def __init__(self, run_name: str, **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.init_kwargs = kwargs
        self.task: Any = None
        self._initialized_externally = False

    @property
    def tracker(self) -> Any:
        return self.task

    def start(self) -> None:
        from clearml import Task

        current = Task.current_task()
        if current is not None:
            self.task, self._initialized_externally = current, True
            return
        kwargs = dict(self.init_kwargs)
        kwargs.setdefault("project_name", os.environ.get("CLEARML_PROJECT", self.run_name))
        kwargs.setdefault("task_name", os.environ.get("CLEARML_TASK", self.run_name))
        self.task = Task.init(**kwargs)

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.task.connect_configuration(values)

    @staticmethod
    def _plot_and_series(key: str) -> tuple[str, str]:
        title, _, series = key.rpartition("/")
        return (title, series) if title else (key, key)

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        reporter = self.task.get_logger()
        for key, value in values.items():
            value = plain_value(value)
            if not is_number(value):
                logger.warning("the clearml tracker skips %r: ClearML scalars are numbers, not %s",
                               key, type(value).__name__)
                continue
            if step is None:
                reporter.report_single_value(name=key, value=value, **kwargs)
                continue
            title, series = self._plot_and_series(key)
            reporter.report_scalar(title=title, series=series, value=value, iteration=step, **kwargs)

    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Each value is an image: a ``HWC`` array, a PIL image, or a path."""
        reporter = self.task.get_logger()
        for key, image in values.items():
            title, series = self._plot_and_series(key)
            source = {"local_path": image} if isinstance(image, (str, os.PathLike)) else {"image": image}
            reporter.report_image(title=title, series=series, iteration=step or 0, **source, **kwargs)

    def log_table(self, table_name: str, columns: list[str] | None = None, data: list[list[Any]] | None = None,
                  dataframe: Any = None, step: int | None = None, **kwargs: Any) -> None:
        table = dataframe if dataframe is not None else ([list(columns)] if columns else []) + list(data or [])
        title, series = self._plot_and_series(table_name)
        self.task.get_logger().report_table(title=title, series=series, iteration=step or 0, table_plot=table,
                                            **kwargs)

    def on_checkpoint(self, event: str, directory: str) -> None:
        """Write a line ``checkpoint save: <directory>`` to the task's console log."""
        self.task.get_logger().report_text(f"checkpoint {event}: {directory}")

    def finish(self) -> None:
        if self.task is not None and not self._initialized_externally:
            self.task.close()
