"""The ``wandb`` experiment tracker plugin (Weights & Biases)."""
