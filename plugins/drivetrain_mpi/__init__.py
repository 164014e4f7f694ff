"""Processes started by an MPI launcher (mpirun, mpiexec)."""
