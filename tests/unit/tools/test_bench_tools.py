"""Goal: the side-by-side benchmark's pure pieces compute what the report quotes. Method: feed
hand-made load outputs (ours and every Apache tool's line format), process snapshots, records
and py-spy collapsed stacks through the parsers, window events, per-message figures,
aggregation, failure reasons, partial results, comparison and flame-graph writer, and check
medians, spreads, ratios, goals, one-line reasons, process grouping and well-formed SVG; find
the pybroker this interpreter runs (a real subprocess probe) and check Apache sources against
their tag on hand-made checkouts."""
import collections
import statistics
import pathlib
import sys
import types
import xml.etree.ElementTree as ElementTree

import pytest

TOOLS = pathlib.Path(__file__).resolve().parents[3] / "tools"
sys.path.insert(0, str(TOOLS))

import apache_bench  # noqa: E402
import bench_brokers  # noqa: E402
import bench_load  # noqa: E402
import bench_profile  # noqa: E402
import bench_report  # noqa: E402
import bench_sample  # noqa: E402
import bench_side_by_side as driver  # noqa: E402


def test_result_line_is_the_last_bench_result_json():
    stdout = ("topic: t\nBENCH_RESULT {\"tps\": 1.0}\n[Complete] Send TPS: 5\n"
              "BENCH_RESULT {\"tps\": 2.5, \"send_failed\": 0}\n")
    assert driver.parse_result_line(stdout) == {"tps": 2.5, "send_failed": 0}
    assert driver.parse_result_line("no result here\n") == {}


def test_matrix_follows_the_standard_tool_and_names_are_unique():
    full = driver.matrix("full")
    names = [scenario.name for scenario in full]
    assert len(names) == len(set(names))
    assert {s.threads for s in full if s.kind == "produce"} == {8, 32, 64}
    assert {s.body_bytes for s in full if s.threads == 64} == {128, 1024}
    assert any(s.flush == "SYNC_FLUSH" for s in full)
    assert [s.name for s in full if s.kind == "batch"] == ["batch-128B-w64x16-async"]
    assert "produce-128B-w64-sync" in names
    assert [s.kind for s in driver.matrix("profile")] == ["produce"]


def test_apache_lines_open_the_window_then_close_it_at_each_later_line():
    seen = []
    events = bench_load.WindowEvents(seen.append, apache=True, apache_lines_max=3)
    line = "Current Time: 2026-12-03 10:00:00,000 Send TPS: {} Max RT(ms): 9 Average RT(ms): 1.0"
    assert events("topic: BenchmarkTest threadCount: 64") is False
    assert events(line.format(900)) is False
    assert events(line.format(1000)) is False
    assert events(line.format(1100)) is True        # the third line stops the run
    assert seen == ["warmup_done", "measure_end", "measure_end"]
    assert events.apache_tps == [900, 1000, 1100]
    assert events.apache_avg_rt_ms == [1.0, 1.0, 1.0]
    consumer = bench_load.WindowEvents(seen.append, apache=True, apache_lines_max=9)
    consumer("Current Time: x TPS: 50 FAIL: 0 AVG(B2C) RT(ms): 1.0")
    assert consumer("Current Time: x TPS: 0 FAIL: 0 AVG(B2C) RT(ms): 1.0") is True


def test_our_marks_become_window_events():
    seen = []
    events = bench_load.WindowEvents(seen.append, apache=False)
    assert events("BENCH_MARK warmup_done 1700000000000") is False
    assert events("Current Time: x Send TPS: 5") is False
    assert events("BENCH_MARK measure_end 1700000050000") is False
    assert seen == ["warmup_done", "measure_end"]


def _snapshot(time_s, processes, busy_s, total_s):
    return {"time": time_s, "processes": processes, "machine_busy_s": busy_s,
            "machine_total_s": total_s}


