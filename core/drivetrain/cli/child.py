"""Runs the user's script inside each process started by ``drivetrain launch``.

The script runs as ``__main__`` with its own arguments; an exception it raises is recorded
in the launcher's error file, so the launcher can say which rank failed and why. The process
ends with its launcher, however the launcher ends (see ``worker_lifetime``).
"""

from __future__ import annotations

import os
import runpy
import sys


def main() -> None:
    from drivetrain.runtime.worker_lifetime import die_with_launcher

    die_with_launcher()  # first: a launcher killed during start-up must not leave this process behind
    from torch.distributed.elastic.multiprocessing.errors import record

    @record
    def run_user_code() -> None:
        if len(sys.argv) < 3 or sys.argv[1] not in ("--script", "--module"):
            raise SystemExit("usage: python -m drivetrain.cli.child (--script PATH | --module NAME) [ARGS...]")
        kind, target, arguments = sys.argv[1], sys.argv[2], sys.argv[3:]
        from drivetrain.services.launchers import ERRORS_DIR_VARIABLE
        from drivetrain.services.restarts import attempt_errors_dir
        from drivetrain.runtime.process_exits import note_worker_start

        errors = attempt_errors_dir(os.environ.get(ERRORS_DIR_VARIABLE))  # each attempt keeps its own records
        if errors:
            os.environ[ERRORS_DIR_VARIABLE] = errors
        note_worker_start(errors)  # so the launcher can tell who ended first
        sys.argv = [target, *arguments]
        try:
            if kind == "--module":
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
                runpy.run_path(target, run_name="__main__")
        except KeyboardInterrupt:  # Ctrl-C reaches every process: the launcher says it once
            raise SystemExit(130) from None
        except BaseException as exc:
            from drivetrain.runtime.collective_watch import report_uncaught
            from drivetrain.services.launchers import record_failure

            record_failure(exc)
            report_uncaught(exc)  # a collective's timeout raised where no recorded call saw it
            raise

    run_user_code()


if __name__ == "__main__":
    main()
