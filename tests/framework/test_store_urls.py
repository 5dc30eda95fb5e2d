"""Store URLs and the options that go with them are checked when the ``App`` is built, before
anything opens or connects: ``grpc://`` (Postbox's former private gRPC service) fails with an
error that names ``rocketmq://``; credentials come in pairs and only with a remote broker; a bad
URL creates nothing on disk."""

from __future__ import annotations

import pytest

from postbox.framework import App, ConfigurationError


@pytest.mark.parametrize("url", ["grpc://127.0.0.1:8081", "grpc://broker.internal:8081",
                                 "grpc://127.0.0.1"])
def test_grpc_urls_fail_and_name_the_rocketmq_transport(url: str) -> None:
    with pytest.raises(ConfigurationError, match="rocketmq://") as error:
        App(store_url=url)
    assert url in str(error.value)


def test_unknown_schemes_name_the_supported_ones() -> None:
    with pytest.raises(ConfigurationError, match=r"file://.*rocketmq://"):
        App(store_url="http://127.0.0.1:9876")


@pytest.mark.parametrize(("access_key", "secret_key"), [("orders-app", None), (None, "s3cret")])
def test_half_a_credential_pair_is_refused(tmp_path, access_key, secret_key) -> None:
    with pytest.raises(ConfigurationError, match="go together"):
        App(store_url=tmp_path.as_uri(), access_key=access_key, secret_key=secret_key)
    with pytest.raises(ConfigurationError, match="go together"):
        App(store_url="grpc://127.0.0.1:8081", access_key=access_key, secret_key=secret_key)
    assert not list(tmp_path.iterdir())


def test_credentials_need_a_remote_broker(tmp_path) -> None:
    with pytest.raises(ConfigurationError, match="embedded store has no access control"):
        App(store_url=tmp_path.as_uri(), access_key="ak", secret_key="sk")
    assert not list(tmp_path.iterdir())
