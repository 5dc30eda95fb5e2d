"""Postbox's command-line package (the edge): ``postbox.cli`` holds the ``postbox`` commands.

Nothing in the project imports this package; it imports the others. Importing it has no side
effects: the CLI is assembled only when ``postbox.cli`` is imported.
"""
