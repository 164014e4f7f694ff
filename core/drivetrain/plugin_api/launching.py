"""What a launcher plugin needs to start processes the way ``drivetrain launch`` does: the
child entry point, the failure records the children leave, and how exits are described."""

from ..services.launchers import (CHILD_MODULE, ERRORS_DIR_VARIABLE, PREEMPTED_EXIT_CODE, failure_summary,
                                  preemption_grace, recorded_failures)
from ..services.hang_report import recorded_collectives
from ..runtime.process_exits import ExitWatcher, describe_exit, last_stderr_line
from ..services.restarts import AttemptWatchers
from ..cli.launch_environment import find_executable, prepare_multi_gpu_env, program_version

__all__ = [
    "AttemptWatchers", "CHILD_MODULE", "ERRORS_DIR_VARIABLE", "ExitWatcher", "PREEMPTED_EXIT_CODE", "describe_exit",
    "failure_summary", "find_executable", "last_stderr_line", "prepare_multi_gpu_env", "program_version",
    "preemption_grace", "recorded_collectives", "recorded_failures",
]
