"""toyaccel: a pretend accelerator that computes on CPU tensors, and its drivetrain platform plugin.

``runtime`` stands in for the vendor's own library (its driver bindings); ``plugin`` is what
drivetrain discovers; ``platform`` and ``collectives`` are imported only when a run uses it.
"""
