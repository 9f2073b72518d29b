"""The operator's /metrics, read with the real Prometheus text parser (prometheus_client) while
it works: the families dashboards expect exist, and the counters move as a session starts."""

import os

from prometheus_client.parser import text_string_to_metric_families

from conftest import ROOT, wait_until

SAMPLE = os.path.join(ROOT, "crds", "samples", "hello.yaml")


def scrape(op):
    status, body = op.get("/metrics")
    assert status == 200, body
    samples = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples, name, **labels):
    return sum(v for (n, ls), v in samples.items()
               if n == name and all(dict(ls).get(k) == w for k, w in labels.items()))


def test_metrics_parse_and_move_as_a_session_starts(cluster, operator, pod_namespace):
    # A generous deadline: this test is about metrics, not a busy kwok's start latency.
    op = operator("startDeadlineSeconds=180",
                  args=("--leader-elect", "--leader-election-namespace", pod_namespace))
    cluster.kubectl("wait", "--for=jsonpath={.spec.holderIdentity}", "lease/telo-operator.telo.run",
                    "-n", pod_namespace, "--timeout=30s")
    before = scrape(op)
    names = {n for n, _ in before}
    for family in ("controller_runtime_reconcile_total", "controller_runtime_reconcile_time_seconds_bucket",
                   "controller_runtime_active_workers", "workqueue_depth", "workqueue_adds_total",
                   "workqueue_queue_duration_seconds_bucket", "workqueue_work_duration_seconds_count",
                   "workqueue_retries_total", "rest_client_requests_total",
                   "rest_client_request_duration_seconds_count", "leader_election_master_status",
                   "telo_sessions", "telo_session_starts_total", "telo_cache_objects",
                   "telo_events_total", "telo_events_queued",
                   "process_resident_memory_bytes", "process_open_fds"):
        assert family in names, family
    assert value(before, "leader_election_master_status") == 1

    cluster.kubectl("apply", "-n", pod_namespace, "-f", SAMPLE)
    cluster.kubectl("wait", "-n", pod_namespace, "--for=condition=Ready", "telosession/hello",
                    "--timeout=60s")
    after = scrape(op)
    assert (value(after, "controller_runtime_reconcile_total", result="success")
            > value(before, "controller_runtime_reconcile_total", result="success"))
    assert value(after, "workqueue_adds_total") > value(before, "workqueue_adds_total")
    assert value(after, "telo_session_starts_total") == value(before, "telo_session_starts_total") + 1
    assert value(after, "telo_sessions", phase="Running") == 1
    assert value(after, "telo_session_startup_seconds_count") == 1
    assert (value(after, "rest_client_requests_total", method="PATCH")
            > value(before, "rest_client_requests_total", method="PATCH"))
    assert value(after, "telo_cache_objects", informer="pods") == 1
    # The session's Running Event is written (from the recorder's queue, so it may follow the
    # status by a moment); none is lost.
    wait_until(lambda: value(scrape(op), "telo_events_total", outcome="created")
               > value(before, "telo_events_total", outcome="created"),
               timeout=30, what="the Running Event counted in telo_events_total")
    assert value(scrape(op), "telo_events_total", outcome="dropped") == 0
