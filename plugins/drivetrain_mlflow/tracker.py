"""MLflow: one run in an experiment named after the project, written through ``MlflowClient``.

The tracker talks to its own client bound to its tracking URI, so it never changes MLflow's
process-wide settings (the active run, ``mlflow.set_tracking_uri``) behind the user's back.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from drivetrain.plugin_api import GeneralTracker, flatten_config, is_number, plain_value

logger = logging.getLogger(__name__)

# MLflow's limits on one parameter value and on one batch of parameters.
_MAX_PARAM_LENGTH = 6000
_PARAMS_PER_BATCH = 100
_METRICS_PER_BATCH = 1000


class MLflowTracker(GeneralTracker):
    """Logs to an MLflow run.

    Where runs go: the ``tracking_uri`` init kwarg, else ``MLFLOW_TRACKING_URI``, else (when
    the run has a logging directory) a SQLite store ``<logging_dir>/mlflow.db`` with artifacts
    in ``<logging_dir>/mlartifacts``, else MLflow's own default.

    Args:
        experiment_name: the project name, used as the experiment's name unless
            ``MLFLOW_EXPERIMENT_NAME`` is set.
        logging_dir: the run's logging directory, when it has one.
        run_id: continue this existing run instead of creating one (``MLFLOW_RUN_ID`` too).
        run_name: the run's display name.
        tags: tags of the run (a dict; ``MLFLOW_TAGS`` is not read).
        description: the run's description.
        tracking_uri: where the tracking server or store is.
    """

    name = "mlflow"
    requires_logging_directory = False
    main_process_only = True

    def __init__(self, experiment_name: str, logging_dir: str | os.PathLike | None = None, *,
                 run_id: str | None = None, run_name: str | None = None, tags: dict[str, Any] | None = None,
                 description: str | None = None, tracking_uri: str | None = None) -> None:
        super().__init__()
        self.experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or experiment_name
        self.logging_dir = os.fspath(logging_dir) if logging_dir is not None else None
        self.run_id = run_id or os.environ.get("MLFLOW_RUN_ID")
        self.run_name = run_name
        self.tags = dict(tags or {})
        self.description = description
        self.tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or None
        self.artifact_location: str | None = None
        if self.tracking_uri is None and self.logging_dir is not None:
            directory = Path(self.logging_dir).absolute()
            self.tracking_uri = f"sqlite:///{directory / 'mlflow.db'}"
            self.artifact_location = (directory / "mlartifacts").as_uri()
        self.client: Any = None
        self.run: Any = None

    @property
    def tracker(self) -> Any:
        """The ``mlflow.entities.Run`` (``tracker.info.run_id``); fetch it again for fresh data."""
        return self.run

    def start(self) -> None:
        from mlflow.tracking import MlflowClient

        if self.logging_dir is not None:
            os.makedirs(self.logging_dir, exist_ok=True)
        self.client = MlflowClient(tracking_uri=self.tracking_uri)
        if self.run_id:
            self.run = self.client.get_run(self.run_id)
            return
        experiment = self.client.get_experiment_by_name(self.experiment_name)
        if experiment is not None:
            experiment_id = experiment.experiment_id
        else:
            experiment_id = self.client.create_experiment(self.experiment_name,
                                                          artifact_location=self.artifact_location)
        tags = {str(k): str(v) for k, v in self.tags.items()}
        if self.description:
            tags["mlflow.note.content"] = self.description
        self.run = self.client.create_run(experiment_id, run_name=self.run_name, tags=tags)
        self.run_id = self.run.info.run_id

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        from mlflow.entities import Param

        params = []
        for key, value in flatten_config(values).items():
            text = str(value)
            if len(text) > _MAX_PARAM_LENGTH:
                logger.warning("the mlflow tracker skips parameter %r: its value is longer than MLflow's "
                               "limit of %d characters", key, _MAX_PARAM_LENGTH)
                continue
            params.append(Param(key, text))
        for first in range(0, len(params), _PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=params[first:first + _PARAMS_PER_BATCH])

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        from mlflow.entities import Metric

        timestamp = int(time.time() * 1000)
        metrics = []
        for key, value in values.items():
            value = plain_value(value)
            if is_number(value):
                metrics.append(Metric(key, float(value), timestamp, step or 0))
            else:
                logger.warning("the mlflow tracker skips %r: MLflow metrics are numbers, not %s",
                               key, type(value).__name__)
        for first in range(0, len(metrics), _METRICS_PER_BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[first:first + _METRICS_PER_BATCH], **kwargs)

    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Each value is one image or a list of images (``HWC`` arrays or PIL images), saved as
        run artifacts ``images/<key>[_<index>]_step<step>.png``."""
        for key, images in values.items():
            many = isinstance(images, (list, tuple)) or getattr(images, "ndim", 3) == 4
            for index, image in enumerate(images if many else [images]):
                suffix = f"_{index}" if many else ""
                name = f"images/{key}{suffix}_step{step or 0}.png"
                self.client.log_image(self.run_id, _as_image(image), artifact_file=name, **kwargs)

    def log_table(self, table_name: str, columns: list[str] | None = None, data: list[list[Any]] | None = None,
                  dataframe: Any = None, step: int | None = None, **kwargs: Any) -> None:
        """Saved as the run artifact ``<table_name>.json`` (MLflow appends to it on later calls)."""
        if dataframe is not None:
            table = dataframe
        else:
            rows = data or []
            names = columns or [str(i) for i in range(len(rows[0]) if rows else 0)]
            table = {name: [plain_value(row[i]) for row in rows] for i, name in enumerate(names)}
        self.client.log_table(self.run_id, data=table, artifact_file=f"{table_name}.json")

    def on_checkpoint(self, event: str, directory: str) -> None:
        """Tag the run with the latest checkpoint path (``drivetrain.checkpoint.last_save``)."""
        self.client.set_tag(self.run_id, f"drivetrain.checkpoint.last_{event}", directory)

    def finish(self) -> None:
        if self.client is not None and self.run_id:
            self.client.set_terminated(self.run_id)


def _as_image(image: Any) -> Any:
    """A tensor becomes a numpy array in ``HWC`` order; other images pass unchanged."""
    if hasattr(image, "detach"):
        array = image.detach().cpu().numpy()
        if array.ndim == 3 and array.shape[0] in (1, 3, 4) and array.shape[-1] not in (1, 3, 4):
            array = array.transpose(1, 2, 0)
        return array
    return image
