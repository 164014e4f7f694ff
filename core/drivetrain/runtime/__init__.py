"""The runtime: one run of a script on its processes.

The run (the chosen plugins and how to call them), the platform base class, collectives, the
process state, kwargs handlers, the optimizer and scheduler wrappers, what ``prepare()``
recorded (:class:`~drivetrain.runtime.prepared.PreparedObjects`), and the process-level
helpers a run needs (logging on one process, exits, profiling, environment helpers).
"""
