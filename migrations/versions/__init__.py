"""Alembic revisions of the outbox tables, one module per revision (``NNNN_slug.py``).

A package only so that setuptools ships the files; Alembic loads them by path and skips this one.
"""
