"""Goal: the side-by-side benchmark's pure pieces compute what the report quotes. Method: feed
hand-made load outputs, records and py-spy collapsed stacks through the parsers, aggregation and
flame-graph writer, and check medians, spreads, ratios, process grouping and well-formed SVG."""
import collections
import pathlib
import sys
import xml.etree.ElementTree as ElementTree

TOOLS = pathlib.Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))

import bench_profile  # noqa: E402
import bench_report  # noqa: E402
import bench_side_by_side as driver  # noqa: E402


def test_result_line_is_the_last_bench_result_json():
    stdout = ("topic: t\nBENCH_RESULT {\"send_tps\": 1.0}\n[Complete] Send TPS: 5\n"
              "BENCH_RESULT {\"send_tps\": 2.5, \"send_failed\": 0}\n")
    assert driver.parse_result_line(stdout) == {"send_tps": 2.5, "send_failed": 0}
    assert driver.parse_result_line("no result here\n") == {}


def test_scenario_names_filter_flush_modes_apart():
    names = [scenario.name for scenario in driver.matrix("full", with_go=True)]
    assert len(names) == len(set(names))
    sync = [name for name in names if "flush-sync" in name]
    assert sync and all("SYNC" not in name and "flush-async" not in name for name in sync)
    assert [s.kind for s in driver.matrix("profile", False)] == ["produce"]


def _record(broker, run, send_tps, cpu_s, consumer_tps=None, **extra):
    record = {"scenario": "produce-128B-flush-async", "broker": broker, "run": run,
              "send_tps": send_tps, "broker_cpu_s": cpu_s, "send_failed": 0,
              "response_failed": 1 if run == 2 else 0, "peak_rss_mib": 100.0 * (run + 1),
              "cpu_s_per_100k": cpu_s * 10, **extra}
    if consumer_tps is not None:
        record["consumer"] = {"consume_tps": consumer_tps}
    return record


def test_aggregate_gives_median_spread_and_ratio_of_medians():
    records = [_record("pybroker", run, tps, cpu, consumer_tps=tps + 1)
               for run, (tps, cpu) in enumerate([(100, 1.0), (300, 3.0), (200, 2.0)])]
    records += [_record("java", run, tps, 4.0) for run, tps in enumerate([400, 500, 600])]
    (row,) = bench_report.aggregate(records)
    mine = row["brokers"]["pybroker"]
    assert mine["send_tps"] == {"median": 200, "min": 100, "max": 300, "n": 3}
    assert mine["consume_tps"]["median"] == 201
    assert mine["failures"]["max"] == 1 and mine["failures"]["min"] == 0
    assert row["brokers"]["java"]["consume_tps"] is None
    assert row["ratio_pybroker_over_java"]["send_tps"] == round(200 / 500, 3)
    assert "consume_tps" not in row["ratio_pybroker_over_java"]
    table = bench_report.table({"summary": [row]})
    assert "200 (100–300)" in table and "0.40" in table


def test_a_failed_run_is_counted_as_an_error_not_as_zero_failures():
    records = [_record("pybroker", 0, 100, 1.0), _record("pybroker", 1, 100, 1.0,
                                                         error="timed out")]
    (row,) = bench_report.aggregate(records)
    assert row["brokers"]["pybroker"]["errors"] == 1
    assert row["brokers"]["pybroker"]["failures"]["n"] == 1


COLLAPSED = "\n".join([
    'process 10:"python -m pybroker";process 11:"python -m pybroker";'
    "_child (/x/pybroker/proc/supervisor.py:5);run_appender (/x/pybroker/proc/appender.py:9);"
    "signal (/x/pybroker/proc/wake.py:3) 30",
    'process 10:"python -m pybroker";process 11:"python -m pybroker";'
    "_child (/x/pybroker/proc/supervisor.py:5);run_appender (/x/pybroker/proc/appender.py:9);"
    "append (/x/pybroker/store/mapped_file.py:7) 10",
    'process 10:"python -m pybroker";run_broker (/x/pybroker/proc/supervisor.py:1);'
    "select (/usr/lib/python3.11/selectors.py:4) 5",
    "garbage line without count",
])


def test_collapsed_stacks_are_grouped_by_innermost_process_and_labelled():
    by_process = bench_profile.parse_collapsed(COLLAPSED)
    assert set(by_process) == {"10", "11"}
    assert sum(by_process["11"].values()) == 40
    assert bench_profile.role_of(by_process["11"]) == "appender"
    assert bench_profile.role_of(by_process["10"]) == "supervisor"
    heavy = bench_profile.heaviest(by_process["11"])
    assert heavy["self"][0] == ("signal (pybroker/proc/wake.py)", 75.0)
    assert ("run_appender (pybroker/proc/appender.py)", 100.0) in heavy["inclusive_pybroker"]


def test_flame_graph_is_well_formed_svg_with_every_wide_frame():
    stacks = collections.Counter({("a (/p/pybroker/x.py:1)", "b <&> (/p/pybroker/y.py:2)"): 9,
                                  ("a (/p/pybroker/x.py:1)",): 1})
    svg = bench_profile.flame_svg(stacks, "test & title")
    root = ElementTree.fromstring(svg)
    titles = [element.text for element in root.iter("{http://www.w3.org/2000/svg}title")]
    assert any(title.startswith("b <&> (pybroker/y.py)") for title in titles)
    assert any(title.startswith("a (pybroker/x.py) — 100.0%") for title in titles)
