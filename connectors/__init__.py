"""Debezium's outbox connector: the outbox table streamed into Kafka topics keyed by user.

  config/             the connector's JSON configuration and the worker's properties
  pom.xml             the Maven Central jars the Connect worker runs
  registration.py     registering the connector (its configuration, validated)
  endpoint.py         where Kafka Connect answers and how to authenticate to it
  status.py           the connector's status as Connect reports it
  task_restarter.py   restarting failed tasks, so CDC heals itself (`stack watchdog`)
"""
