"""Services: what a run offers on top of the runtime.

Operations across processes (``cross_process.py``), data loading (``data_loader/``),
checkpointing (``checkpointing/``), trackers, big-model helpers (``big_model/``), memory and
RNG helpers, launchers for notebooks, local SGD.
"""
