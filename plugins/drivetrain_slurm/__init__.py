"""Processes started by SLURM (srun)."""
