"""``get_logger``: a logger whose records print on the main process only, unless asked."""

from __future__ import annotations

import functools
import logging
from typing import Any


class MultiProcessAdapter(logging.LoggerAdapter):
    """A logger adapter that knows the process.

    ``logger.info(msg, main_process_only=False)`` logs on every process;
    ``in_order=True`` makes the processes log one after the other, by rank.
    """

    @staticmethod
    def _should_log(main_process_only: bool) -> bool:
        from .state import PartialState

        state = PartialState()
        return not main_process_only or state.is_main_process

    def log(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
        from .state import is_initialized

        if not is_initialized():
            raise RuntimeError("create an Accelerator or PartialState before logging through get_logger()")
        main_process_only = kwargs.pop("main_process_only", True)
        in_order = kwargs.pop("in_order", False)
        kwargs.setdefault("stacklevel", 2)
        if not self.isEnabledFor(level):
            return
        if not in_order:
            if self._should_log(main_process_only):
                msg, kwargs = self.process(msg, kwargs)
                self.logger.log(level, msg, *args, **kwargs)
            return
        from .state import PartialState

        state = PartialState()
        for rank in range(state.num_processes):
            if rank == state.process_index:
                msg, kwargs = self.process(msg, kwargs)
                self.logger.log(level, msg, *args, **kwargs)
            state.wait_for_everyone()

    @functools.lru_cache(None)
    def warning_once(self, *args: Any, **kwargs: Any) -> None:
        """``warning``, once per distinct message."""
        self.warning(*args, **kwargs)


def get_logger(name: str, log_level: str | None = None) -> MultiProcessAdapter:
    """A logger for ``name`` that logs on the main process only by default.

    ``log_level`` (or ``DRIVETRAIN_LOG_LEVEL`` / ``ACCELERATE_LOG_LEVEL``) sets its level.
    """
    from ..kernel import environment

    log_level = log_level or environment.read("LOG_LEVEL")
    logger = logging.getLogger(name)
    if log_level is not None:
        logger.setLevel(log_level.upper())
        logger.root.setLevel(log_level.upper())
    return MultiProcessAdapter(logger, {})


__all__ = ["get_logger", "MultiProcessAdapter"]