def test_window_figures_divide_cpu_and_context_switches_per_message_per_role():
    before = _snapshot(10.0, {1: {"role": "appender", "cpu_s": 1.0, "ctx": 100},
                              2: {"role": "gone", "cpu_s": 5.0, "ctx": 1}}, 30.0, 40.0)
    after = _snapshot(20.0, {1: {"role": "appender", "cpu_s": 3.0, "ctx": 300},
                             3: {"role": "late", "cpu_s": 0.5, "ctx": 50}}, 45.0, 60.0)
    figures = bench_sample.window_figures(before, after, 100_000)
    assert figures["processes"]["appender"] == {"cpu_us_per_msg": 20.0, "ctx_per_msg": 0.002,
                                                "cores": 0.2}
    assert figures["processes"]["late"]["cpu_us_per_msg"] == 5.0
    assert "gone" not in figures["processes"]
    assert figures["cpu_us_per_msg"] == 25.0 and figures["ctx_per_msg"] == 0.0025
    assert figures["machine_busy"] == 0.75


def _record(broker, run, tps, cpu_us, **extra):
    return {"scenario": "produce-128B-w64-async", "broker": broker, "run": run, "tps": tps,
            "p99_rt_ms": 10.0, "send_failed": 0, "response_failed": 1 if run == 2 else 0,
            "pss_peak_mib": 100.0 * (run + 1),
            "cpu": {"cpu_us_per_msg": cpu_us, "ctx_per_msg": 0.5, "machine_busy": 0.9,
                    "processes": {"appender": {"cpu_us_per_msg": cpu_us / 2}}}, **extra}


def test_aggregate_gives_median_spread_ratios_and_goals_per_java_version():
    records = [_record("pybroker", run, tps, cpu)
               for run, (tps, cpu) in enumerate([(100, 10.0), (300, 30.0), (200, 20.0)])]
    records += [_record("java-4.9.8", run, tps, 40.0) for run, tps in enumerate([100, 150, 50])]
    records += [_record("java-5.3.3", run, 400, 10.0) for run in range(3)]
    (row,) = bench_report.aggregate(records)
    mine = row["brokers"]["pybroker"]
    assert mine["tps"] == {"median": 200, "min": 100, "max": 300, "n": 3}
    assert mine["roles"]["appender"]["median"] == 10.0
    assert mine["failures"] == 1
    assert row["ratios"]["java-4.9.8"]["tps"] == {"ratio": 2.0, "goal_met": True}
    assert row["ratios"]["java-4.9.8"]["cpu_us_per_msg"] == {"ratio": 0.5, "goal_met": True}
    assert row["ratios"]["java-5.3.3"]["tps"] == {"ratio": 0.5, "goal_met": False}
    assert row["ratios"]["java-5.3.3"]["pss_peak_mib"]["goal_met"] is False
    table = bench_report.table({"summary": [row]})
    assert "200 (100–300)" in table and "2.00 ✓" in table and "0.50 ✗" in table


def test_a_failed_run_is_counted_as_an_error_not_as_a_figure():
    records = [_record("pybroker", 0, 100, 1.0), _record("pybroker", 1, 999, 1.0,
                                                         error="timed out")]
    (row,) = bench_report.aggregate(records)
    assert row["brokers"]["pybroker"]["errors"] == 1
    assert row["brokers"]["pybroker"]["tps"]["n"] == 1


def test_quick_comparison_prints_pybroker_figures_and_ratios_before_and_after():
    before = {"revision": "aaa", "started": "t0", "summary": bench_report.aggregate(
        [_record("pybroker", 0, 100, 20.0), _record("java-4.9.8", 0, 200, 10.0)])}
    after = {"revision": "bbb", "summary": bench_report.aggregate(
        [_record("pybroker", 0, 150, 10.0), _record("java-4.9.8", 0, 200, 10.0)])}
    text = bench_report.compare_text(before, after)
    assert "aaa" in text and "bbb" in text
    assert "| produce-128B-w64-async | pybroker TPS | 100.00 | 150.00 | +50 % |" in text
    assert "| produce-128B-w64-async | TPS ratio vs java-4.9.8 | 0.50 | 0.75 | +50 % |" in text
    assert "| produce-128B-w64-async | appender µs/msg | 10.00 | 5.00 | -50 % |" in text



def test_only_picks_whole_name_parts():
    assert driver.selected("produce-1KiB-w64-async-syncmaster", "syncmaster")
    assert not driver.selected("produce-1KiB-w64-async-asyncmaster", "syncmaster")
    assert driver.selected("produce-1KiB-w64-async-asyncmaster", "1KiB-w64")
    assert not driver.selected("produce-128B-w64-async", "w6")
    assert driver.selected("anything", None)


