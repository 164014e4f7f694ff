"""DeepSpeed ZeRO (stages 0-3, CPU/NVMe offload) as a drivetrain strategy plugin.

Nothing here imports ``deepspeed`` at module level: the option classes (``DeepSpeedPlugin``,
``DummyOptim``, ``DummyScheduler``) work without it, and the library is imported only when
the strategy is selected and builds its engine.
"""
