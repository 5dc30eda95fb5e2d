"""Engine benchmark: the store's put and pull figures with the native engine and with pure
Python, in one run, with the native/python ratio of each.

Run ``python -m bench.engine_bench`` (or ``postbox bench engines``); ``--help`` lists the
options. The engine is a property of the process (``POSTBOX_NATIVE`` is read once, at import),
so each engine runs ``bench.store_bench --only postbox --json`` in a child interpreter of its
own, with ``POSTBOX_NATIVE=0`` and ``POSTBOX_NATIVE=1``, alternating repetition by
repetition on the same settings; the figures are store_bench's (a fresh store per repetition,
dispatch included in put), medians over ``--reps``. Rows: ``put_single`` (``put_message``,
ASYNC, until readable), ``put_batch`` (``put_messages``), the two "calls only" timings,
``get`` (``get_message``, batch 32, every body touched) and ``lookup`` (``query_by_key``).
SYNC puts are left out: they wait on the disk, not on record coding. Then ``codec_figures``
times each codec of ``formats.engine`` with both engines in this process, and the remoting
frame codec (``frame_codecs``: a send's JSON header decoded, an answer encoded). A missing native
engine fails the run (exit 2).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.peers import BenchError, run_and_print

ENGINES = (("python", "0"), ("native", "1"))
ROWS = ("put_single", "put_single_calls", "put_batch", "put_batch_calls", "get", "lookup")
CODEC_CALLS = 20_000
CODEC_ROUNDS = 5


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options (passed on to each ``bench.store_bench`` child)."""
    p = argparse.ArgumentParser(prog="python -m bench.engine_bench", description=__doc__.split(
        "\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--count", type=int, default=100_000, help="messages per body size")
    p.add_argument("--sizes", default="100,1024", help="body sizes in bytes, comma-separated")
    p.add_argument("--reps", type=int, default=3, help="repetitions; the median is reported")
    p.add_argument("--batch", type=int, default=256, help="messages per put_messages call")
    p.add_argument("--lookups", type=int, default=20_000, help="query_by_key calls per rep")
    p.add_argument("--dir", default=None, help="parent of the temp dirs (None: system temp)")
    p.add_argument("--json", action="store_true", help="print one JSON document, no table")
    return p.parse_args(argv)


def engine_figures(args: argparse.Namespace, setting: str) -> dict:
    """One repetition of store_bench's Postbox figures in a child with
    ``POSTBOX_NATIVE=setting``: ``{size: {row: messages per second}}``."""
    repo_root = str(Path(__file__).resolve().parents[1])
    cmd = [sys.executable, "-m", "bench.store_bench", "--only", "postbox", "--json",
           "--fsync-peer-count", "0", "--count", str(args.count), "--sizes", args.sizes,
           "--reps", "1", "--batch", str(args.batch),
           "--lookups", str(args.lookups)] + (["--dir", args.dir] if args.dir else [])
    env = dict(os.environ, POSTBOX_NATIVE=setting, PYTHONPATH=os.pathsep.join(
        filter(None, [repo_root, os.environ.get("PYTHONPATH")])))
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=repo_root, env=env,
                          check=False)
    if done.returncode != 0:
        raise BenchError(f"store_bench with POSTBOX_NATIVE={setting} exited "
                         f"{done.returncode}:\n{done.stderr[-4000:]}")
    report = json.loads(done.stdout)
    return {size: {row: figures["postbox"][row]["per_s"] for row in ROWS}
            for size, figures in report["sizes"].items()}


