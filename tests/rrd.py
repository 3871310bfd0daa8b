"""An .rrd read back with rerun-sdk's own reader (rerun.chunk.RrdReader): per entity path, its rows as dicts
{column: value} (time columns as plain numbers: seconds for "time", the index for "frame"), static rows too."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path


def read_rrd(path: Path) -> dict[str, list[dict]]:
    from rerun.chunk import RrdReader

    rows = defaultdict(list)
    for chunk in RrdReader(path).stream():
        table = chunk.to_record_batch().to_pylist()
        for row in table:
            if row.get("time") is not None:
                row["time"] = row["time"].total_seconds() if hasattr(row["time"], "total_seconds") else row["time"]
            rows[chunk.entity_path.lstrip("/")].append(row)
    for entity in rows:
        rows[entity].sort(key=lambda row: (row.get("time") is not None, row.get("time") or 0))
    return dict(rows)


def column(rows: list[dict], name: str) -> list:
    """The values of a column (e.g. "Points2D:positions") on the rows that have one."""
    return [row[name] for row in rows if row.get(name) is not None]
