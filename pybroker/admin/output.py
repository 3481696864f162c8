# Output of `pybroker admin`: aligned tables by default, JSON for scripts.
"""How every admin command prints: a table with a header row (``#Name`` columns, as mqadmin
prints them), key/value lines, or ``--json`` (one JSON document on stdout)."""
import sys

import orjson

__all__ = ["Output"]


class Output:
    """Where a command writes its result. ``json`` selects the machine-readable form."""

    def __init__(self, json: bool, stream=None, progress=None):
        self.json = json
        self.stream = stream or sys.stdout
        self.progress_stream = progress or sys.stderr

    def table(self, columns: list[str], rows: list[list], document=None) -> None:
        """Aligned columns (numbers right-aligned); ``document`` for --json (default: a list
        of {column: value})."""
        if self.json:
            if document is None:
                document = [dict(zip(columns, row, strict=True)) for row in rows]
            self.document(document)
            return
        cells = [[f"#{name}" for name in columns]] + [[_text(value) for value in row]
                                                      for row in rows]
        widths = [max(len(row[index]) for row in cells) for index in range(len(columns))]
        numeric = [all(_is_number(row[index]) for row in rows) and rows != []
                   for index in range(len(columns))]
        for row in cells:
            parts = [cell.rjust(widths[index]) if numeric[index] and cell[:1] != "#"
                     else cell.ljust(widths[index]) for index, cell in enumerate(row)]
            self.stream.write("  ".join(parts).rstrip() + "\n")

    def pairs(self, values: dict, document=None) -> None:
        """``key : value`` lines, keys sorted and aligned (brokerStatus' form)."""
        if self.json:
            self.document(values if document is None else document)
            return
        width = max((len(key) for key in values), default=0)
        for key in sorted(values):
            self.stream.write(f"{key.ljust(width)} : {_text(values[key])}\n")

    def document(self, value) -> None:
        self.stream.write(orjson.dumps(value, option=orjson.OPT_INDENT_2
                                       | orjson.OPT_NON_STR_KEYS).decode() + "\n")

    def line(self, text: str) -> None:
        if not self.json:
            self.stream.write(text + "\n")

    def progress(self, text: str) -> None:
        """A progress line on stderr (long operations), never mixed into the data."""
        self.progress_stream.write(text + "\n")
        self.progress_stream.flush()


def _text(value) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    return "" if value is None else str(value)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
