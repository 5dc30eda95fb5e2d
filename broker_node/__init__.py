"""The broker node."""
