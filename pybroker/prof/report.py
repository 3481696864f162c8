# `pybroker prof report` and `compare`: one self-contained HTML page of charts and a reading.
"""Build the report page of one recording, or the comparison page of two.

The page embeds plotly.js (no network access needed to open it), the charts of
:mod:`pybroker.prof.charts`, the automatic reading and the recording's settings. A small
script at the end checks that every chart drew and writes the outcome into the page
(``<body data-charts=N data-rendered=M data-errors=K>``) and, in ``<pre id="figures-drawn">``,
what plotly actually drew: per chart, each trace's name, legend group, colour and axes, how
many values it holds and how many lines and points it put on the page, and each category
axis's order. The tests load the page in headless Chromium and read both back.
"""
import datetime
import html
from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from pybroker.prof import charts
from pybroker.prof.reading import plain_summary, reading, summary
from pybroker.prof.recording import Recording
from pybroker.prof.series import series_of

__all__ = ["report_page", "compare_page", "write_page"]

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px;
       color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 2em; }
p.reading { background: #f4f6fa; border-left: 4px solid #4a6fa5; padding: 0.8em 1em;
            line-height: 1.5; }
table { border-collapse: collapse; font-size: 0.9em; }
td, th { border-bottom: 1px solid #ddd; padding: 0.25em 0.8em; text-align: left; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
section.chart { margin-top: 1.5em; }
"""
# Runs last: waits for every chart's SVG, then records what drew and what failed.
_CHECK = """
<script>
(function () {
  var charts = document.querySelectorAll('.plotly-graph-div');
  var started = Date.now();
  function check() {
    var drawn = 0;
    charts.forEach(function (chart) { if (chart.querySelector('.main-svg')) drawn++; });
    if (drawn < charts.length && Date.now() - started < 15000) {
      setTimeout(check, 100); return;
    }
    var drawnFigures = {};
    charts.forEach(function (chart) {
      if (!chart._fullData) return;
      var categories = {};
      Object.keys(chart._fullLayout).forEach(function (key) {
        var axis = chart._fullLayout[key];
        if (/^xaxis[0-9]*$/.test(key) && axis && axis._categories && axis._categories.length)
          categories[key] = axis._categories.slice();
      });
      // What each scatter trace put on the page: line segments and visible points.
      var marks = {};
      chart.querySelectorAll('g.trace.scatter').forEach(function (group) {
        var data = group.__data__, trace = data && data[0] && data[0].trace;
        if (!trace) return;
        var count = 0;
        group.querySelectorAll('path.js-line').forEach(function (path) {
          // A lone point's path is a move with no segment ("M x,y"): it draws nothing.
          if (/[LHVCSQTAZ]/i.test((path.getAttribute('d') || '').slice(1))) count++;
        });
        group.querySelectorAll('path.point').forEach(function (point) {
          var box = point.getBBox();
          if (box.width > 0 && box.height > 0) count++;
        });
        marks[trace.index] = (marks[trace.index] || 0) + count;
      });
      drawnFigures[chart.id] = {
        traces: chart._fullData.map(function (trace) {
          var colour = (trace.line && trace.line.color) ||
                       (trace.marker && typeof trace.marker.color === 'string' &&
                        trace.marker.color) || null;
          var finite = (trace.y || []).filter(function (value) {
            return value !== null && isFinite(value); }).length;
          return {name: trace.name, legendgroup: trace.legendgroup,
                  showlegend: trace.showlegend, colour: colour, type: trace.type,
                  xaxis: trace.xaxis, yaxis: trace.yaxis, finite: finite,
                  marks: marks[trace.index] || 0};
        }),
        categories: categories};
    });
    document.getElementById('figures-drawn').textContent = JSON.stringify(drawnFigures);
    document.body.setAttribute('data-charts', String(charts.length));
    document.body.setAttribute('data-rendered', String(drawn));
    document.body.setAttribute('data-errors', String(window.__profErrors.length));
    document.getElementById('render-status').textContent =
      drawn + ' of ' + charts.length + ' charts drawn, ' + window.__profErrors.length +
      ' script errors ' + window.__profErrors.join('; ');
  }
  check();
})();
</script>
"""


def _head(title: str) -> str:
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style>"
            "<script>window.__profErrors = [];"
            "window.addEventListener('error', function (e) {"
            " window.__profErrors.push(String(e.message)); });</script>"
            f"<script>{get_plotlyjs()}</script></head><body>")


def _chart(chart_id: str, title: str, figure: go.Figure) -> str:
    body = figure.to_html(full_html=False, include_plotlyjs=False, div_id=f"chart-{chart_id}",
                          config={"displaylogo": False, "responsive": True})
    return f"<section class=\"chart\" id=\"{chart_id}\"><h2>{html.escape(title)}</h2>" \
           f"{body}</section>"


def _table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    head = "".join(f"<th>{html.escape(cell)}</th>" for cell in header)
    lines = []
    for row in rows:
        cells = [f"<td>{html.escape(row[0])}</td>"]
        cells += [f"<td class=\"number\">{html.escape(cell)}</td>" for cell in row[1:]]
        lines.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(lines)}</table>"


def _when(recording: Recording) -> str:
    started = recording.header.get("started_ms", 0)
    return datetime.datetime.fromtimestamp(started / 1000).strftime("%Y-%m-%d %H:%M:%S")


def _format(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"


_STATUS = "<p id=\"render-status\"></p><pre id=\"figures-drawn\" hidden></pre>"


def _settings_known(recording: Recording) -> bool:
    """Whether the recording carries the broker's settings: it names where they came from,
    or (recordings of before that field) holds more than the store path, which every
    recording had."""
    header = recording.header
    return bool(header.get("settings_source")) or len(header.get("settings", {})) > 1


def _settings_note(recording: Recording) -> str:
    """Where the recording's settings came from, or that they are unknown."""
    source = recording.header.get("settings_source")
    if _settings_known(recording):
        return f"<p>Read from {html.escape(source or 'the broker')} when the recording " \
               f"started.</p>"
    return ("<p id=\"settings-unknown\">The broker's settings are <b>unknown</b>: this "
            "recording does not carry them (it was made with --store from a broker that did "
            "not write &lt;store&gt;/run/broker.conf). Only the kernel's settings are "
            "listed.</p>")


def report_page(recording: Recording) -> str:
    """The report of one recording (an HTML document)."""
    series = series_of(recording)
    header = recording.header
    settings = sorted(header.get("settings", {}).items()) + \
        [(f"vm.{key}", str(value)) for key, value in sorted(header.get("vm", {}).items())]
    figures = summary(series)
    parts = [_head(f"pybroker prof report: {recording.name}"),
             f"<h1>pybroker prof report: {html.escape(recording.name)}</h1>",
             f"<p>Store {html.escape(str(header.get('store')))} on "
             f"{html.escape(str(header.get('host')))} (Linux "
             f"{html.escape(str(header.get('kernel')))}, {header.get('cpus')} CPUs), "
             f"{len(recording.samples)} samples from {_when(recording)}.</p>",
             "<h2>What happened</h2>",
             f"<p class=\"reading\" id=\"summary\">"
             f"{html.escape(plain_summary(recording, series))}</p>",
             "<h2>Details for tuning</h2>",
             f"<p class=\"reading\" id=\"reading\">{html.escape(reading(recording, series))}</p>",
             _chart("timeline", "Throughput, flush latency and dirty memory",
                    charts.timeline([("", series)])),
             _chart("residency", "CommitLog residency heat strip",
                    charts.residency_strip(recording, series)),
             _chart("histograms", "Histograms", charts.histograms([("run", series)])),
             _chart("processes", "Faults and CPU per process",
                    charts.processes([("", series)])),
             _chart("pulls", "Consumers: cold reads", charts.pulls([("", series)])),
             _chart("disk", "Store device", charts.disk([("", series)])),
             "<h2>Figures of the whole recording</h2>",
             _table([(name, _format(value)) for name, value in figures.items()],
                    ("figure", "value")),
             "<h2>Settings</h2>", _settings_note(recording),
             _table([(key, value) for key, value in settings], ("setting", "value")),
             _STATUS, _CHECK, "</body></html>"]
    return "\n".join(parts)


def compare_page(first: Recording, second: Recording, labels: tuple[str, str]) -> str:
    """Two recordings side by side: overlaid charts on a time axis from each one's start,
    both residency strips, and their whole-run figures with the ratio B / A."""
    a, b = series_of(first), series_of(second)
    runs = [(labels[0], a), (labels[1], b)]
    figures_a, figures_b = summary(a), summary(b)
    rows = []
    for name in sorted(set(figures_a) | set(figures_b)):
        value_a, value_b = figures_a.get(name), figures_b.get(name)
        ratio = f"{value_b / value_a:.2f}" if value_a and value_b is not None else ""
        rows.append((name, "" if value_a is None else _format(value_a),
                     "" if value_b is None else _format(value_b), ratio))
    title = f"pybroker prof compare: {labels[0]} vs {labels[1]}"
    parts = [_head(title), f"<h1>{html.escape(title)}</h1>",
             "<h2>What happened</h2>",
             f"<p class=\"reading\" id=\"summary\"><b>{html.escape(labels[0])}:</b> "
             f"{html.escape(plain_summary(first, a))}<br><b>{html.escape(labels[1])}:</b> "
             f"{html.escape(plain_summary(second, b))}</p>",
             "<h2>Details for tuning</h2>",
             f"<p class=\"reading\" id=\"reading\"><b>{html.escape(labels[0])}:</b> "
             f"{html.escape(reading(first, a))}<br><b>{html.escape(labels[1])}:</b> "
             f"{html.escape(reading(second, b))}</p>",
             "<h2>Settings that differ</h2>", _settings_difference(first, second, labels),
             "<h2>Figures of the whole recordings</h2>",
             _table(rows, ("figure", labels[0], labels[1], "B / A")),
             _chart("timeline", "Throughput, flush latency and dirty memory (seconds from "
                    "each start)", charts.timeline(runs, relative=True)),
             _chart("residency", f"CommitLog residency: {labels[0]}",
                    charts.residency_strip(first, a)),
             _chart("residency-b", f"CommitLog residency: {labels[1]}",
                    charts.residency_strip(second, b)),
             _chart("histograms", "Histograms", charts.histograms(runs)),
             _chart("processes", "Faults and CPU per process",
                    charts.processes(runs, relative=True)),
             _chart("pulls", "Consumers: cold reads", charts.pulls(runs, relative=True)),
             _chart("disk", "Store device", charts.disk(runs, relative=True)),
             _STATUS, _CHECK, "</body></html>"]
    return "\n".join(parts)


def _settings_difference(first: Recording, second: Recording, labels: tuple[str, str]) -> str:
    """The settings both recordings know and that differ; a recording without settings is
    named as unknown rather than shown as differing in every setting."""
    known = [(label, recording) for label, recording in zip(labels, (first, second),
                                                            strict=True)
             if _settings_known(recording)]
    unknown = [label for label in labels if label not in dict(known)]
    note = "".join(f"<p class=\"settings-unknown\">The settings of {html.escape(label)} are "
                   f"<b>unknown</b> (the recording does not carry them): they cannot be "
                   f"compared.</p>" for label in unknown)
    if len(known) < 2:
        return note
    values_a, values_b = first.header["settings"], second.header["settings"]
    differing = [(key, str(values_a.get(key, "unknown")), str(values_b.get(key, "unknown")))
                 for key in sorted(set(values_a) | set(values_b))
                 if values_a.get(key) != values_b.get(key)]
    if not differing:
        return "<p>None: the recorded settings are the same.</p>"
    return _table(differing, ("setting", labels[0], labels[1]))


def write_page(page: str, path: str) -> None:
    with open(path, "w", encoding="utf-8") as out:
        out.write(page)
