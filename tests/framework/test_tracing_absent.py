"""Without OpenTelemetry nothing changes: a process where ``import opentelemetry`` fails imports
the framework, the outbox and idempotency, sends and handles, and adds no property."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO_ROOT

PROBE = """
import json, sys
sys.modules["opentelemetry"] = None  # what an environment without the package sees
from sqlalchemy import create_engine
from postbox import idempotency, outbox
from postbox.framework import App, ConfigurationError
from postbox.framework.testing import InlineRunner
from postbox.framework.tracing import Tracing, inject_current_context, opentelemetry_installed
from postbox.outbox.tables import metadata

root = sys.argv[1]
app = App(store_url=root + "/store")
seen = []
app.handler(topic="orders", consumer_group="g", consume_from="first")(
    lambda message: seen.append(dict(message.properties)))
sent = app.producer.send("orders", b"x", properties={"source": "shop"})
InlineRunner(app).run_until_idle()
app.stop()
engine = create_engine("sqlite:///" + root + "/outbox.db")
metadata.create_all(engine)
with engine.begin() as connection:
    stub_id = outbox.send(connection, "orders", b"y")
    stored = connection.execute(metadata.tables["message_stub"].select()).mappings().one()
try:
    Tracing()
    refused = None
except ConfigurationError as error:
    refused = str(error)
print(json.dumps({
    "installed": opentelemetry_installed(), "app_tracing": app.tracing is None,
    "middleware": [type(layer).__name__ for layer in app.middleware],
    "user_properties": [{k: v for k, v in p.items() if k.islower()} for p in seen],
    "stub_properties": stored["properties"], "refused": refused,
    "injected": inject_current_context(None),
    "loaded": sorted(name for name, module in sys.modules.items()
                     if module is not None and (name.startswith("opentelemetry")
                                                or name.startswith(
                                                    "postbox.framework.tracing_")))}))
"""


def test_without_opentelemetry_nothing_is_imported_and_nothing_added(tmp_path: Path):
    done = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path)], capture_output=True,
                          text=True, cwd=REPO_ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {
        "installed": False, "app_tracing": True, "middleware": [],
        "user_properties": [{"source": "shop"}], "stub_properties": None,
        "refused": "tracing needs OpenTelemetry: pip install 'postbox[otel]' (the otel extra: "
                   "opentelemetry-api)",
        "injected": None, "loaded": []}
