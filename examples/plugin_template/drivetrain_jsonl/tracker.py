"""The tracker itself: one JSON object per `log` call, appended to a file."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from drivetrain.plugin_api.tracking import GeneralTracker


def _plain(value: Any) -> Any:
    """Tensors and numpy scalars become numbers; anything else unknown becomes its repr."""
    if hasattr(value, "item") and callable(value.item):
        try:
            return value.item()
        except (ValueError, RuntimeError):
            return repr(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return repr(value)


class JsonLinesTracker(GeneralTracker):
    name = "jsonl"
    requires_logging_directory = True
    main_process_only = True

    def __init__(self, run_name: str, logging_dir: str | os.PathLike, **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.directory = os.path.join(os.fspath(logging_dir), run_name)
        self._file = None

    @property
    def tracker(self):
        return self._file

    def start(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        self._file = open(os.path.join(self.directory, "metrics.jsonl"), "a", encoding="utf-8")

    def _write(self, record: dict[str, Any]) -> None:
        record["time"] = time.time()
        self._file.write(json.dumps(_plain(record)) + "\n")
        self._file.flush()

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        with open(os.path.join(self.directory, "config.json"), "w", encoding="utf-8") as handle:
            json.dump(_plain(values), handle, indent=2)

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self._write({"step": step, "values": values})

    def on_checkpoint(self, event: str, directory: str) -> None:
        self._write({"event": f"checkpoint-{event}", "directory": os.fspath(directory)})

    def finish(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
