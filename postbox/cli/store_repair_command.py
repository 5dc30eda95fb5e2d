"""``postbox store repair``: set damaged commit-log spans aside so a refused store opens again.

``MessageStore.open`` refuses a commit log with a damaged record that valid records follow
(``MidLogCorruptionError``) and deletes nothing. This command runs ``storage_engine.repair_store``:
each damaged span's bytes go to ``DIR/damaged/`` (a ``.bin`` copy and a ``.json`` description)
and the span is overwritten in place by filler of the same length, so every valid record keeps
its position. It takes the store lock: it fails fast while a process has the store open. Exit 0
when the log is readable afterwards (with or without spans set aside).
"""

from __future__ import annotations

from rich.table import Table

from postbox.storage_engine import repair_store

from .common import (
    BrokerConfOption,
    CliError,
    JsonOption,
    SegmentSizeOption,
    StoreDirOption,
    StoreOptions,
    build_config,
    out_console,
    print_json,
    reports_errors,
)


@reports_errors
def repair_command(store: StoreDirOption = None, broker_conf: BrokerConfOption = None,
                   segment_size: SegmentSizeOption = None,
                   json_output: JsonOption = False) -> None:
    """Set damaged commit-log records aside (kept in DIR/damaged/); valid records stay put."""
    config = build_config(StoreOptions(store, broker_conf, segment_size, json_output))
    if not (config.root_dir / "commitlog").is_dir():
        raise CliError(f"{config.root_dir} is not a store (no commitlog directory)")
    report = repair_store(config.root_dir, config)
    if json_output:
        print_json(report.as_dict())
        return
    console = out_console()
    if not report.set_aside:
        console.print(f"no damage in the middle of the commit log of {report.store}; "
                      f"{report.valid_records} valid records, nothing changed", highlight=False)
        return
    table = Table(title=f"Set aside in {report.store}/damaged")
    for column in ("segment", "position", "bytes", "reason", "file", "replaced by"):
        table.add_column(column)
    for item in report.set_aside:
        table.add_row(item["segment"], str(item["position"]), str(item["size_bytes"]),
                      item["reason"], item["bytes_file"], item["replaced_by"])
    console.print(table)
    console.print(f"{len(report.set_aside)} damaged span(s) set aside; {report.valid_records} "
                  "valid records kept at their positions. Consumers skip the damaged offsets "
                  "with a warning; the store opens again.", highlight=False)
