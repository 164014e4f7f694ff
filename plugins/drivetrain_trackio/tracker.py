"""Trackio: a run in Trackio's local database (or on a Space or server, if asked)."""

from __future__ import annotations

from typing import Any

from drivetrain.plugin_api import GeneralTracker, images_by_key, plain_value


class TrackioTracker(GeneralTracker):
    """Logs to a Trackio run.

    Without ``space_id``/``server_url`` (or ``TRACKIO_SPACE_ID``/``TRACKIO_SERVER_URL``)
    everything stays local, in ``TRACKIO_DIR`` (by default ``$HF_HOME/trackio``); Trackio
    fixes that directory when it is first imported, so set the variable before the run
    starts. ``trackio show`` opens the dashboard.

    Args:
        run_name: the project name (``trackio.init(project=...)``).
        **kwargs: passed to ``trackio.init`` (``name``, ``group``, ``space_id``, ``resume``,
            ...). ``embed`` defaults to ``False``: no dashboard is launched from a training script.
    """

    name = "trackio"
    requires_logging_directory = False
    main_process_only = True

    def __init__(self, run_name: str, **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.init_kwargs = kwargs
        self.run: Any = None

    @property
    def tracker(self) -> Any:
        return self.run

    def start(self) -> None:
        import trackio

        kwargs = dict(self.init_kwargs)
        kwargs.setdefault("embed", False)
        self.run = trackio.init(project=self.run_name, **kwargs)

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """Trackio stores the configuration with the run's first logged values."""
        self.run.config.update(values)

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.run.log({key: plain_value(value) for key, value in values.items()}, step=step, **kwargs)

    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Each value is an image (``HWC`` uint8 array, PIL image or path) or a list of them."""
        import trackio

        self.run.log(images_by_key(values, lambda value: trackio.Image(value, **kwargs)), step=step)

    def log_table(self, table_name: str, columns: list[str] | None = None, data: list[list[Any]] | None = None,
                  dataframe: Any = None, step: int | None = None, **kwargs: Any) -> None:
        import trackio

        table = trackio.Table(columns=columns, data=data, dataframe=dataframe, **kwargs)
        self.run.log({table_name: table}, step=step)

    def finish(self) -> None:
        if self.run is None:
            return
        import trackio

        # Trackio's exit handler finishes its current run again (waiting on its sender and
        # printing "Run finished" a second time) unless trackio.finish() forgets it.
        context = getattr(trackio, "context_vars", None)
        if context is not None and context.current_run.get() is self.run:
            trackio.finish()
        else:
            self.run.finish()
