"""The ``aim`` experiment tracker plugin (Aim)."""
