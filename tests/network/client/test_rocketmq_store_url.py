"""``rocketmq://`` store URLs: parsed and checked before anything connects; an unreachable cluster
is a prompt ``BrokerUnavailableError`` naming the name servers; mypy holds ``RemotingBroker`` to
the ``BrokerClient`` protocol."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from postbox.framework import App, ConfigurationError
from postbox.framework.transport import open_client, rocketmq_cluster
from postbox.network.client.remote_broker import RemotingBroker
from postbox.storage_engine.errors import BrokerUnavailableError
from tests.support.tiny_remoting_server import free_port_address

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("url", "addresses", "namespace"), [
    ("rocketmq://127.0.0.1:9876", ["127.0.0.1:9876"], ""),
    ("rocketmq://ns1:9876;ns2:9877/", ["ns1:9876", "ns2:9877"], ""),
    ("rocketmq://h:9876?namespace=team-a_1", ["h:9876"], "team-a_1"),
    ("ROCKETMQ://[::1]:9876", ["[::1]:9876"], ""),
])
def test_cluster_urls_name_servers_and_namespace(url: str, addresses: list[str],
                                                 namespace: str) -> None:
    assert rocketmq_cluster(url) == (addresses, namespace)
    assert rocketmq_cluster("file:///tmp/x") is None and rocketmq_cluster("/tmp/x") is None


@pytest.mark.parametrize(("url", "problem"), [
    ("rocketmq://", "no name server"),
    ("rocketmq://host", "'host' is not host:port"),
    ("rocketmq://host:99999", "is not host:port"),
    ("rocketmq://host:9876;:9876", "':9876' is not host:port"),
    ("rocketmq://host:9876/path", "rocketmq://host:port"),
    ("rocketmq://ak:sk@host:9876", "credentials"),
    ("rocketmq://host:9876?namespace=a&tls=1", "tls"),
    ("rocketmq://host:9876?namespace=a&namespace=b", "twice"),
    ("rocketmq://host:9876?namespace=a%25b", "letters, digits"),
    ("rocketmq://host:9876#frag", "rocketmq://host:port"),
])
def test_bad_cluster_urls_are_clear_configuration_errors(url: str, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        App(store_url=url)


def test_options_that_do_not_fit_a_cluster_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="broker_conf"):
        App(store_url="rocketmq://127.0.0.1:9876", broker_conf={"maxMessageSize": "1024"})
    with pytest.raises(ConfigurationError, match="broker_conf"):
        open_client("rocketmq://127.0.0.1:9876", {"maxMessageSize": "1024"})
    with pytest.raises(ConfigurationError, match="go together"):
        App(store_url="rocketmq://127.0.0.1:9876", access_key="ak")


def test_unreachable_cluster_is_a_prompt_clear_error() -> None:
    addresses = f"{free_port_address()};{free_port_address()}"
    app = App(store_url=f"rocketmq://{addresses}?namespace=t1")  # nothing connects yet
    try:
        started = time.monotonic()
        with pytest.raises(BrokerUnavailableError, match="no name server answered") as error:
            app.producer.send("events", b"x")
        assert time.monotonic() - started < 10
        assert error.value.address == addresses
    finally:
        app.stop()


def test_open_client_builds_a_remoting_broker_with_namespace_and_credentials() -> None:
    client = open_client("rocketmq://127.0.0.1:9876;127.0.0.1:9877?namespace=ns",
                         access_key="ak", secret_key="sk")
    try:
        assert isinstance(client, RemotingBroker)
        assert client.namesrv_addresses == ["127.0.0.1:9876", "127.0.0.1:9877"]
        assert client.context.namespace.name == "ns"
    finally:
        client.close()


def test_mypy_accepts_the_remoting_broker_as_a_broker_client(tmp_path: Path) -> None:
    tree = tmp_path / "namespace"  # postbox/… as installed (scripts/namespace_tree.py)
    subprocess.run([sys.executable, str(ROOT / "scripts" / "namespace_tree.py"), str(tree)],
                   check=True, capture_output=True, timeout=120)
    module = tree / "client_check.py"
    module.write_text(
        "from postbox.framework import BrokerClient\n"
        "from postbox.network.client.remote_broker import RemotingBroker\n\n"
        "def client(remote: RemotingBroker) -> BrokerClient:\n"
        "    return remote\n")
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(ROOT / ".mypy_cache"), "--no-error-summary",
         "--follow-imports=silent", module.name],
        cwd=tree, capture_output=True, text=True, timeout=300, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