def _settled(command: str):
    args = driver._parser().parse_args(command.split())
    driver._settle_args(args)
    return args


def test_full_plans_loads_that_fit_its_budget_or_says_what_would(capsys):
    full = driver.matrix("full")
    three = ["pybroker", "java-4.9.8", "java-5.3.3"]
    # 72 loads: duration plus each broker's measured overhead, consume loads their backlog.
    per_run = sum(20 + driver.LOAD_OVERHEAD_S[name] for name in three) * len(full) \
        + 3 * driver.BACKLOG_EXTRA_S
    assert driver.estimate_s(full, three, 3, 20, apache=False) == 3 * per_run
    args = _settled("--full")
    assert driver.estimate_s(full, three, 3, args.duration, False) <= 40 * 60 \
        < driver.estimate_s(full, three, 3, args.duration + 5, False)
    assert (args.runs, args.brokers, 5 <= args.warmup < args.duration) == (3, three, True)
    assert "plan: " in capsys.readouterr().err
    assert _settled("--full --budget 120").duration == 60          # room: Apache's 60 s
    assert _settled("--full --only w8").duration == 60
    given = _settled("--full --duration 45 --warmup 7")             # given: kept, estimated
    assert (given.duration, given.warmup) == (45, 7) and given.planned_min > 40
    assert "over --budget 40" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="java-5.5.1 on its own"):
        _settled("--full --brokers pybroker,java-4.9.8,java-5.3.3,java-5.5.1")
    assert (_settled("--quick").duration, _settled("--quick").warmup) == (30, 10)


def _result(mode: str, brokers: list, started: str, revision: str) -> dict:
    records = [_record(broker, 0, 100, 10.0) for broker in brokers]
    machine = {"cpu_model": "cpu", "logical_cpus": 2, "memory_gib": 4.0, "kernel": "k",
               "python": "3.11", "java": "17", "load_average_at_end": [1.0]}
    return {"mode": mode, "started": started, "duration_s": 1.0, "runs": 1, "run_seconds": 30,
            "warmup_seconds": 10, "load_tool": "java_bench", "revision": revision,
            "brokers": brokers, "machine": machine, "summary": bench_report.aggregate(records)}


def test_docs_keep_a_section_per_mode_and_brokers_and_sections_they_cannot_regenerate(
        tmp_path):
    import json
    results = tmp_path / "results"
    results.mkdir()
    files = {"1-quick.json": _result("quick", ["pybroker", "java-4.9.8"], "t1", "side"),
             "2-quick.json": _result("quick", ["pybroker"], "t2", "ab"),
             "3-ha.json": _result("ha", ["pybroker", "java-4.9.8"], "t3", "ha1"),
             "4-old.json": {"mode": "full", "summary": [{"scenario": "x"}]}}
    for name, result in files.items():
        (results / name).write_text(json.dumps(result), encoding="utf-8")
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# old intro\n\n## full — t0 (older format)\n\n| old table |\n\n"
                   "## ha — t0 at gone\n\nold ha\n\n" + bench_report.NOTES_MARKER
                   + "\n## Hand-written\nkept\n", encoding="utf-8")
    bench_report.write_docs(results, doc)
    text = doc.read_text(encoding="utf-8")
    generated, _, notes = text.partition(bench_report.NOTES_MARKER)
    assert notes == "\n## Hand-written\nkept\n"
    assert "## full — t0 (older format)\n\n| old table |" in generated   # nothing replaces it
    assert "## quick — t1 at side" in generated                          # side by side
    assert "## quick (pybroker only) — t2 at ab" in generated             # the A/B run apart
    assert "## ha — t3 at ha1" in generated and "old ha" not in generated  # newer replaces
    assert generated.index("## full") < generated.index("## quick —") < generated.index("## ha")


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


