"""Integrations of the framework with other tools (Celery)."""
