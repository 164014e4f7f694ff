"""DVCLive: metrics, parameters, plots and images as plain files for DVC."""

from __future__ import annotations

import logging
import os
from typing import Any

from drivetrain.plugin_api import GeneralTracker, is_number, plain_value

logger = logging.getLogger(__name__)


class DVCLiveTracker(GeneralTracker):
    """Logs with a ``dvclive.Live`` object.

    Files go to the ``dir`` init kwarg, else ``<logging_dir>/dvclive`` when the run has a
    logging directory, else DVCLive's default ``dvclive/``. DVCLive would write its
    ``dvc.yaml`` to the current directory; here it goes inside that folder instead (pass
    ``dvcyaml=...`` to choose, ``False`` for none).

    Args:
        run_name: the project name (DVCLive has no project; kept for the record).
        logging_dir: the run's logging directory, when it has one.
        live: an existing ``dvclive.Live`` to log to; ``finish`` ends it, as it would its own.
        **kwargs: passed to ``dvclive.Live`` (``report``, ``save_dvc_exp``, ``exp_name``, ...).
    """

    name = "dvclive"
    requires_logging_directory = False
    main_process_only = True

    def __init__(self, run_name: str | None = None, logging_dir: str | os.PathLike | None = None,
                 live: Any = None, **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.logging_dir = os.fspath(logging_dir) if logging_dir is not None else None
        self.live = live
        self.init_kwargs = kwargs

    @property
    def tracker(self) -> Any:
        return self.live

    def start(self) -> None:
        if self.live is not None:
            return
        from dvclive import Live

        kwargs = dict(self.init_kwargs)
        if "dir" not in kwargs:
            kwargs["dir"] = os.path.join(self.logging_dir, "dvclive") if self.logging_dir is not None else "dvclive"
        kwargs.setdefault("dvcyaml", os.path.join(kwargs["dir"], "dvc.yaml"))
        self.live = Live(**kwargs)

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.live.log_params(values)

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        if step is not None:
            self.live.step = step
        for key, value in values.items():
            value = plain_value(value)
            if is_number(value):
                self.live.log_metric(key, value, **kwargs)
            else:
                logger.warning("the dvclive tracker skips %r: DVCLive metrics are numbers, not %s",
                               key, type(value).__name__)
        self.live.next_step()

    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Each value is an image (array, PIL image or path), saved as
        ``plots/images/<key>.png`` (``<key>_<step>.png`` when a step is given)."""
        for key, image in values.items():
            name = key if os.path.splitext(key)[1] else (f"{key}_{step}.png" if step is not None else f"{key}.png")
            self.live.log_image(name, image, **kwargs)

    def finish(self) -> None:
        if self.live is not None:
            self.live.end()