def test_apache_lines_of_every_tool_give_messages_per_second_and_failures():
    seen = []
    batch = bench_load.WindowEvents(seen.append, apache=True, apache_lines_max=9)
    batch("Current Time: 1 Send TPS: 100 Send MPS: 1600 Max RT(ms): 9 Average RT(ms): 2.0 "
          "Average Message RT(ms): 0.1 Send Failed: 0 Send Message Failed: 0")
    assert batch.apache_tps == [1600]                 # messages, not requests
    transaction = bench_load.WindowEvents(seen.append, apache=True, apache_lines_max=9)
    transaction("Current Time: 1 Send TPS:  812 Max RT(ms):   40 AVG RT(ms):3.1 Send Failed: "
                "2 check: 0 unexpectedCheck: 0 duplicatedCheck: 0 ")
    assert transaction.apache_tps == [812] and transaction.apache_avg_rt_ms == [3.1]
    assert transaction.apache_failed == 2
    producer5 = bench_load.WindowEvents(seen.append, apache=True, apache_lines_max=9)
    producer5("Current Time: 2026-12-05 10:00:00,000 | Send TPS: 5000 | Max RT(ms): 9 | "
              "Average RT(ms):   1.500 | Send Failed: 0 | Response Failed: 3")
    assert producer5.apache_tps == [5000] and producer5.apache_failed == 3
    assert bench_load.apache_failures("Current Time: x | Consume TPS: 9 | Consume Fail: 4") == 4
    assert bench_load.apache_tps_lines("Current Time: 1 Send TPS: 7 Send MPS: 70\nnoise\n") == [70]


def test_a_failure_is_told_in_one_line_with_its_cause():
    text = ("did not start: pybroker exited (1):\npybroker standalone: invalid configuration in "
            "/w/broker.conf:\nflushDiskType=SOMETIMES: must be one of ASYNC_FLUSH, SYNC_FLUSH\n")
    assert bench_brokers.one_line(text) == ("did not start: pybroker exited (1): flushDiskType="
                                            "SOMETIMES: must be one of ASYNC_FLUSH, SYNC_FLUSH")
    trace = ("did not start: pybroker exited (1):\nTraceback (most recent call last):\n  File "
             "\"x\", line 1\nImportError: cannot import name 'record' from 'pybroker._fast'\n")
    assert bench_brokers.one_line(trace).endswith("ImportError: cannot import name 'record' "
                                                  "from 'pybroker._fast'")
    assert "\n" not in bench_brokers.one_line("a\n" * 500 + "error: " + "x" * 900)
    assert len(bench_brokers.one_line("error " * 500)) == 400
    record = {"broker": "pybroker", "scenario": "s", "run": 1, "tps": 5.0, "send_failed": 0,
              "response_failed": 7, "first_failure": "MQBrokerException: CODE: 13"}
    assert driver.failure(record) == ("pybroker s run 1: the load reported failures (response "
                                      "failed 7); the first: MQBrokerException: CODE: 13")
    assert driver.failure(dict(record, response_failed=0)) is None
    assert driver.failure(dict(record, error=text)).startswith("pybroker s run 1: did not start")


def test_a_partial_result_says_so_and_replaces_neither_docs_nor_the_comparison(tmp_path):
    import json
    args = types.SimpleNamespace(mode="quick", only=None, runs=1, tag="", duration=30,
                                 warmup=10, brokers=["pybroker", "java-4.9.8"], set=[])
    context = {"load": {"kind": "apache", "tag": "rocketmq-all-4.9.8", "text": "Apache's X"},
               "broker_versions": {"pybroker": {"version": "0.1.0", "package": "/p",
                                                "matches_checkout": False},
                                   "java-4.9.8": {"broker": "4.9.7", "client": "4.9.8"}}}
    records = [dict(_record("pybroker", 0, 100, 10.0), load_before=[3.5, 2.0, 1.0]),
               dict(_record("java-4.9.8", 0, 50, 20.0), load_before=[1.25, 1.0, 1.0])]
    partial = bench_report.build_result(args, records, [], 0.0, "abc", context, "it broke")
    text = bench_report.summary_text(partial)
    assert text.splitlines()[1] == "PARTIAL: stopped early: it broke"
    assert "load: Apache's X" in text and "NOT this checkout's sources" in text
    assert "java-4.9.8 (broker 4.9.7, client 4.9.8)" in text
    assert "before each run 1.2–3.5" in text and "| 3.5 |" in text
    complete = bench_report.build_result(args, records, [], 0.0, "abd", context, None)
    project = dict(complete, load={"kind": "project", "text": "ours"}, load_tool="java_bench")
    for name, result in (("1.json", complete), ("2.json", project), ("3.json", partial)):
        (tmp_path / name).write_text(json.dumps(result), encoding="utf-8")
    found = bench_report.previous_result(tmp_path, "quick", tmp_path / "x.json", complete)
    assert found["revision"] == "abd"                 # not the partial one, not the project load
    assert bench_report.previous_result(tmp_path, "quick", tmp_path / "x.json", project)[
        "load"] == {"kind": "project", "text": "ours"}
    shorter = dict(project, run_seconds=8)
    assert bench_report.previous_result(tmp_path, "quick", tmp_path / "x.json", shorter) is None
    other_box = dict(project, machine=dict(project["machine"], cpu_model="another"))
    assert bench_report.previous_result(tmp_path, "quick", tmp_path / "x.json", other_box) is None
    doc = tmp_path / "benchmarks.md"
    bench_report.write_docs(tmp_path, doc)
    generated = doc.read_text(encoding="utf-8")
    assert "## quick (Apache's classes, rocketmq-all-4.9.8) — " in generated
    assert "## quick — " in generated and "it broke" not in generated


