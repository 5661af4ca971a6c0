"""The diffusion data contract: media files with captions, from a folder with metadata.jsonl or from columns.

A folder holds `metadata.jsonl` rows of {"file_name": <path relative to the folder>, "text": <caption>} (the
Hugging Face imagefolder/videofolder layout); a table (parquet, save_to_disk, Hub) holds the same two columns,
or `image`/`video` in place of `file_name`. Rows are validated like chat rows: bad ones are reported with file
and row number, and the same --on-bad-rows policy applies.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from yeto.learners.data.jsonl import JsonlFile
from yeto.learners.data.sources import open_source

IMAGE = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif")
VIDEO = (".mp4", ".mov", ".webm", ".mkv", ".avi", ".gif")


@dataclass(frozen=True)
class MediaItem:
    path: str | None        # a file (folder layout), or None when `media` holds the bytes
    caption: str
    kind: str               # image | video
    media: object = None    # the column value of a table source (bytes or a {"bytes", "path"} struct)


@dataclass
class MediaReport:
    num_rows: int = 0
    items: list[MediaItem] = field(default_factory=list)
    bad_rows: list[str] = field(default_factory=list)   # "<where>: <reason>"

    @property
    def ok(self) -> bool:
        return bool(self.items) and not self.bad_rows


def read_media(source: str) -> MediaReport:
    root = Path(source)
    if root.is_dir() and (root / "metadata.jsonl").is_file():
        meta = root / "metadata.jsonl"
        rows = JsonlFile(str(meta), lambda: open(meta, "rb"))
    else:
        rows, root = open_source(source), None
    report = MediaReport()
    for row in rows:
        report.num_rows += 1
        try:
            report.items.append(_item(row, root))
        except ValueError as e:
            report.bad_rows.append(f"{row.where}: {e}")
    if report.num_rows == 0:
        report.bad_rows.append(f"{source}: no rows (expected metadata.jsonl with file_name and text)")
    return report


def _item(row, root: Path | None) -> MediaItem:
    if row.error:
        raise ValueError(row.error)
    value = row.value
    caption = value.get("text", value.get("caption"))
    if not isinstance(caption, str) or not caption.strip():
        raise ValueError("missing caption: needs a non-empty string 'text'")
    if root is not None:
        name = value.get("file_name")
        if not isinstance(name, str):
            raise ValueError("missing 'file_name'")
        kind = _kind(name)
        path = (root / name).resolve()
        if root.resolve() not in path.parents:
            raise ValueError(f"file_name {name!r} points outside the folder")
        if not path.is_file():
            raise ValueError(f"file_name {name!r}: no such file in {root}")
        return MediaItem(str(path), caption, kind)
    for column, kind in (("image", "image"), ("video", "video"), ("file_name", None)):
        if value.get(column) is not None:
            media = value[column]
            name = media if isinstance(media, str) else (media.get("path") or "" if isinstance(media, dict) else "")
            return MediaItem(media if isinstance(media, str) else None, caption, kind or _kind(name), media)
    raise ValueError("no media: needs an 'image', 'video' or 'file_name' column")


def _kind(name: str) -> str:
    suffix = Path(name).suffix.lower()
    if suffix in IMAGE:
        return "image"
    if suffix in VIDEO:
        return "video"
    raise ValueError(f"{name!r}: not an image or video file ({', '.join(IMAGE + VIDEO)})")
