"""Alembic environment and versions (DESIGN §5). Built in a later issue; nothing imports it."""
