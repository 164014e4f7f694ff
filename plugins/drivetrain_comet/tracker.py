"""Comet: an experiment created (or resumed) with ``comet_ml.start``."""

from __future__ import annotations

import logging
import os
from typing import Any

from drivetrain.plugin_api import GeneralTracker, is_number, plain_value

logger = logging.getLogger(__name__)


class CometMLTracker(GeneralTracker):
    """Logs to a Comet experiment.

    Online or offline is Comet's own choice (``online=False`` in ``init_kwargs``, or
    ``COMET_START_ONLINE=false``); an offline experiment is archived, for a later
    ``comet upload``, in the ``offline_directory`` of ``experiment_config`` if given, else
    ``COMET_OFFLINE_DIRECTORY`` if set, else ``<logging_dir>/comet`` when the run has a
    logging directory.

    Args:
        run_name: the project name (``comet_ml.start(project_name=...)``).
        logging_dir: the run's logging directory, when it has one.
        **kwargs: passed to ``comet_ml.start`` (``workspace``, ``online``, ``mode``,
            ``experiment_key``, ``experiment_config``, ...).
    """

    name = "comet_ml"
    requires_logging_directory = False
    main_process_only = True

    def __init__(self, run_name: str, logging_dir: str | os.PathLike | None = None, **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.logging_dir = os.fspath(logging_dir) if logging_dir is not None else None
        self.init_kwargs = kwargs
        self.experiment: Any = None

    @property
    def tracker(self) -> Any:
        return self.experiment

    def start(self) -> None:
        import comet_ml

        kwargs = dict(self.init_kwargs)
        kwargs.setdefault("project_name", self.run_name)
        if ("experiment_config" not in kwargs and not os.environ.get("COMET_OFFLINE_DIRECTORY")
                and self.logging_dir is not None):
            directory = os.path.join(self.logging_dir, "comet")
            os.makedirs(directory, exist_ok=True)
            kwargs["experiment_config"] = comet_ml.ExperimentConfig(offline_directory=directory)
        self.experiment = comet_ml.start(**kwargs)

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.experiment.log_parameters(values)

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        if step is not None:
            self.experiment.set_step(step)
        for key, value in values.items():
            value = plain_value(value)
            if is_number(value):
                self.experiment.log_metric(key, value, step=step, **kwargs)
            elif isinstance(value, str):
                self.experiment.log_other(key, value)
            elif isinstance(value, dict):
                self.experiment.log_metrics({k: plain_value(v) for k, v in value.items()}, prefix=key,
                                            step=step, **kwargs)
            else:
                logger.warning("the comet_ml tracker skips %r: it logs numbers, strings and dicts of numbers, "
                               "not %s", key, type(value).__name__)

    def log_table(self, table_name: str, columns: list[str] | None = None, data: list[list[Any]] | None = None,
                  dataframe: Any = None, step: int | None = None, **kwargs: Any) -> None:
        """Saved as the experiment asset ``<table_name>.csv``."""
        if step is not None:
            self.experiment.set_step(step)
        if dataframe is not None:
            self.experiment.log_table(f"{table_name}.csv", tabular_data=dataframe, **kwargs)
        else:
            self.experiment.log_table(f"{table_name}.csv", tabular_data=data, headers=columns or False, **kwargs)

    def on_checkpoint(self, event: str, directory: str) -> None:
        """Record the latest checkpoint path as the "other" value ``checkpoint_last_save``."""
        self.experiment.log_other(f"checkpoint_last_{event}", directory)

    def finish(self) -> None:
        if self.experiment is not None:
            self.experiment.end()
