"""The base class of experiment trackers. Tracker plugins subclass it; the core never names one."""

from __future__ import annotations

from typing import Any


class GeneralTracker:
    """A connection to one experiment tracker, with Accelerate's contract.

    A subclass sets three class attributes and implements the methods its backend supports:

    Attributes:
        name: the name users pass to ``log_with``.
        requires_logging_directory: the constructor takes ``logging_dir``.
        main_process_only: log from the main process only (the default). Set it to
            ``False`` for trackers that collect from every process themselves.

    The constructor takes ``run_name`` (the project name given to ``init_trackers``), then
    ``logging_dir`` when required, then the user's ``init_kwargs`` for this tracker. It must
    not contact the backend: :meth:`start` does, on the processes that log.
    """

    name: str = ""
    requires_logging_directory: bool = False
    main_process_only: bool = True

    def __init__(self, _blank: bool = False) -> None:
        if _blank:
            return
        missing = [attr for attr in ("name", "requires_logging_directory") if not hasattr(type(self), attr)]
        if missing or not type(self).name:
            raise NotImplementedError(
                f"{type(self).__name__} must define the class attributes 'name' and "
                "'requires_logging_directory'"
            )

    @property
    def tracker(self) -> Any:
        """The backend's own run object (``wandb.Run``, a ``SummaryWriter``, ...)."""
        return None

    def start(self) -> None:
        """Open the run on the backend. Called once, on each process that logs."""

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """Record the run's hyper-parameters."""

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Record scalar (and other) values at ``step``."""

    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Record images, where the backend supports them."""
        raise NotImplementedError(f"the {self.name} tracker cannot log images")

    def log_table(self, table_name: str, columns: list[str] | None = None, data: list[list[Any]] | None = None,
                  dataframe: Any = None, step: int | None = None, **kwargs: Any) -> None:
        """Record a table, where the backend supports them."""
        raise NotImplementedError(f"the {self.name} tracker cannot log tables")

    def on_checkpoint(self, event: str, directory: str) -> None:
        """Be told that a checkpoint was saved or loaded (``event`` is ``"save"``/``"load"``)."""

    def finish(self) -> None:
        """Flush and close the run."""
