"""The one exception type for user mistakes.

A :class:`UserError` is a problem with what the user gave us (a file, a key, a value, a plan), not a bug. The CLI
turns it into a short message and exit status 2; anything else is an internal error and may traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """A mistake in user input, located by file, line and key path.

    Args:
        message: what is wrong and, where it helps, the accepted values or the violated rule.
        file: the file the input came from, if any.
        key_path: dotted path of the offending key (``system.profile``, ``gpu.nvlink.links``).
        line: 1-based line in ``file``, when known.
    """

    def __init__(self, message: str, *, file: str | None = None, key_path: str | None = None,
                 line: int | None = None) -> None:
        message = cut(message)
        super().__init__(message)
        self.message = message
        self.file = file
        self.key_path = key_path
        self.line = line

    def located(self, *, file: str | None = None, key_prefix: str | None = None,
                line: int | None = None) -> UserError:
        """Return a copy with the location filled in (an outer layer knows the file, an inner one the key)."""
        key = self.key_path
        if key_prefix:
            key = f"{key_prefix}.{key}" if key else key_prefix
        return UserError(self.message, file=self.file or file, key_path=key, line=self.line or line)

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = self.file + (f":{self.line}" if self.line else "")
        if self.key_path:
            where = f"{where}: {self.key_path}" if where else self.key_path
        return f"{where}: {self.message}" if where else self.message


MAX_MESSAGE_CHARS = 600


def cut(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` as is up to ``limit`` characters; longer (a 500,000-character preset name), its head and tail
    around a note of how much was left out, so one bad value cannot make a 500 KB error line."""
    if len(text) <= limit:
        return text
    head, tail = text[: limit * 2 // 3], text[-(limit // 6):]
    return f"{head} ... [{len(text) - len(head) - len(tail):,} characters cut] ... {tail}"
