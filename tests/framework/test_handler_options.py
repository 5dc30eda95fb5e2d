"""Handler options that middleware declare: accepted only when a middleware declares them,
stored on the spec, checked by their middleware at registration, read by it at consume time;
a middleware registered in an entry-point group (a real ``*.dist-info`` on ``sys.path``) is
built by ``App.start()`` when a handler sets its option — the framework names none of them."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import pytest

from postbox.framework import App, ConfigurationError, Middleware
from postbox.framework.plugins import MIDDLEWARE_ENTRY_POINTS
from postbox.framework.testing import InlineRunner


class Traced(Middleware):
    """Declares ``traced`` (default False) and records the traced handlers' messages."""

    handler_options: ClassVar[Mapping[str, Any]] = MappingProxyType({"traced": False})

    def __init__(self) -> None:
        self.seen: list[str] = []

    @classmethod
    def check_handler(cls, spec) -> None:
        if not isinstance(spec.options.get("traced", False), bool):
            raise ConfigurationError("traced= must be a bool")

    def around_consume(self, context, call_next):
        if context.handler.options.get("traced", False):
            self.seen.append(context.message.text)
        return call_next()


def test_an_unknown_option_is_refused_naming_the_known_ones(open_broker):
    app = App(broker=open_broker())
    app.add_middleware(Traced())
    with pytest.raises(ConfigurationError) as refused:
        app.handler(topic="t", consumer_group="g", tracd=True)(lambda message: None)
    assert "tracd" in str(refused.value)
    assert "traced (tests.framework.test_handler_options.Traced)" in str(refused.value)
    assert app.handlers == []


def test_an_option_without_any_middleware_is_refused(open_broker):
    app = App(broker=open_broker())
    with pytest.raises(ConfigurationError, match=r"unknown option.*traced"):
        app.handler(topic="t", consumer_group="g", traced=True)(lambda message: None)


def test_the_declaring_middleware_checks_the_handler_at_registration(open_broker):
    app = App(broker=open_broker())
    app.add_middleware(Traced())
    with pytest.raises(ConfigurationError, match="traced= must be a bool"):
        app.handler(topic="t", consumer_group="g", traced="yes")(lambda message: None)


def test_the_middleware_reads_its_option_from_the_spec(open_broker, fake_clock):
    broker = open_broker(clock=fake_clock)
    app = App(broker=broker, clock=fake_clock)
    tracer = Traced()
    app.add_middleware(tracer)
    handled: list[str] = []

    @app.handler(topic="a", consumer_group="g", consume_from="first", traced=True)
    def traced(message) -> None:
        handled.append(message.text)

    @app.handler(topic="b", consumer_group="g", consume_from="first")
    def plain(message) -> None:
        handled.append(message.text)

    assert dict(app.handlers[0].options) == {"traced": True}
    assert dict(app.handlers[1].options) == {}
    app.producer.send("a", "one")
    app.producer.send("b", "two")
    InlineRunner(app, broker=broker).run_until_idle()
    app.stop()
    assert sorted(handled) == ["one", "two"]
    assert tracer.seen == ["one"]


@pytest.fixture
def registered_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A distribution that registers ``plugin_mw:Counting`` in the middleware entry-point
    group, installed for real: a ``*.dist-info`` and its module on ``sys.path``."""
    (tmp_path / "plugin_mw.py").write_text(textwrap.dedent("""
        from postbox.framework import Middleware

        built = []

        class Counting(Middleware):
            handler_options = {"counted": False}

            @classmethod
            def from_app(cls, app):
                layer = cls()
                built.append((app, layer))
                return layer
    """))
    info = tmp_path / "plugin_mw-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plugin-mw\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{MIDDLEWARE_ENTRY_POINTS}]\ncounting = plugin_mw:Counting\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, "plugin_mw", raising=False)
    return "plugin_mw"


def test_a_registered_middleware_is_built_when_a_handler_sets_its_option(
        open_broker, registered_plugin):
    app = App(broker=open_broker(), tracing=False)  # only plugins
    app.handler(topic="t", consumer_group="g", counted=True)(lambda message: None)
    app.start(threads=False)
    app.stop()
    import plugin_mw

    [(built_for, layer)] = plugin_mw.built
    assert built_for is app
    assert app.middleware == [layer]


def test_a_registered_middleware_is_not_built_when_no_handler_needs_it(
        open_broker, registered_plugin):
    app = App(broker=open_broker(), tracing=False)  # only plugins
    app.handler(topic="t", consumer_group="g", counted=False)(lambda message: None)
    app.handler(topic="u", consumer_group="g")(lambda message: None)
    app.start(threads=False)
    app.stop()
    import plugin_mw

    assert plugin_mw.built == []
    assert app.middleware == []


def test_an_added_middleware_declaring_the_option_serves_it(open_broker, registered_plugin):
    import plugin_mw

    app = App(broker=open_broker(), tracing=False)  # only plugins
    own = plugin_mw.Counting()
    app.add_middleware(own)
    app.handler(topic="t", consumer_group="g", counted=True)(lambda message: None)
    app.start(threads=False)
    app.stop()
    assert plugin_mw.built == []
    assert app.middleware == [own]


class Sessions(Middleware):
    """Passes every handler a ``session`` after the message (and declares it)."""

    @classmethod
    def handler_arguments(cls, spec) -> tuple[str, ...]:
        return ("session",)

    def around_consume(self, context, call_next):
        context.handler_args.append("session-object")
        return call_next()


def test_a_handler_that_cannot_take_its_arguments_is_refused(open_broker):
    app = App(broker=open_broker())
    with pytest.raises(ConfigurationError, match=r"takes_two\(message, session\).*called as "
                       r"takes_two\(message\)"):
        app.handler(topic="t", consumer_group="g")(takes_two)
    with pytest.raises(ConfigurationError, match=r"called as <lambda>\(messages\)"):
        app.handler(topic="t", consumer_group="g", batch_size=4)(lambda: None)
    app.add_middleware(Sessions())
    with pytest.raises(ConfigurationError, match=r"session from Sessions"):
        app.handler(topic="t", consumer_group="g")(lambda message: None)
    app.handler(topic="t", consumer_group="g")(takes_two)
    assert [spec.function for spec in app.handlers] == [takes_two]


def test_a_middleware_added_after_registration_is_checked_at_start(open_broker):
    app = App(broker=open_broker())
    app.handler(topic="t", consumer_group="g")(lambda message: None)
    app.add_middleware(Sessions())
    with pytest.raises(ConfigurationError, match=r"session from Sessions"):
        app.start(threads=False)
    assert not app.consumers
    app.stop()


def takes_two(message, session) -> None:
    """A handler that needs a session."""
