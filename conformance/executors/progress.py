"""The driver's progress bar: cases done of the total, the rate and the time left (rich)."""

from __future__ import annotations

from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn, \
    TimeRemainingColumn
from rich.text import Text


class RateColumn(ProgressColumn):
    """``12.3 cases/s`` (rich's own speed estimate over the last seconds), ``-`` before the first ones."""

    def render(self, task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("-" if speed is None else f"{speed:,.1f} cases/s", style="progress.data.speed")


def progress_bar(console) -> Progress:
    """A rich progress bar: description, bar, ``done/total``, rate, ETA, elapsed."""
    return Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    RateColumn(), TextColumn("ETA"), TimeRemainingColumn(), TimeElapsedColumn(), console=console,
                    transient=False, speed_estimate_period=60.0)


def run_with_progress(console, total: int, run, description: str = "cases") -> dict:
    """``run(on_result)`` with a bar of ``total`` cases that ``on_result(record)`` advances (its description
    counts the statuses so far); returns what ``run`` returns."""
    counts: dict[str, int] = {}
    with progress_bar(console) as progress:
        bar = progress.add_task(description, total=total)

        def on_result(record: dict) -> None:
            counts[record["status"]] = counts.get(record["status"], 0) + 1
            progress.update(bar, advance=1, description=" ".join(f"{k} {v}" for k, v in sorted(counts.items())))

        result = run(on_result)
        progress.update(bar, completed=total)
    return result
