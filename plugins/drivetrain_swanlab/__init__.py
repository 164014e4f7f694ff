"""The ``swanlab`` experiment tracker plugin (SwanLab)."""