def codec_figures(size: int) -> dict[str, dict[str, float]]:
    """Nanoseconds per call of each codec, reference and native, in this process: the best of
    ``CODEC_ROUNDS`` interleaved rounds of ``CODEC_CALLS`` calls (the least disturbed by other
    load). A pull body is 32 records; the segment walk (the reconciliation's store scan) walks
    the same 32 records, checking their CRCs, and collects none; recovery's scan checks them
    too, and dispatch's decoding makes their 32 ``DispatchRecord``s."""
    import timeit

    import postbox_native as native

    from postbox.storage_engine.formats import (
        hashing,
        properties,
        received_record,
        record,
        record_walk,
    )

    body = bytes(range(256)) * (size // 256) + bytes(size % 256)
    props = properties.encode_properties({"KEYS": "k1", "TAGS": "t", "UNIQ_KEY": "A" * 32})
    props += record.PROPERTY_CRC_PLACEHOLDER
    arguments = (b"bench", False, body, props, 1, 0, 7, 4096, 0, 1, bytes(8), 2, bytes(8), 0, 0,
                 hashing.masked_crc32(body))
    one = record.seal_property_crc(record.encode_record_parts(*arguments))
    pull_body = one * 32
    cases = {
        "encode_record_parts + seal": lambda m: m.seal_property_crc(m.encode_record_parts(
            *arguments)),
        "unpack_record": lambda m: m.unpack_record(one, 0),
        "decode_properties": lambda m: m.decode_properties(props),
        "masked_crc32": lambda m: m.masked_crc32(body),
        "unpack_received_records (32)": lambda m: m.unpack_received_records(
            pull_body, 0, len(pull_body)),
        "walk_records (32)": lambda m: m.walk_records(
            pull_body, 0, len(pull_body), True, (b"%DLQ%", b"%RETRY%"), b"REAL_TOPIC\x01",
            b"SCHEDULE_TOPIC_XXXX"),
        "scan_records (32)": lambda m: m.scan_records(pull_body, 0, len(pull_body)),
        "decode_run (32)": lambda m: m.decode_run(pull_body, 0, len(pull_body), 32),
        "index_key_hash": lambda m: m.index_key_hash("bench#order-000042"),
    }
    reference: dict[str, Any] = {
        "encode_record_parts + seal": record, "unpack_record": record,
        "decode_properties": properties, "masked_crc32": hashing,
        "unpack_received_records (32)": received_record, "walk_records (32)": record_walk,
        "scan_records (32)": record, "decode_run (32)": record, "index_key_hash": hashing}
    frames = frame_codecs(native, body)
    natives: dict[str, Any] = {}
    for name, (python_call, native_call) in frames.items():
        cases[name] = lambda m: m()
        reference[name], natives[name] = python_call, native_call
    figures = {}
    for name, call in cases.items():
        best = {"python": float("inf"), "native": float("inf")}
        for _round in range(CODEC_ROUNDS):
            for engine, module in (("python", reference[name]),
                                   ("native", natives.get(name, native))):
                seconds = timeit.timeit(lambda: call(module), number=CODEC_CALLS)  # noqa: B023
                best[engine] = min(best[engine], seconds / CODEC_CALLS * 1e9)
        figures[name] = {"python_ns": best["python"], "native_ns": best["native"],
                         "python_over_native": best["python"] / best["native"]}
    return figures


def frame_codecs(native: Any, body: bytes) -> dict[str, tuple[Callable[[], Any],
                                                              Callable[[], Any]]]:
    """The remoting frame codec's rows, ``(reference call, native call)``: a Java client's
    SEND_MESSAGE header decoded (13 fields), and the send's answer encoded as a whole frame
    with ``body`` (``wire.py``'s reference against ``frame.rs``)."""
    from bench.remoting_raw import send_fields
    from postbox.network.protocol import wire

    fields = wire.wire_fields(send_fields(
        "order-events", 3, properties={"UNIQ_KEY": "7F0000011A2B18B4AAC2123456780000",
                                       "WAIT": "true"},
        group="orders", v2=False, batch=False, maxReconsumeTimes=16))
    send = wire.RemotingCommand(10, 7, 0, fields, body, None, "JAVA", 475)
    frame = wire.encode(send)
    header = memoryview(frame)[8:len(frame) - len(body)]
    answer = send.response(0, {"msgId": "7F00000100002A9F0000000000012345", "queueId": "3",
                               "queueOffset": "1234", "MSG_REGION": "DefaultRegion",
                               "transactionId": "7F0000011A2B18B4AAC2123456780000",
                               "TRACE_ON": "true"}, body=body)
    limits = wire.FrameLimits()
    json_form = wire.SerializeType.JSON
    return {
        "frame: decode a send's JSON header": (
            lambda: wire._decode_json_header(header, limits),
            lambda: native.decode_json_header(header, limits.max_ext_fields)),
        "frame: encode an answer": (
            lambda: wire._encode_reference(answer, json_form),
            lambda: native.encode_json_frame(answer.code, answer.flag, answer.language,
                                             answer.opaque, answer.version, answer.ext_fields,
                                             answer.remark, answer.body)),
    }


def run(args: argparse.Namespace) -> dict:
    """Both engines' median rates and the native/python ratio of every row.

    The engines alternate repetition by repetition, so a change in the machine's load while
    the benchmark runs falls on both.
    """
    samples: dict[str, list[dict]] = {name: [] for name, _setting in ENGINES}
    for rep in range(args.reps):
        for name, setting in ENGINES:
            if not args.json:
                print(f"[bench] rep {rep + 1}/{args.reps}: engine {name} "
                      f"(POSTBOX_NATIVE={setting})", file=sys.stderr, flush=True)
            samples[name].append(engine_figures(args, setting))
    sizes: dict[str, dict] = {}
    for size in samples["python"][0]:
        rows = {}
        for row in ROWS:
            python = statistics.median(rep[size][row] for rep in samples["python"])
            native = statistics.median(rep[size][row] for rep in samples["native"])
            rows[row] = {"python_per_s": python, "native_per_s": native,
                         "native_over_python": native / python}
        sizes[size] = rows
    codecs = {size: codec_figures(int(size)) for size in sizes}
    return {"settings": vars(args), "sizes": sizes, "codecs": codecs}


def render(report: dict) -> None:
    """One table per body size: rate per engine and the ratio."""
    settings = report["settings"]
    print(f"engine benchmark: {settings['count']} messages, median of {settings['reps']} reps, "
          f"batch {settings['batch']}")
    for size, rows in report["sizes"].items():
        print(f"\nbody {size} B            python msg/s   native msg/s   native/python")
        for row, figures in rows.items():
            print(f"  {row:<20} {figures['python_per_s']:>12,.0f}   "
                  f"{figures['native_per_s']:>12,.0f}   {figures['native_over_python']:>10.2f}x")
    for size, rows in report["codecs"].items():
        print(f"\ncodecs, body {size} B             python ns   native ns   python/native")
        for row, figures in rows.items():
            print(f"  {row:<30} {figures['python_ns']:>10,.0f}   {figures['native_ns']:>9,.0f}"
                  f"   {figures['python_over_native']:>10.1f}x")


def main(argv: list[str] | None = None) -> int:
    """Entry point for ``python -m bench.engine_bench`` and ``postbox bench engines``."""
    return run_and_print(run, render, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
