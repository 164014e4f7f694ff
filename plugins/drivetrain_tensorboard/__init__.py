"""The ``tensorboard`` experiment tracker plugin (TensorBoard)."""
