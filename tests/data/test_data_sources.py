"""Sources (JSON Lines, JSON, Parquet, save_to_disk, directories, fsspec URIs, Hub ids) and `yeto data check`."""
from __future__ import annotations

import json

import pytest

from conftest import chat, write_jsonl
from yeto.cli.main import main
from yeto.learners.data import DataSpec, check_data
from yeto.learners.data.sources import open_source

GOOD = [chat("q1", "a1"), chat("q2", "a2", system="s"), chat("q3", "a3")]


def _rows(source: str) -> list:
    return [(r.where, r.value, r.error) for r in open_source(source)]


def test_nasty_jsonl_reports_line_numbers(tmp_path):
    p = tmp_path / "nasty.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + json.dumps(GOOD[0]).encode() + b"\r\n"        # 1: BOM + Windows ending
                  + b"\r\n"                                                       # 2: blank, not a row
                  + b"[1, 2]\n"                                                   # 3: an array
                  + b'{"text": "caf\xff"}\n'                                      # 4: invalid UTF-8
                  + b'{"messages": [\n'                                           # 5: broken JSON
                  + json.dumps(GOOD[1]).encode())                                 # 6: no final newline
    rows = _rows(str(p))
    assert [(w.split()[-1], e) for w, _, e in rows] == [
        ("1", None), ("3", "expected a JSON object, got an array"),
        ("4", "not valid UTF-8 (byte 0xff at column 14)"),
        ("5", "not valid JSON: Expecting value at column 15"), ("6", None)]
    assert rows[0][1] == GOOD[0]
    report = check_data(DataSpec(source=str(p)))
    assert (report.num_rows, report.num_bad, report.ok) == (5, 3, False)
    assert [b.where for b in report.bad_rows] == [f"{p} line 3", f"{p} line 4", f"{p} line 5"]
    assert check_data(DataSpec(source=str(p), on_bad_rows="skip")).ok


def test_random_access_matches_stream(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_bytes(b"\n".join(json.dumps(r).encode() for r in GOOD) + b"\n\n")
    f = open_source(str(p)).files[0]
    assert len(f) == 3 and [r.ref for r in f.get_many([2, 0])] == [3, 1]
    assert [r.value for r in f.get_many([1])] == [GOOD[1]]


def test_json_parquet_save_to_disk_and_directory(tmp_path):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.json").write_text(json.dumps(GOOD + [[1]]))
    pq.write_table(pa.Table.from_pylist(GOOD), tmp_path / "d" / "b.parquet")
    datasets.Dataset.from_list(GOOD).save_to_disk(str(tmp_path / "disk"))
    assert [(w, e) for w, _, e in _rows(str(tmp_path / "d" / "a.json"))][-1] == (
        f"{tmp_path}/d/a.json row 3", "expected a JSON object, got an array")
    parquet = _rows(str(tmp_path / "d" / "b.parquet"))
    assert [w for w, _, _ in parquet] == [f"{tmp_path}/d/b.parquet row {i}" for i in range(3)]
    report = check_data(DataSpec(source=str(tmp_path / "d")))
    assert (report.num_rows, report.num_bad, report.formats) == (7, 1, {"openai": 6})
    disk = check_data(DataSpec(source=str(tmp_path / "disk")))
    assert (disk.num_rows, disk.num_bad, disk.ok) == (3, 0, True)
    # Arrow fills absent struct fields with null: the system-less rows must still normalize cleanly.
    assert disk.formats == {"openai": 3}


def test_fsspec_uri(tmp_path):
    import fsspec
    fs = fsspec.filesystem("memory")
    with fs.open("/bucket/chat/part-0.jsonl", "wb") as f:
        f.write(b"".join(json.dumps(r).encode() + b"\n" for r in GOOD))
    report = check_data(DataSpec(source="memory://bucket/chat"))
    assert (report.num_rows, report.ok) == (3, True)
    with pytest.raises(ValueError, match="no such object"):
        open_source("memory://bucket/nothing.jsonl")


def test_source_errors(tmp_path):
    with pytest.raises(ValueError, match=r"--data ./missing.jsonl: no such file or directory"):
        open_source("./missing.jsonl")
    (tmp_path / "x.csv").write_text("a,b")
    with pytest.raises(ValueError, match=r"unsupported file type '.csv'"):
        open_source(str(tmp_path / "x.csv"))
    (tmp_path / "bad.json").write_text('{"a": ')
    with pytest.raises(ValueError, match=r"bad.json: not valid JSON"):
        open_source(str(tmp_path / "bad.json"))


def test_hub_id_offline_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match=r"--data someorg/nodata: could not load this Hugging Face dataset"):
        open_source("someorg/nodata@main")


def test_mixed_file_and_token_stats(tmp_path, plain_tokenizer):
    p = write_jsonl(tmp_path / "mixed.jsonl", GOOD + [{"instruction": "i", "output": "o"},
                                                      chat("long " * 50, "x")])
    report = check_data(DataSpec(source=str(p), seq_len=32), plain_tokenizer)
    assert report.mixed_files == {str(p): {"openai": 4, "alpaca": 1}}
    assert report.tokens.num_over_seq_len == 1 and report.tokens.masking == "prefix-rendering"
    text = report.render()
    assert "mixes formats: alpaca 1, openai 4" in text and "1 rows exceed --seq-len 32" in text
    assert report.to_dict()["ok"] is True


def test_cli_check_exit_codes(tmp_path, capsys):
    good = write_jsonl(tmp_path / "good.jsonl", GOOD)
    bad = write_jsonl(tmp_path / "bad.jsonl", GOOD + [{"messages": []}])
    assert main(["data", "check", "--data", str(good)]) == 0
    assert "token statistics skipped" in capsys.readouterr().out
    assert main(["data", "check", "--data", str(bad)]) == 1
    assert f"{bad} line 4: empty conversation" in capsys.readouterr().out
    assert main(["data", "check", "--data", str(bad), "--on-bad-rows", "skip", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_bad"] == 1
    assert main(["data", "check", "--data", str(good), "--field-map", "nope=x"]) == 2
