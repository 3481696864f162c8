# The report's charts (plotly figures) built from a recording's series.
"""One function per chart of ``pybroker prof report``; each returns a plotly Figure.

The charts: throughput against flush latency and dirty memory; the CommitLog residency heat
strip with the positions drawn on it; the instrument histograms; faults and CPU per process;
pulls that read cold pages per consumer group; disk I/O of the store device. ``compare``
draws the same figures with two recordings overlaid (``series`` lists of (label, Series)).
"""
import datetime

import colorsys

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from pybroker.prof.recording import Recording
from pybroker.prof.series import HISTOGRAM_UNITS, Series, active_groups, bucket_label

__all__ = ["timeline", "residency_strip", "histograms", "processes", "pulls", "disk",
           "CHART_IDS", "colours_of", "isolated_markers"]

MIB = 1 << 20
# Ids of the report's charts in page order (the page and its tests use them).
CHART_IDS = ("timeline", "residency", "histograms", "processes", "pulls", "disk")
_DASHES = ("solid", "dash")
# One colour per run in the histograms, so the legend holds for every panel.
_RUN_COLOURS = ("#4a6fa5", "#e4572e")


def colours_of(names) -> dict[str, str]:
    """One colour per name, the same in every subplot of a chart (plotly would colour each
    trace by its position, so a process would change colour from one subplot to the next and
    the legend would match only the first). Names are coloured in sorted order; past the 24
    of the palette, colours are spread evenly over the hue circle."""
    ordered = sorted(set(names))
    palette = qualitative.Dark24
    if len(ordered) <= len(palette):
        return dict(zip(ordered, palette, strict=False))
    colours = {}
    for index, name in enumerate(ordered):
        red, green, blue = colorsys.hls_to_rgb(index / len(ordered), 0.42, 0.7)
        colours[name] = f"rgb({red * 255:.0f},{green * 255:.0f},{blue * 255:.0f})"
    return colours


def _times(series: Series) -> list:
    return [datetime.datetime.fromtimestamp(ms / 1000) for ms in series.t_ms]


def _x(series: Series, relative: bool):
    return series.seconds if relative else _times(series)


def isolated_markers(values, colour: str) -> dict:
    """A marker on each value with no value beside it (a line with gaps draws nothing for
    a lone point: a latency seen in one second of a short recording would not show), none
    elsewhere."""
    finite = np.isfinite(np.asarray(values, dtype=float))
    before = np.concatenate([[False], finite[:-1]])
    after = np.concatenate([finite[1:], [False]])
    alone = finite & ~before & ~after
    return {"size": np.where(alone, 6, 0).tolist(), "color": colour}


def timeline(runs: list[tuple[str, Series]], relative: bool = False) -> go.Figure:
    """Put/get messages per second, flush and put latency (p99) and dirty/writeback memory,
    on one time axis."""
    figure = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                           subplot_titles=("messages per second", "latency (ms, per second)",
                                           "dirty and writeback memory (MiB)"))
    colours = colours_of(["put", "pulled", "flush p99", "flush max", "send p99",
                          "append drain p99", "dirty", "writeback"])
    for index, (label, series) in enumerate(runs):
        x, dash = _x(series, relative), _DASHES[index % 2]
        prefix = f"{label}: " if len(runs) > 1 else ""
        lines = ((1, "put", series.rates.get("put_messages")),
                 (1, "pulled", series.rates.get("get_transferred_messages")),
                 (2, "flush p99", series.quantiles["flush_latency_us"]["p99"] / 1000),
                 (2, "flush max", series.quantiles["flush_latency_us"]["max"] / 1000),
                 (2, "send p99", series.quantiles["put_latency_us"]["p99"] / 1000),
                 (2, "append drain p99", series.quantiles["append_drain_us"]["p99"] / 1000),
                 (3, "dirty", series.memory["dirty_bytes"] / MIB),
                 (3, "writeback", series.memory["writeback_bytes"] / MIB))
        for row, name, values in lines:
            if values is None:
                continue
            figure.add_trace(go.Scatter(x=x, y=values, name=prefix + name,
                                        mode="lines+markers",
                                        line={"dash": dash, "color": colours[name]},
                                        marker=isolated_markers(values, colours[name]),
                                        connectgaps=False),
                             row=row, col=1)
    figure.update_yaxes(type="log", row=2, col=1)
    figure.update_layout(height=720, title="Throughput, flush latency and dirty memory",
                         hovermode="x unified")
    return figure


