"""The ``drivetrain`` command line."""
