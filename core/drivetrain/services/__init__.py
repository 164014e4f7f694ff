"""Services: what a run offers on top of the runtime (operations across processes, ...)."""
