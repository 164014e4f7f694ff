"""Accelerate's ``accelerate.commands`` modules: each command's parser and runner, by module.

``config``, ``env``, ``launch`` and ``test`` are thin over :mod:`drivetrain.cli`. A command a
plugin owns (``merge``, ``to_fsdp2``, ``tpu``) is a module here whose functions come from that
plugin (``drivetrain_public_names`` keys ``"commands.<module>.<name>"``).
"""
