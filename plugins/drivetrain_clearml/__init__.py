"""The ``clearml`` experiment tracker plugin (ClearML)."""
