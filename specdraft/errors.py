"""Errors that reach the user as one clear line (exit code 1)."""


class SpecdraftError(Exception):
    """A data, input or SQL problem the user can fix; the CLI prints it as one line and exits 1."""


def first_line(exc: BaseException) -> str:
    """An exception's message cut to its first non-blank line (its type's name if it has none),
    for the one-line errors; --debug shows the whole of it.

    >>> first_line(ValueError("bad row\\n  at line 3")), first_line(KeyError())
    ('bad row', 'KeyError')
    """
    java = getattr(exc, "java_exception", None)  # Py4J: the JVM's exception says what went wrong
    text = java.toString() if java is not None else str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__
