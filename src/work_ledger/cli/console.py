"""The terminal consoles every verb prints through, made on first use.

Neither Typer nor rich is imported here: a client verb that draws nothing never loads rich.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from rich.console import Console


class _LazyConsole:
    """A rich Console made on first use, so a verb that draws nothing never imports rich."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def _made(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self._made(), name)

    # Dunder methods bypass __getattr__; rich's Live and Progress enter the console.
    def __enter__(self) -> Console:
        return self._made().__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._made().__exit__(*exc)


console = cast("Console", _LazyConsole())
err_console = cast("Console", _LazyConsole(stderr=True))
