"""Accelerate's catalogue: probes and enumeration members of backends that may be absent."""