@pytest.mark.dataplane
def test_the_installed_pybroker_is_found_or_named_in_one_line(tmp_path):
    import pytest
    found = bench_brokers.find_pybroker()
    assert found.argv[:2] == (sys.executable, "-m") or found.argv[0].endswith("pybroker")
    assert (pathlib.Path(found.package) / "_fast").is_dir()
    with pytest.raises(bench_brokers.jr.HarnessError) as refused:
        bench_brokers.find_pybroker(f"{sys.executable} -m no_such_module_here")
    assert "\n" not in str(refused.value) and "does not run pybroker" in str(refused.value)
    copy = tmp_path / "pybroker"
    (copy / "_fast").mkdir(parents=True)
    (copy / "__init__.py").write_text("changed\n")
    differing = bench_brokers.differing_sources(copy)
    assert "__init__.py" in differing and "cli.py" in differing
    assert bench_brokers.differing_sources(bench_brokers.ROOT / "pybroker") == []


def test_apache_sources_are_checked_against_the_tag(tmp_path):
    import pytest
    source = tmp_path / "rocketmq"
    (source / apache_bench.BENCHMARK_DIR).mkdir(parents=True)
    (source / "pom.xml").write_text("<project><artifactId>rocketmq-all</artifactId>\n  "
                                    "<version>5.3.3</version></project>")
    (source / apache_bench.BENCHMARK_DIR / "Producer.java").write_text("class Producer {}")
    tag, files, provenance = apache_bench.sources_from_dir(source, None)
    assert tag == "rocketmq-all-5.3.3" and list(files) == ["Producer.java"]
    assert provenance == {"kind": "source", "source": str(source), "commit": None}
    with pytest.raises(apache_bench.BuildError, match="holds RocketMQ 5.3.3, not rocketmq-all-4"):
        apache_bench.sources_from_dir(source, "rocketmq-all-4.9.8")
    with pytest.raises(apache_bench.BuildError, match="lacks Consumer, BatchProducer"):
        apache_bench.compile_sources(tag, files, provenance, tmp_path / "out")
    (source / "pom.xml").write_text("<artifactId>rocketmq-all</artifactId><version>5.1.0"
                                    "</version>")
    with pytest.raises(apache_bench.BuildError, match="the tool builds rocketmq-all-4.9.8"):
        apache_bench.sources_from_dir(source, None)
    assert apache_bench.load_build(tmp_path / "nothing") is None


