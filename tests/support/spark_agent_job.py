"""A Spark job for the agent recipe (docs/agent.md, "Spark"), run as the driver of a
standalone cluster: every round, each of its tasks reads the token agent's credentials
file on the executor's host, logs in with kafka-python and asks the cluster for its
brokers. Prints one JSON line per round: the (token id, ok, error) of every task.

``python spark_agent_job.py MASTER BOOTSTRAP CREDENTIALS_FILE ROUNDS INTERVAL_S``
"""

from __future__ import annotations

import json
import sys
import time

from pyspark.sql import SparkSession


def probe(path: str, bootstrap: str):
    def run(_partition):
        from kafka import KafkaAdminClient

        from tokensvc.agent.clients import kafka_python_config
        from tokensvc.agent.credentials import parse

        with open(path, "rb") as handle:
            creds = parse(handle.read())
        try:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","),
                                     client_id="spark-executor", **kafka_python_config(creds))
            try:
                admin.describe_cluster()
            finally:
                admin.close()
            yield creds.token_id, True, None
        except Exception as exc:  # noqa: BLE001 - reported to the test
            yield creds.token_id, False, repr(exc)

    return run


def main() -> None:
    master, bootstrap, path, rounds, interval = sys.argv[1:6]
    spark = (SparkSession.builder.master(master).appName("tokensvc-agent-recipe")
             .config("spark.driver.host", "127.0.0.1").config("spark.cores.max", "2")
             .config("spark.executor.memory", "512m").config("spark.ui.enabled", "false")
             .getOrCreate())
    try:
        for _ in range(int(rounds)):
            results = spark.sparkContext.parallelize(range(2), 2).mapPartitions(
                probe(path, bootstrap)).collect()
            print(json.dumps(results), flush=True)
            time.sleep(float(interval))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
