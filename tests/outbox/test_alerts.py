"""Alerts about void stubs, delivered to a real HTTP endpoint and a real SMTP server."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

import pytest

from postbox.outbox.alerts import (
    Alert,
    AlertDeliveryError,
    Alerter,
    AlertKind,
    AlertSettings,
    EmailSink,
    LogSink,
    WebhookSink,
)
from tests.support.alert_servers import (
    SmtpServer,
    WebhookServer,
    smtp_server_fixture,  # noqa: F401  (the smtp_server fixture)
    webhook_server_fixture,  # noqa: F401  (the webhook_server fixture)
)
from tests.support.services import free_port

WHEN = datetime(2026, 5, 9, 7, 35, 25, 123456)
FAST = {"timeout_s": 2.0, "retry_delay_s": 0.01}


def exhausted(number: int = 1) -> Alert:
    return Alert(AlertKind.EXHAUSTED, f"msg-{number}", "orders", 5,
                 "broker unreachable:\nconnection refused", WHEN)


def dead_lettered(number: int = 2) -> Alert:
    return Alert(AlertKind.DEAD_LETTERED, f"msg-{number}", "payments", 1, "handler raised KeyError",
                 WHEN, consumer_group="billing")


def email_sink(server: SmtpServer, **options: object) -> EmailSink:
    return EmailSink(server.host, server.port, sender="postbox@example.org",
                     recipients=["ops@example.org", "Oncall <oncall@example.org>"], timeout_s=5.0,
                     **options)  # type: ignore[arg-type]


def closed_url(path: str = "/hook", userinfo: str = "") -> str:
    return f"http://{userinfo}127.0.0.1:{free_port()}{path}"


def alert_log_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "postbox.alerts"]


# ---- the alert -----------------------------------------------------------------------------


def test_alert_to_dict_has_exactly_the_documented_fields() -> None:
    assert dead_lettered().to_dict() == {
        "event": "postbox.stub.void", "kind": "dead_lettered", "message_id": "msg-2",
        "topic": "payments", "send_count": 1, "reason": "handler raised KeyError",
        "consumer_group": "billing", "occurred_at": "2026-05-09T07:35:25.123Z"}
    assert exhausted().to_dict()["consumer_group"] is None
    assert json.loads(json.dumps(exhausted().to_dict()))["reason"] == exhausted().reason


def test_alert_summary_is_one_line_and_an_aware_time_becomes_naive_utc() -> None:
    summary = exhausted().summary()
    assert "\n" not in summary
    assert summary == ("stub msg-1 on topic orders is void (exhausted, 5 sends): "
                       "broker unreachable: connection refused")
    assert "(dead_lettered by group billing, 1 sends)" in dead_lettered().summary()
    overtaken = Alert(AlertKind.EXHAUSTED, "m", "t", 5, "moved past", WHEN, "billing")
    assert "(exhausted, group billing, 5 sends)" in overtaken.summary()
    long_reason = Alert(AlertKind.EXHAUSTED, "m", "t", 5, "x" * 5_000, WHEN).summary()
    assert len(long_reason) < 400 and long_reason.endswith("…")

    plus_two = datetime(2026, 5, 9, 9, 35, 25, tzinfo=timezone(timedelta(hours=2)))
    alert = Alert("exhausted", "m", "t", 5, "r", plus_two)  # type: ignore[arg-type]
    assert alert.kind is AlertKind.EXHAUSTED
    assert alert.occurred_at == datetime(2026, 5, 9, 7, 35, 25)
    assert alert.to_dict()["occurred_at"] == "2026-05-09T07:35:25.000Z"


# ---- webhook -------------------------------------------------------------------------------


def test_webhook_receives_one_json_post_per_alert(webhook_server: WebhookServer) -> None:
    alerts = [exhausted(1), dead_lettered(2)]
    sink = WebhookSink(webhook_server.url, headers={"X-Team": "ops"}, **FAST)

    report = Alerter([sink]).fire(alerts)

    assert report.delivered == {"log": 2, "webhook": 2} and report.failed == {}
    requests = webhook_server.wait_for(2)
    assert [request.body for request in requests] == [alert.to_dict() for alert in alerts]
    for request in requests:
        assert request.path == "/hook"
        assert request.headers["content-type"] == "application/json"
        assert request.headers["x-team"] == "ops"
        assert "authorization" not in request.headers
    assert len(webhook_server.requests) == 2


def test_webhook_retries_after_500s_and_then_succeeds(webhook_server: WebhookServer,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    webhook_server.fail_first = 2
    caplog.set_level(logging.WARNING, logger="postbox.alerts")

    report = Alerter([WebhookSink(webhook_server.url, attempts=3, **FAST)]).fire([exhausted()])

    assert report.delivered["webhook"] == 1 and not report.failed
    assert [request.status for request in webhook_server.requests] == [500, 500, 200]
    assert all(request.body == exhausted().to_dict() for request in webhook_server.requests)
    retries = [line for line in alert_log_lines(caplog) if "attempt" in line]
    assert len(retries) == 2 and "HTTP 500" in retries[0]


def test_webhook_failing_every_attempt_is_reported_and_email_still_goes_out(
        webhook_server: WebhookServer, smtp_server: SmtpServer,
        caplog: pytest.LogCaptureFixture) -> None:
    webhook_server.fail_first = 1_000
    alerts = [exhausted(1), exhausted(2), dead_lettered(3)]
    alerter = Alerter([WebhookSink(webhook_server.url, attempts=3, **FAST),
                       email_sink(smtp_server)])

    report = alerter.fire(alerts)

    assert report.delivered == {"log": 3, "email": 3}
    error = report.failed["webhook"]
    assert webhook_server.url in error and "after 3 attempts" in error and "HTTP 500" in error
    assert "0 of 3 alerts delivered" in error
    # the sink stops at the first alert it cannot deliver: a down endpoint is not hit 3 × 3 times
    assert len(webhook_server.requests) == 3
    assert len(smtp_server.wait_for(1)) == 1
    assert any("sink webhook failed" in line for line in alert_log_lines(caplog))


def test_webhook_connection_refused_is_reported_not_raised(
        caplog: pytest.LogCaptureFixture) -> None:
    url = closed_url()
    report = Alerter([WebhookSink(url, attempts=2, **FAST)]).fire([exhausted()])

    assert report.delivered == {"log": 1}
    assert url in report.failed["webhook"] and "refused" in report.failed["webhook"].lower()
    assert any("sink webhook failed" in line for line in alert_log_lines(caplog))


def test_webhook_timeout_is_a_failure(webhook_server: WebhookServer) -> None:
    webhook_server.delay_s = 2.0
    sink = WebhookSink(webhook_server.url, timeout_s=0.2, attempts=1, retry_delay_s=0.01)

    with pytest.raises(AlertDeliveryError, match="timed out"):
        sink.send([exhausted()])


def test_webhook_userinfo_becomes_basic_auth_and_never_shows_the_password(
        webhook_server: WebhookServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="postbox.alerts")
    secret_url = webhook_server.url.replace("http://", "http://hook-user:s%40cret@")
    sink = WebhookSink(secret_url, **FAST)
    assert "cret" not in sink.url and "hook-user:***@" in sink.url

    sink.send([exhausted()])
    (request,) = webhook_server.wait_for(1)
    token = request.headers["authorization"].removeprefix("Basic ")
    assert base64.b64decode(token) == b"hook-user:s@cret"

    unreachable = closed_url(userinfo="hook-user:s%40cret@")
    report = Alerter([WebhookSink(unreachable, attempts=2, **FAST)]).fire([exhausted()])
    error = report.failed["webhook"]
    assert "hook-user:***@127.0.0.1" in error
    assert "cret" not in error
    assert not any("cret" in line for line in alert_log_lines(caplog))
    assert "cret" not in repr(AlertSettings(webhook_url=unreachable))


@pytest.mark.parametrize("url", [
    "ftp://example.org/hook", "file:///etc/passwd", "example.org/hook", "http://", "",
    "http://127.0.0.1:99999/hook", "http://127.0.0.1:port/hook",
])
def test_webhook_accepts_only_http_urls(url: str) -> None:
    with pytest.raises(ValueError, match="URL"):
        WebhookSink(url)


def test_webhook_redirect_is_not_followed() -> None:
    # a 3xx answer would turn the POST into a bodiless GET: it is a failure, not a delivery
    with WebhookServer() as target, WebhookServer(redirect_to=target.url) as redirector:
        report = Alerter([WebhookSink(redirector.url, attempts=1)]).fire([exhausted()])
        assert "HTTP 307" in report.failed["webhook"]
        assert target.requests == [] and [r.status for r in redirector.requests] == [307]


# ---- log sink and the alerter --------------------------------------------------------------


def test_log_sink_is_always_there_and_logs_each_alert_on_one_line(
        caplog: pytest.LogCaptureFixture) -> None:
    report = Alerter().fire([exhausted(1), dead_lettered(2)])

    assert report.delivered == {"log": 2} and report.failed == {}
    records = [record for record in caplog.records if record.name == "postbox.alerts"]
    assert [record.levelno for record in records] == [logging.ERROR, logging.ERROR]
    assert "msg-1" in records[0].getMessage() and "msg-2" in records[1].getMessage()
    assert all("\n" not in record.getMessage() for record in records)


def test_alerter_puts_one_log_sink_first() -> None:
    webhook = WebhookSink(closed_url())
    given = LogSink()
    assert [type(sink) for sink in Alerter([webhook]).sinks] == [LogSink, WebhookSink]
    assert Alerter([webhook, given]).sinks == [given, webhook]
    with pytest.raises(ValueError, match="distinct names"):
        Alerter([webhook, WebhookSink(closed_url())])
    second = WebhookSink(closed_url(), name="webhook-ops")
    assert [sink.name for sink in Alerter([webhook, second]).sinks] == [
        "log", "webhook", "webhook-ops"]


class _BrokenSink:
    name = "broken"

    def send(self, alerts: Sequence[Alert]) -> None:
        raise RuntimeError("disk on fire")


def test_a_sink_raising_anything_is_reported_and_the_next_sink_still_runs(
        webhook_server: WebhookServer, caplog: pytest.LogCaptureFixture) -> None:
    report = Alerter([_BrokenSink(), WebhookSink(webhook_server.url, **FAST)]).fire([exhausted()])

    assert report.failed == {"broken": "RuntimeError: disk on fire"}
    assert report.delivered == {"log": 1, "webhook": 1}
    assert not report.ok
    failure = next(record for record in caplog.records if "sink broken" in record.getMessage())
    assert failure.exc_info is not None


def test_fire_with_no_alerts_does_nothing(webhook_server: WebhookServer,
                                          caplog: pytest.LogCaptureFixture) -> None:
    report = Alerter([WebhookSink(webhook_server.url, **FAST)]).fire([])
    assert report.delivered == {} and report.failed == {} and report.ok
    assert webhook_server.requests == [] and alert_log_lines(caplog) == []


# ---- email ---------------------------------------------------------------------------------


def test_email_lists_every_alert_and_attaches_them_as_json(smtp_server: SmtpServer) -> None:
    alerts = [exhausted(1), exhausted(2), dead_lettered(3)]

    report = Alerter([email_sink(smtp_server)]).fire(alerts)

    assert report.delivered == {"log": 3, "email": 3}
    (mail,) = smtp_server.wait_for(1)
    assert mail.mail_from == "postbox@example.org"
    assert mail.rcpt_tos == ["ops@example.org", "oncall@example.org"]
    message = mail.message
    assert message["Subject"] == "[postbox] 3 stubs need manual handling"
    assert message["From"] == "postbox@example.org"
    assert message["To"] == "ops@example.org, Oncall <oncall@example.org>"
    assert message["Message-ID"] and message["Date"]
    body = message.get_body(preferencelist=("plain",))
    assert body is not None
    text = body.get_content()
    for alert in alerts:
        assert f"message id:     {alert.message_id}" in text
    assert "billing" in text and "broker unreachable" in text
    (attachment,) = list(message.iter_attachments())
    assert attachment.get_content_type() == "application/json"
    assert attachment.get_filename() == "postbox-void-stubs.json"
    assert json.loads(attachment.get_content()) == [alert.to_dict() for alert in alerts]


def test_email_about_one_alert_names_it_in_the_subject(smtp_server: SmtpServer) -> None:
    email_sink(smtp_server).send([dead_lettered(7)])
    (mail,) = smtp_server.wait_for(1)
    assert mail.message["Subject"] == "[postbox] stub msg-7 is void (dead_lettered)"


def test_email_logs_in_with_the_credentials_of_the_smtp_url() -> None:
    with SmtpServer(credentials={"alerts": "p@ss:w/rd"}) as server:
        url = f"smtp://alerts:p%40ss%3Aw%2Frd@127.0.0.1:{server.port}"
        settings = AlertSettings(smtp_url=url, email_to=("ops@example.org",))
        report = settings.build().fire([exhausted()])
        assert report.delivered == {"log": 1, "email": 1}, report.failed
        (mail,) = server.wait_for(1)
        assert mail.login == "alerts"

        wrong = AlertSettings(smtp_url=url.replace("w%2Frd", "nope"), email_to=("ops@x.org",))
        error = wrong.build().fire([exhausted()]).failed["email"]
        assert "535" in error and "nope" not in error and "p@ss" not in error


def test_email_the_server_refuses_is_reported() -> None:
    with SmtpServer(reject_first=1) as server:
        report = Alerter([email_sink(server)]).fire([exhausted()])
        assert "451" in report.failed["email"] and f"127.0.0.1:{server.port}" in report.failed[
            "email"]
        assert server.rejected == 1 and server.messages == []


def test_email_to_an_unreachable_server_is_reported() -> None:
    sink = EmailSink("127.0.0.1", free_port(), sender="p@x.org", recipients=["o@x.org"],
                     timeout_s=2.0)
    report = Alerter([sink]).fire([exhausted()])
    assert report.delivered == {"log": 1} and "refused" in report.failed["email"].lower()


@pytest.mark.parametrize("options", [
    {"recipients": []}, {"recipients": ["a@x.org, b@x.org"]}, {"sender": ""},
    {"starttls": True, "ssl": True}, {"username": "u"}, {"port": 0},
])
def test_email_sink_checks_its_settings(options: dict[str, object]) -> None:
    arguments: dict[str, object] = {"sender": "p@x.org", "recipients": ["o@x.org"], **options}
    with pytest.raises(ValueError, match=r"EmailSink|email address"):
        EmailSink("127.0.0.1", **arguments)  # type: ignore[arg-type]


# ---- settings ------------------------------------------------------------------------------


def test_settings_from_env_builds_the_configured_sinks() -> None:
    env = {"POSTBOX_ALERT_WEBHOOK_URL": "https://hooks.example.org/postbox",
           "POSTBOX_ALERT_SMTP_URL": "smtp://mailer:s%40cret@mail.example.org:587?starttls=1",
           "POSTBOX_ALERT_EMAIL_FROM": "Postbox <postbox@example.org>",
           "POSTBOX_ALERT_EMAIL_TO": " ops@example.org, ,oncall@example.org "}

    settings = AlertSettings.from_env(env)

    assert settings.email_to == ("ops@example.org", "oncall@example.org")
    assert settings.email_from == "Postbox <postbox@example.org>"
    log, webhook, email = settings.build().sinks
    assert isinstance(log, LogSink) and isinstance(webhook, WebhookSink)
    assert webhook.url == "https://hooks.example.org/postbox"
    assert isinstance(email, EmailSink)
    assert (email.host, email.port, email.username) == ("mail.example.org", 587, "mailer")
    assert (email.starttls, email.ssl) == (True, False)
    assert email.recipients == ("ops@example.org", "oncall@example.org")
    assert "cret" not in repr(settings)


@pytest.mark.parametrize(("url", "port", "starttls", "ssl"), [
    ("smtp://mail.example.org", 25, False, False),
    ("smtp://mail.example.org?starttls=0", 25, False, False),
    ("smtp://mail.example.org:2525/?starttls=true", 2525, True, False),
    ("smtps://mail.example.org", 465, False, True),
    ("SMTPS://mail.example.org:4650", 4650, False, True),
])
def test_settings_smtp_url_forms(url: str, port: int, starttls: bool, ssl: bool) -> None:
    email = AlertSettings(smtp_url=url, email_to=("o@x.org",)).build().sinks[-1]
    assert isinstance(email, EmailSink)
    assert (email.host, email.port, email.starttls, email.ssl) == (
        "mail.example.org", port, starttls, ssl)
    assert email.username is None and email.sender == "postbox@localhost"


def test_settings_from_an_empty_env_give_only_the_log() -> None:
    settings = AlertSettings.from_env({"POSTBOX_ALERT_WEBHOOK_URL": " ",
                                       "POSTBOX_ALERT_EMAIL_FROM": ""})
    assert settings == AlertSettings()
    assert [type(sink) for sink in settings.build().sinks] == [LogSink]


@pytest.mark.parametrize(("settings", "message"), [
    (AlertSettings(smtp_url="smtp://mail.example.org"), "no recipient"),
    (AlertSettings(email_to=("o@x.org",)), "no SMTP server"),
    (AlertSettings(webhook_url="ftp://example.org/hook"), "http"),
    (AlertSettings(smtp_url="http://mail.example.org", email_to=("o@x.org",)), "smtp://"),
    (AlertSettings(smtp_url="smtp://", email_to=("o@x.org",)), "no host"),
    (AlertSettings(smtp_url="smtp://u:s3cret@mail:port", email_to=("o@x.org",)), "bad port"),
    (AlertSettings(smtp_url="smtp://mail?starttls=maybe", email_to=("o@x.org",)), "starttls"),
    (AlertSettings(smtp_url="smtp://mail?tls=1", email_to=("o@x.org",)), "unknown option"),
    (AlertSettings(smtp_url="smtps://mail?starttls=1", email_to=("o@x.org",)), "already TLS"),
    (AlertSettings(smtp_url="smtp://user@mail", email_to=("o@x.org",)), "no password"),
    (AlertSettings(smtp_url="smtp://u:s3cret@mail/inbox", email_to=("o@x.org",)), "path"),
    (AlertSettings(smtp_url="smtp://mail", email_to=("not an address",)), "email address"),
])
def test_settings_errors_are_clear(settings: AlertSettings, message: str) -> None:
    with pytest.raises(ValueError, match=message) as raised:
        settings.build()
    assert "s3cret" not in str(raised.value)


def test_settings_from_env_deliver_end_to_end(webhook_server: WebhookServer,
                                              smtp_server: SmtpServer) -> None:
    settings = AlertSettings.from_env({"POSTBOX_ALERT_WEBHOOK_URL": webhook_server.url,
                                       "POSTBOX_ALERT_SMTP_URL": smtp_server.url,
                                       "POSTBOX_ALERT_EMAIL_TO": "ops@example.org"})

    report = settings.build().fire([exhausted(1), dead_lettered(2)])

    assert report.delivered == {"log": 2, "webhook": 2, "email": 2} and report.ok
    assert [request.body["message_id"] for request in webhook_server.wait_for(2)] == [
        "msg-1", "msg-2"]
    (mail,) = smtp_server.wait_for(1)
    assert mail.rcpt_tos == ["ops@example.org"] and mail.mail_from == "postbox@localhost"
