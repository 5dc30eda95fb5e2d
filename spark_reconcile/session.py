"""The Spark session a reconciliation runs in: ``local[*]`` by default, any cluster by master URL.

The Python workers must run an interpreter that has Postbox installed (they decode the store
files with ``spark_reconcile``). PySpark takes the workers' interpreter from ``PYSPARK_PYTHON``
(else ``python3`` on the PATH) when the context starts and, outside ``spark-submit``, ignores
``spark.pyspark.python``; a ``python3`` without Postbox fails every task with
``ModuleNotFoundError``. So the interpreter is set on the context itself: on a local master it
is this one (``sys.executable``), wherever the command runs from; on a cluster it is
``python=`` (the CLI's ``--executor-python``) or ``spark.pyspark.python`` in ``conf``, else
Spark's own choice, since the driver's path may not exist on the executors' machines.

On a cluster, the executors read the store files by path, so the store must be on a file system
they all see (or be a copy placed there), and they need Postbox installed (``pip install
postbox[spark]``) to decode the files.

Through Spark Connect (``remote="sc://host:port"``) this process is only a client: the server
owns the JVM, its master, its executors and their Python (the server's ``PYSPARK_PYTHON``), and
reads and writes every path itself. Only SQL settings can be set from here.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence

from .errors import SparkUnavailableError

DEFAULT_MASTER = "local[*]"


SQL_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
}
"""The settings a Spark Connect client can make (the rest belongs to the server)."""


def spark_session(master: str = DEFAULT_MASTER, *, app_name: str = "postbox-reconcile",
                  jars: Sequence[str] = (), conf: Mapping[str, str] | None = None,
                  python: str | None = None, remote: str | None = None):
    """Get or create the session (PySpark keeps one per process: a running session is
    returned as it is, so ``jars`` and ``conf`` only apply to a new one).

    Local masters bind the driver to loopback; the UI is off (a batch job has nobody to look
    at it). The Python workers run ``executor_python(master, python, conf)``.

    With ``remote`` (``sc://host:port``) it is a Spark Connect session instead (no local JVM;
    ``master``, ``jars`` and ``python`` are the server's business).

    Raises:
        SparkUnavailableError: PySpark is not installed, Java is missing, or Spark fails to start.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError as error:
        raise SparkUnavailableError("PySpark is not installed: pip install 'postbox[spark]'"
                                    ) from error
    if remote:
        return connect_session(remote, app_name, conf)
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        raise SparkUnavailableError("Spark needs Java 17 or newer: install a JDK (java on PATH "
                                    "or JAVA_HOME set)")
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               # JDBC reads zone-less database times in the JVM's zone: make that UTC too
               .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
               .config("spark.executor.extraJavaOptions", "-Duser.timezone=UTC"))
    for key, value in SQL_CONF.items():
        builder = builder.config(key, value)
    if master.startswith("local"):
        builder = (builder.config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.pyspark.driver.python", sys.executable))
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    worker_python = executor_python(master, python, conf)
    if worker_python:
        builder = builder.config("spark.pyspark.python", worker_python)
    try:
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
        if worker_python:  # what PySpark hands to every Python function it ships
            session.sparkContext.pythonExec = worker_python
        return session
    except Exception as error:  # py4j / JVM start-up failures have no common base class
        raise SparkUnavailableError(f"Spark did not start on master {master}: {error}"
                                    ) from error


def connect_session(remote: str, app_name: str = "postbox-reconcile",
                    conf: Mapping[str, str] | None = None):
    """A Spark Connect session to ``remote`` with ``SQL_CONF`` (and the SQL settings of
    ``conf``).

    Raises:
        SparkUnavailableError: the Connect client libraries are missing or the server does not
            answer.
    """
    from pyspark.sql import SparkSession

    settings = {**SQL_CONF, **{key: value for key, value in (conf or {}).items()
                               if key.startswith("spark.sql.")}}
    try:
        session = SparkSession.builder.remote(remote).appName(app_name).getOrCreate()
        for key, value in settings.items():
            session.conf.set(key, value)
        session.range(1).collect()  # the server answers (getOrCreate does not call it)
        return session
    except ImportError as error:
        raise SparkUnavailableError("the Spark Connect client is not installed: pip install "
                                    "'postbox[spark]'") from error
    except Exception as error:  # gRPC and Connect errors have no common base class
        raise SparkUnavailableError(f"Spark Connect server {remote} did not answer: {error}"
                                    ) from error


def executor_python(master: str, python: str | None = None,
                    conf: Mapping[str, str] | None = None) -> str | None:
    """The interpreter the Python workers run: ``python`` if given, else
    ``spark.pyspark.python`` from ``conf``, else this interpreter on a local master; ``None``
    (Spark's default) on a cluster."""
    if python:
        return python
    configured = (conf or {}).get("spark.pyspark.python")
    if configured:
        return configured
    return sys.executable if master.startswith("local") else None


__all__ = ["DEFAULT_MASTER", "SQL_CONF", "connect_session", "executor_python", "spark_session"]
