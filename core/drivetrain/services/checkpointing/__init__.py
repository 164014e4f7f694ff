"""Checkpoints that never lose a run: atomic directories, a manifest, code-free formats."""


def __getattr__(name: str) -> object:
    # Accelerate's module functions, imported on first use (this package stays cheap to import)
    if name in ("save_custom_state", "load_custom_state"):
        from . import custom_state

        return getattr(custom_state, name)
    if name in ("save_accelerator_state", "load_accelerator_state"):
        from . import accelerator_state

        return getattr(accelerator_state, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
