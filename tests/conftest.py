"""Plugins shared by every test package."""

pytest_plugins = ["tests.support.services", "tests.support.ci_policy",
                  "tests.support.rocketmq_lab", "tests.support.threads", "tests.support.spark",
                  "tests.support.spark_cluster",
                  "tests.support.transports", "tests.support.brokers",
                  "tests.support.filesystems",
                  "pytester"]
