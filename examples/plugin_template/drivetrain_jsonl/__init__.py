"""A drivetrain tracker plugin that writes metrics as JSON lines."""
