"""The ``ipex`` plugin: Intel Extension for PyTorch's optimisation of models and optimizers."""