def test_apache_consumer_window_opens_at_its_start_and_drops_the_drained_period():
    sampler = driver._Sampler(broker=None)
    times = iter(range(100, 200, 10))
    sampler.on_event = lambda name: (sampler.snapshots.__setitem__(name, {"time": next(times)}),
                                     sampler.history.setdefault(name, []).append(
                                         sampler.snapshots[name]))
    events = bench_load.WindowEvents(sampler.on_event, apache=True, apache_lines_max=9,
                                     apache_opens_at="Consumer Started.")
    line = "Current Time: 1 TPS: {} FAIL: 0 AVG(B2C) RT(ms): 1.0 AVG(S2C) RT(ms): 2.0"
    for text, stops in (("Consumer Started.", False), (line.format(300), False),
                        (line.format(500), False), (line.format(120), False),
                        (line.format(0), True)):
        assert events(text) is stops
    assert events.drained and events.events[0] == "warmup_done"
    consume = driver.Scenario("consume", 128, 20, "ASYNC_FLUSH")
    run = bench_load.StreamedRun()
    figures = driver._apache_window(events, run, consume, sampler)
    assert figures["tps_per_10s"] == [300, 500]          # 120 was the period it drained in
    assert figures["tps"] == 400 and figures["window_s"] == 20
    assert sampler.snapshots["measure_end"]["time"] == 120
    short = bench_load.WindowEvents(lambda name: None, apache=True, apache_lines_max=9,
                                    apache_opens_at="Consumer Started.")
    for text in ("Consumer Started.", line.format(900), line.format(0)):
        short(text)
    empty = driver._Sampler(broker=None)
    empty.snapshots["warmup_done"] = {"time": 0}
    error = driver._apache_window(short, run, consume, empty)["error"]
    assert "none of them a full measured period (the backlog drained within it: raise " \
        "--backlog)" in error


def test_timer_reports_give_put_and_delivery_rates_lateness_and_early_delivery():
    import bench_timer
    marks = []
    consumed = bench_timer._Consumed(lambda: marks.append("first"), lambda: marks.append("end"))
    idle = "Consume TPS: 0, Avg delayedDuration:     NaN, Max delayedDuration: 0, "
    busy = ("Consume TPS: {}, Avg delayedDuration: {:7.3f}, Max delayedDuration: 2817, "
            "delayDuration %25: 900, %50: 1300; %80: 2000; %90: 2400; %99: 2787; %99.9: 2810")
    assert consumed(idle) is False and consumed("Start receiving messages") is False
    for tps, late in ((8919, 2065.576), (15582, 1315.095), (15966, 1213.443), (6997, 1261.0)):
        assert consumed(busy.format(tps, late)) is False
    assert consumed(idle) is True and marks == ["first", "end"]
    sent = [tuple(int(v) for v in bench_timer._SEND.search(
        f"Send TPS: {tps}, Max RT: 40, Average RT:   1.000, Send Failed: 0, Response Failed: 0"
    ).groups()) for tps in (5181, 18104, 21723, 1342, 0)]
    figures = bench_timer._figures(sent, consumed, 480_000)
    assert figures["put_tps"] == statistics.fmean([5181, 18104, 21723])   # 1342: the tail
    assert figures["tps"] == statistics.fmean([15582, 15966])    # 8919 began, 6997 ended inside
    weighted = (8919 * 2065.576 + 15582 * 1315.095 + 15966 * 1213.443 + 6997 * 1261.0) / \
        (8919 + 15582 + 15966 + 6997)
    assert abs(figures["lateness_avg_ms"] - weighted) < 1e-6
    assert figures["lateness_p99_distinct_ms"] == 2787 and figures["lateness_max_ms"] == 2817
    early = dict(figures, lateness_avg_ms=-108859.0, broker="pybroker")

    class Running:
        def exited(self):
            return None
    bench_timer._judge(early, bench_load.StreamedRun(), [], Running())
    assert early["error"] == ("pybroker delivered timer messages before they were due (mean "
                              "lateness -108859 ms)")
    assert bench_timer._busy([0, 0, 5, 0], began_inside=True) == []
    assert [s.name for s in driver.matrix("timer")] == ["timer-1KiB-w16-async"]
    assert [s.name for s in driver.matrix("transaction")] == ["transaction-2KiB-w32-async"]


