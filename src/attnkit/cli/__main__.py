"""``python -m attnkit.cli``: the ``attnkit`` command line."""

from attnkit.cli import main

if __name__ == "__main__":
    main()
