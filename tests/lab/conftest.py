"""Fixtures of the remoting peer tests: the two targets every peer runs against.

``remoting_target`` (module scope, parametrized ``apache`` / ``postbox``): the lab's live
Apache RocketMQ (its name server and broker ``lab-a``), or a ``postbox broker start`` process
serving remoting on a fresh store (``tests/support/remoting_targets.py``), stopped at the end of
the module. ``go_client``: the Go client v2 program, built once per session into the lab cache.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.go_client import GoClient
from tests.support.remoting_targets import PostboxRemotingServer, RemotingTarget
from tests.support.rocketmq_install import LabInstall, LabSetupError, LabUnavailableError
from tests.support.rocketmq_lab import LabDriver


@pytest.fixture(scope="session")
def go_client(rocketmq_install: LabInstall) -> GoClient:
    try:
        return GoClient.prepare(rocketmq_install.cache_dir)
    except LabUnavailableError as missing:
        pytest.skip(str(missing))
    except LabSetupError as failure:
        pytest.fail(f"the Go client could not be built: {failure}", pytrace=False)


@pytest.fixture(scope="module", params=["apache", "postbox"])
def remoting_target(request: pytest.FixtureRequest, rocketmq_install: LabInstall,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[RemotingTarget]:
    if request.param == "apache":
        lab = request.getfixturevalue("live_rocketmq")
        yield RemotingTarget(name="apache", namesrv=lab.namesrv, broker_name=lab.broker.name,
                             broker_addr=lab.broker.address, driver=lab.driver)
        return
    directory = tmp_path_factory.mktemp("postbox-remoting")
    server = PostboxRemotingServer(directory).start()
    try:
        driver = LabDriver(rocketmq_install, directory / "driver", server.namesrv)
        yield RemotingTarget.discover("postbox", driver)
    finally:
        server.stop()