def residency_strip(recording: Recording, series: Series) -> go.Figure:
    """CommitLog page-cache residency over time (per chunk, % resident) with the written,
    flushed, dispatched and pre-faulted positions and each group's read position."""
    chunk_bytes = recording.header.get("chunk_bytes", 8 * MIB)
    starts = sorted({entry["base"] + i * chunk_bytes for sample in recording.samples
                     for entry in sample["commitlog"] for i in range(len(entry["chunks"]))})
    row_of = {start: row for row, start in enumerate(starts)}
    z = np.full((len(starts), len(recording.samples)), np.nan)
    for column, sample in enumerate(recording.samples):
        for entry in sample["commitlog"]:
            for i, value in enumerate(entry["chunks"]):
                z[row_of[entry["base"] + i * chunk_bytes], column] = value / 10
    x = _times(series)
    figure = go.Figure(go.Heatmap(x=x, y=[start / MIB for start in starts], z=z,
                                  zmin=0, zmax=100, colorscale="Viridis",
                                  colorbar={"title": "% resident"}, name="residency"))
    for name in ("written", "flushed", "dispatched", "prefaulted"):
        values = series.positions.get(name)
        if values is not None and values.any():
            figure.add_trace(go.Scatter(x=x, y=values / MIB, name=name, mode="lines"))
    for key in active_groups(series):
        group = series.groups[key]
        if not np.isnan(group["read_position"]).all():
            figure.add_trace(go.Scatter(x=x, y=group["read_position"] / MIB, mode="lines",
                                        name=f"read: {key}", line={"dash": "dot"}))
    figure.update_layout(height=520, title="CommitLog page-cache residency and positions",
                         yaxis_title="CommitLog offset (MiB)",
                         legend={"orientation": "h", "y": -0.15})
    return figure


def histograms(runs: list[tuple[str, Series]]) -> go.Figure:
    """Every instrument histogram that recorded something: counts per log2 bucket over the
    whole recording. Every run draws the same buckets (the span used by any run, zeros
    where one had none), in increasing order, labelled by upper bound in the histogram's
    unit; one colour per run in every panel."""
    names = [name for name in HISTOGRAM_UNITS
             if any(name in s.histograms and s.histograms[name].sum() for _, s in runs)]
    columns = 3
    rows = max((len(names) + columns - 1) // columns, 1)
    figure = make_subplots(rows=rows, cols=columns, subplot_titles=[
        HISTOGRAM_UNITS[name][1] for name in names] or [""])
    empty = np.zeros(64, np.int64)
    for index, name in enumerate(names):
        row, column = index // columns + 1, index % columns + 1
        unit = HISTOGRAM_UNITS[name][0]
        used = np.flatnonzero(sum((s.histograms.get(name, empty) for _, s in runs), empty))
        buckets = range(int(used[0]), int(used[-1]) + 1)
        labels = [bucket_label(bucket, unit) for bucket in buckets]
        for run_index, (label, series) in enumerate(runs):
            counts = series.histograms.get(name, empty)
            figure.add_trace(go.Bar(x=labels, y=[int(counts[b]) for b in buckets], name=label,
                                    showlegend=index == 0, legendgroup=label,
                                    marker={"opacity": 0.8,
                                            "color": _RUN_COLOURS[run_index % 2]},
                                    offsetgroup=str(run_index)),
                             row=row, col=column)
        figure.update_xaxes(categoryorder="array", categoryarray=labels, row=row, col=column,
                            title_text=f"{unit}, bucket upper bound", title_font_size=9)
    figure.update_layout(height=280 * rows, title="Instrument histograms (count per bucket)",
                         barmode="group", font={"size": 10})
    figure.update_annotations(font_size=11)
    return figure


def processes(runs: list[tuple[str, Series]], relative: bool = False) -> go.Figure:
    """Minor and major page faults per second and CPU % per broker process."""
    figure = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.07,
                           subplot_titles=("minor faults per second", "major faults per second",
                                           "CPU %"))
    colours = colours_of(name for _, series in runs for name in series.processes)
    for index, (label, series) in enumerate(runs):
        x, dash = _x(series, relative), _DASHES[index % 2]
        prefix = f"{label}: " if len(runs) > 1 else ""
        for name, figures in series.processes.items():
            for row, key in ((1, "minor_faults"), (2, "major_faults"), (3, "cpu_percent")):
                figure.add_trace(go.Scatter(x=x, y=figures[key], mode="lines",
                                            name=prefix + name, legendgroup=prefix + name,
                                            showlegend=row == 1,
                                            line={"dash": dash, "color": colours[name]}),
                                 row=row, col=1)
    figure.update_layout(height=680, title="Page faults and CPU per process")
    return figure


