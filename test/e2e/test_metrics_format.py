"""/metrics text as a real Prometheus parser reads it: the exposition test_metrics writes (see
test/unit/test_metrics.c, write_sample) goes through prometheus_client's text parser, which must
accept it whole and read back the families, types, escaped label values, histogram buckets and
live process figures. Needs no cluster."""

import math
import os
import subprocess
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TEST_DIR = os.environ.get("TELO_TEST_BIN_DIR") or os.path.join(ROOT, "build", "test")


@pytest.fixture(scope="module")
def families(tmp_path_factory):
    binary = os.path.join(TEST_DIR, "test_metrics")
    if not os.access(binary, os.X_OK):
        pytest.fail("%s is missing: build first (make build)" % binary)
    out = tmp_path_factory.mktemp("metrics") / "sample.txt"
    env = dict(os.environ, TELO_METRICS_SAMPLE=str(out))
    proc = subprocess.run([binary], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = out.read_text()
    # The parser is lazy: list() makes it read (and reject) the whole text now.
    return {f.name: f for f in text_string_to_metric_families(text)}, text


def samples(family):
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples}


def test_counter_with_labels(families):
    fams, _ = families
    f = fams["controller_runtime_reconcile"]  # the parser drops a counter's _total suffix
    assert f.type == "counter"
    assert f.documentation == "Total number of reconciliations per controller"
    got = samples(f)
    for i, result in enumerate(["success", "requeue_after", "error", "terminal_error"]):
        key = ("controller_runtime_reconcile_total",
               (("controller", "telosession"), ("result", result)))
        assert got[key] == i * 3


def test_escaping_round_trips(families):
    fams, _ = families
    f = fams["telo_sample_escaping"]
    assert f.type == "gauge"
    assert f.documentation == "Help with a back\\slash and a\nnewline"
    (sample,) = f.samples
    assert sample.labels == {"value": 'q"uote \\ back\nline'}
    assert sample.value == -1.5


def test_histogram_buckets_sum_and_count(families):
    fams, _ = families
    f = fams["controller_runtime_reconcile_time_seconds"]
    assert f.type == "histogram"
    buckets = [(s.labels["le"], s.value) for s in f.samples if s.name.endswith("_bucket")]
    assert buckets == [("0.005", 1), ("0.01", 1), ("0.025", 3), ("0.05", 3), ("0.1", 3),
                       ("0.25", 3), ("0.5", 4), ("1", 4), ("2.5", 4), ("5", 4), ("10", 5),
                       ("+Inf", 6)]
    by_name = {s.name: s.value for s in f.samples if not s.name.endswith("_bucket")}
    assert by_name["controller_runtime_reconcile_time_seconds_count"] == 6
    assert math.isclose(by_name["controller_runtime_reconcile_time_seconds_sum"],
                        0.003 + 0.02 + 0.02 + 0.3 + 7 + 30)


def test_process_figures_are_live(families):
    fams, _ = families
    value = {name: fams[name].samples[0].value for name in (
        "process_resident_memory_bytes", "process_virtual_memory_bytes", "process_open_fds",
        "process_max_fds", "process_start_time_seconds")}
    assert value["process_resident_memory_bytes"] > 100_000
    assert value["process_virtual_memory_bytes"] >= value["process_resident_memory_bytes"]
    assert value["process_open_fds"] >= 3
    assert value["process_max_fds"] >= value["process_open_fds"]
    # Started within the last hour (the test binary just ran).
    assert time.time() - 3600 < value["process_start_time_seconds"] <= time.time() + 1
    assert fams["process_cpu_seconds"].type == "counter"


def test_every_line_is_help_type_or_sample(families):
    _, text = families
    assert text.endswith("\n")
    for line in text.splitlines():
        assert line and (line.startswith("# HELP ") or line.startswith("# TYPE ")
                         or not line.startswith("#")), line
