"""``python -m postbox``: the same command line as the ``postbox`` console script."""

from postbox.cli import main

if __name__ == "__main__":
    main()