def test_proxy_bench_reads_a_load_line_and_reports_a_failed_run(monkeypatch):
    """tools/bench_proxy.py: the SDK program's bench RESULT line becomes figures, a failed run
    becomes its last error line (listed in the table, not measured)."""
    import bench_proxy
    import java_rocketmq as jr
    runs = iter([jr.JavaRun(0, "RESULT op=bench-send seconds=2.0 sent=500 errors=1\n", "", 2.0,
                            False),
                 jr.JavaRun(1, "", "Traceback\nUnsupportedException: 50100, request type "
                                   "200050 not supported\n", 1.0, False)])
    monkeypatch.setattr(jr, "run_java", lambda argv, timeout_s: next(runs))
    sent = bench_proxy.run_load(["python3"], 30)
    assert sent == {"op": "bench-send", "seconds": 2.0, "sent": 500.0, "errors": 1.0}
    failed = bench_proxy.run_load(["python3"], 30)
    assert failed["failed"].startswith("UnsupportedException: 50100")
    row = {"broker": "pybroker", "sdk": "python",
           "bench-send": {"tps": 250.0, "errors": 1, "pss_peak_mib": 300.0},
           "bench-receive": {"failed": failed["failed"], "pss_peak_mib": 310.0}}
    (line,) = bench_proxy.table([row]).splitlines()[2:]
    assert line.startswith("| pybroker | python | 250.0 | failed: UnsupportedException")
    assert line.endswith("| 300.0 | 310.0 | 1 |")


def test_pop_mode_runs_the_push_consumer_in_pop_mode_and_the_pop_ack_round_trip():
    assert [s.name for s in driver.matrix("pop")] == ["popconsume-128B-w20-async",
                                                      "popack-128B-w1-async"]
    tools = types.SimpleNamespace(apache_classes=None,
                                  java_argv=lambda main, args, heap_mb=256: [main, *args])
    timing = driver.Timing(30, 10)
    consume, pop_ack = (driver._load_argv(tools, scenario, timing, "ns:9876", "T")
                        for scenario in driver.matrix("pop"))
    assert consume[0] == "BenchConsumer" and consume[consume.index("-P") + 1] == "true"
    assert consume[consume.index("-M") + 1] == driver.POP_CONSUME_WARMUP_MESSAGES
    assert pop_ack[0] == "BenchPopAck" and pop_ack[pop_ack.index("-w") + 1] == 1
    assert timing.backlog_for(False, "popack") == driver.POP_ACK_BACKLOG_MESSAGES
    plain = driver._load_argv(tools, driver.matrix("full")[-1], timing, "ns:9876", "T")
    assert plain[plain.index("-P") + 1] == "false"


def test_timer_burst_scenarios_results_and_parking(monkeypatch):
    """tools/bench_timer_burst.py: the burst is 500,000 messages due in one second, the Java
    launcher's result line is read back, and the runtime-info poll says when every message was
    parked (timerCongestNum) and the timer's highest TPS."""
    import bench_timer_burst as burst
    threads, slots, per_slot, _ = burst.SCENARIOS["burst"]
    assert (threads * slots * per_slot, slots) == (500_000, 1)
    assert burst._result('x\nBENCH_RESULT {"count": 3}\n') == {"count": 3}
    with pytest.raises(burst.jr.HarnessError, match="no BENCH_RESULT"):
        burst._result("the launcher died\n")
    tables = iter([{"timerCongestNum": "10", "timerEnqueueTps": "5.0", "timerDequeueTps": ""},
                   {"timerCongestNum": "20", "timerEnqueueTps": "12.5",
                    "timerDequeueTps": "0.0"}])
    monkeypatch.setattr(burst, "runtime_info", lambda broker: next(tables))
    parking = burst._Parking(broker=None, total=20)
    parking.poll()
    assert parking.all_parked_s is None
    parking.poll()
    summary = parking.summary()
    assert summary["all_parked_s"] is not None and summary["timer_enqueue_tps_max"] == 12.5
    assert len(summary["samples"]) == 2


def test_goals_are_issue_28s_sync_flush_like_async_and_batch_twice():
    def tps_goal(scenario, ratio):
        records = [dict(_record("pybroker", 0, 100 * ratio, 10.0), scenario=scenario),
                   dict(_record("java-4.9.8", 0, 100, 40.0), scenario=scenario)]
        (row,) = bench_report.aggregate(records)
        return row["ratios"]["java-4.9.8"]["tps"]["goal_met"]

    assert tps_goal("produce-128B-w64-async", 1.5) and not tps_goal("produce-128B-w64-async", 1.45)
    assert tps_goal("produce-128B-w64-sync", 1.5) and not tps_goal("produce-128B-w64-sync", 1.45)
    assert tps_goal("batch-128B-w64x16-async", 2.0)
    assert not tps_goal("batch-128B-w64x16-async", 1.9)
