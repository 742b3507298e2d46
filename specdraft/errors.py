"""Errors that reach the user as one clear line (exit code 1)."""


class SpecdraftError(Exception):
    """A data, input or SQL problem the user can fix; the CLI prints it as one line and exits 1."""
