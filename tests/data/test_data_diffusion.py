"""The diffusion data contract (metadata.jsonl folder or columns) and the deterministic demo data."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from yeto.learners.data.diffusion import read_media

ROOT = Path(__file__).resolve().parents[2]


def test_media_folder_reports_bad_rows_with_line_numbers(tmp_path):
    (tmp_path / "a.png").write_bytes(b"png")
    (tmp_path / "b.mp4").write_bytes(b"mp4")
    rows = [{"file_name": "a.png", "text": "a cat"}, {"file_name": "b.mp4", "text": "a wave"},
            {"file_name": "missing.png", "text": "x"}, {"file_name": "a.png", "text": ""},
            {"file_name": "../escape.png", "text": "x"}, {"file_name": "notes.txt", "text": "x"}]
    (tmp_path / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = read_media(str(tmp_path))
    assert [(i.kind, i.caption) for i in report.items] == [("image", "a cat"), ("video", "a wave")]
    meta = tmp_path / "metadata.jsonl"
    assert report.bad_rows == [
        f"{meta} line 3: file_name 'missing.png': no such file in {tmp_path}",
        f"{meta} line 4: missing caption: needs a non-empty string 'text'",
        f"{meta} line 5: file_name '../escape.png' points outside the folder",
        f"{meta} line 6: 'notes.txt': not an image or video file "
        "(.png, .jpg, .jpeg, .webp, .bmp, .gif, .mp4, .mov, .webm, .mkv, .avi, .gif)"]
    assert not report.ok


def test_media_columns_from_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.Table.from_pylist([{"image": {"bytes": b"x", "path": "a.jpg"}, "text": "cap"}]), tmp_path / "m.parquet")
    report = read_media(str(tmp_path / "m.parquet"))
    assert report.ok and report.items[0].kind == "image" and report.items[0].media["bytes"] == b"x"


def test_demo_data_is_deterministic_and_disjoint(tmp_path):
    before = (ROOT / "examples/data/chat_demo.jsonl").read_bytes()
    subprocess.run([sys.executable, str(ROOT / "scripts/make_demo_data.py")], check=True, capture_output=True)
    assert (ROOT / "examples/data/chat_demo.jsonl").read_bytes() == before
    def questions(name):
        return {json.loads(line)["messages"][-2]["content"] for line in (ROOT / "examples/data" / name).read_text().splitlines()}
    train, held = questions("chat_demo.jsonl"), questions("heldout_demo.jsonl")
    assert len(train) >= 300 and len(held) >= 50 and not train & held
