"""Test fixture: a broken drivetrain plugin."""