def pulls(runs: list[tuple[str, Series]], relative: bool = False) -> go.Figure:
    """Pulls per second and the share that read pages not in the page cache, per consumer
    group that pulled during the recording (system and stale groups left out)."""
    figure = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1,
                           subplot_titles=("pulls per second",
                                           "pulls that read cold pages (%)"))
    colours = colours_of(key for _, series in runs for key in active_groups(series))
    for index, (label, series) in enumerate(runs):
        x, dash = _x(series, relative), _DASHES[index % 2]
        prefix = f"{label}: " if len(runs) > 1 else ""
        for key in active_groups(series):
            group = series.groups[key]
            line = {"dash": dash, "color": colours[key]}
            share = np.divide(group["cold_pulls"] * 100, group["pulls"],
                              out=np.full(len(group["pulls"]), np.nan),
                              where=group["pulls"] > 0)
            figure.add_trace(go.Scatter(x=x, y=group["pulls"], name=prefix + key,
                                        legendgroup=prefix + key, mode="lines",
                                        line=line), row=1, col=1)
            figure.add_trace(go.Scatter(x=x, y=share, name=prefix + key, showlegend=False,
                                        legendgroup=prefix + key, mode="lines+markers",
                                        line=line), row=2, col=1)
    figure.update_yaxes(range=[0, 100], row=2, col=1)
    figure.update_layout(height=520, title="Consumers: pulls and cold reads")
    return figure


def disk(runs: list[tuple[str, Series]], relative: bool = False) -> go.Figure:
    """Bytes read and written per second on the store's device, and its busy time."""
    figure = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1,
                           subplot_titles=("store device MiB/s", "device busy (%)"))
    colours = colours_of(["read", "write", "busy"])
    for index, (label, series) in enumerate(runs):
        x, dash = _x(series, relative), _DASHES[index % 2]
        prefix = f"{label}: " if len(runs) > 1 else ""
        for name in ("read_bytes", "write_bytes"):
            short = name.split("_")[0]
            figure.add_trace(go.Scatter(x=x, y=series.disk[name] / MIB, mode="lines",
                                        name=prefix + short,
                                        line={"dash": dash, "color": colours[short]}),
                             row=1, col=1)
        figure.add_trace(go.Scatter(x=x, y=series.disk["busy_ms"] / 10, mode="lines",
                                    name=prefix + "busy",
                                    line={"dash": dash, "color": colours["busy"]}),
                         row=2, col=1)
    figure.update_layout(height=440, title="Store device I/O")
    return figure
