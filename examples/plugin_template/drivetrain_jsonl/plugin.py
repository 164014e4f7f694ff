"""Hook implementations: the module the entry point names.

Keep this module cheap to import: drivetrain imports it whenever it discovers plugins (even
for `drivetrain plugins list`). The tracker class lives in its own module and is named
lazily, so it is imported only when a user asks for this tracker.
"""

from drivetrain.plugin_api import PluginInfo, TrackerSpec, hookimpl

PLUGIN_INFO = PluginInfo(
    api_version="2.0",
    description="writes metrics to <logging_dir>/<run>/metrics.jsonl",
)


@hookimpl
def drivetrain_register_trackers():
    return [
        TrackerSpec(
            name="jsonl",
            factory="drivetrain_jsonl.tracker:JsonLinesTracker",
            requires_logging_directory=True,
            description="JSON lines on disk",
        )
    ]
