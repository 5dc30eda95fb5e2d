"""The consumer retry back-off in the Telemetry settings answer, against what Apache RocketMQ 5's
proxy sends (issue 18, side by side): a group's default ``CustomizedRetryPolicy`` is 1 s, 5 s,
10 s, 30 s, 1 m, 2 m, … 2 h, and the official clients wait the i-th entry before the i-th retry.
The live comparison is ``tests/lab/test_side_by_side.py``."""

from __future__ import annotations

from postbox.broker_node.grpc_v2.protocol import definition
from postbox.broker_node.grpc_v2.settings_answer import consumer_backoff_s, settings_answer
from postbox.storage_engine import StoreConfig

APACHE_DEFAULT_RETRY_S = [1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200,
                          1800, 3600, 7200]


def test_default_levels_give_the_apache_proxy_retry_ladder(tmp_path):
    levels_ms = StoreConfig(root_dir=tmp_path).delay.levels_ms
    assert consumer_backoff_s(levels_ms) == APACHE_DEFAULT_RETRY_S


def test_push_consumer_first_retry_waits_the_first_level(tmp_path):
    client = definition.Settings(client_type=definition.PUSH_CONSUMER)
    client.subscription.group.name = "g"
    answer = settings_answer(client, max_body_bytes=1024, max_attempts=3,
                             levels_ms=StoreConfig(root_dir=tmp_path).delay.levels_ms,
                             long_polling_ms=15_000)
    policy = answer.backoff_policy
    assert policy.max_attempts == 3
    assert [step.seconds for step in policy.customized_backoff.next][:3] == [1, 5, 10]


def test_sub_second_levels_round_up_to_whole_seconds():
    assert consumer_backoff_s([100, 200, 1500, 2000]) == [1, 1, 2, 2]
