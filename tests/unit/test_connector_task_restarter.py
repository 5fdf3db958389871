"""Which parts of a Kafka Connect status document the task restarter restarts."""

from paystream.connectors.status import failed_parts


def test_running_connector_and_tasks_need_nothing():
    assert failed_parts({"connector": {"state": "RUNNING"},
                         "tasks": [{"id": 0, "state": "RUNNING"}]}) == ()


def test_failed_tasks_and_connector_are_named():
    status = {"connector": {"state": "FAILED"},
              "tasks": [{"id": 0, "state": "FAILED", "trace": "x"},
                        {"id": 1, "state": "RUNNING"}, {"id": 2, "state": "FAILED"}]}
    assert failed_parts(status) == ("connector", "task 0", "task 2")


def test_paused_or_unassigned_is_not_failed():
    assert failed_parts({"connector": {"state": "PAUSED"},
                         "tasks": [{"id": 0, "state": "UNASSIGNED"}]}) == ()
