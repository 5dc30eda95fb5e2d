"""Runnable example applications. Nothing imports ``examples``."""
