"""Terminal output that survives copy and paste: commands on lines of their own, never hard-wrapped.

rich wraps long lines at the terminal width (80 columns when the output is a pipe), inserting real
newlines: a repro line copied from such output no longer runs. Everything a user may paste back — a
repro command, a Python snippet — goes through :func:`print_command` (``soft_wrap``: the terminal wraps
it visually, the text keeps one line). Everything else that comes from outside the program (paths,
backend names, error messages such as ``[/path/file.cc:129]``) goes through :func:`esc` before it is
put into markup.
"""

from __future__ import annotations


def make_console(stderr: bool = False):
    """A rich console for the commands' terminal output (stderr for progress and notes)."""
    from rich.console import Console

    return Console(stderr=stderr)


def esc(value) -> str:
    """``value`` as text safe inside rich markup (``None`` as ``-``)."""
    from rich.markup import escape

    return "-" if value is None else escape(str(value))


def print_command(console, text: str, label: str | None = "repro:", indent: str = "   ") -> None:
    """Print ``label`` on one line and ``text`` (a command or snippet) unwrapped on the next ones, from
    column 0, without markup or highlighting: what is printed is exactly what runs when pasted."""
    if label:
        console.print(indent + label, markup=False, highlight=False)
    console.print(text, soft_wrap=True, markup=False, highlight=False, crop=False)


def narrow_table(columns: list[str], *, wrap: str | None = None, title: str | None = None):
    """A rich table that fits 80 columns: no box lines, one space between columns, every column on one line
    (``no_wrap``) except ``wrap``, which takes what width is left and wraps at spaces. Group rows under a
    heading row (:func:`heading_row`) rather than repeating a long first cell on every row."""
    from rich import box
    from rich.table import Table

    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
              padding=(0, 1), collapse_padding=True)
    for col in columns:
        t.add_column(col, no_wrap=col != wrap, overflow="fold" if col == wrap else "ellipsis")
    return t


def heading_row(table, text: str) -> None:
    """A row holding ``text`` (bold) in the first column and nothing else: the group's name, once."""
    table.add_row(f"[bold]{esc(text)}[/]", *([""] * (len(table.columns) - 1)))
