"""Inputs read in bounded memory (issue 41): a 50 MB `.json` array took `yeto data check` to 6.1 GB RSS, because the
array was parsed whole. learners/data/jsonarray.py finds each row's byte span in one pass and parses a row only when it
is read: the same rows and bad rows as the whole parse, structural errors refused with where they are, and the
peak RSS of `yeto data check` a small multiple of the largest row (benchmarks/json_array_memory.py compares the two
readers side by side)."""
from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from yeto.learners.data import jsonarray
from yeto.learners.data.sources import open_source

pytestmark = pytest.mark.timeout(300)


def _values(path) -> list:
    return [(r.ref, r.value, r.error is not None) for r in open_source(str(path))]


def _tricky_rows(n: int, seed: int) -> list:
    rng = random.Random(seed)
    pieces = ['"', "\\", "\\\"", "]", "[", "{", "}", ",", "\n", "é", "\u2028", " ", "x" * 50]
    rows: list = []
    for i in range(n):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 40)))
        rows.append({"messages": [{"role": "user", "content": text}, {"role": "assistant", "content": text[::-1]}],
                     "meta": {"i": i, "nested": [[text], {"k": [1, 2, {"z": None}]}]}})
        if i % 17 == 0:
            rows.append(rng.choice([[1, 2], "a string", 3.5, None, True]))      # bad rows: not objects
    return rows


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 1 << 20])
def test_the_streamed_array_reads_the_same_rows_as_the_whole_parse_across_any_chunk_boundary(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(jsonarray, "CHUNK", chunk)
    rows = _tricky_rows(120, seed=chunk)
    path = tmp_path / "rows.json"
    path.write_bytes(b"\xef\xbb\xbf \n" + json.dumps(rows, indent=1 if chunk % 2 else None).encode() + b"\n")
    got = _values(path)
    assert [(ref, value) for ref, value, bad in got if not bad] == [(i, r) for i, r in enumerate(rows) if isinstance(r, dict)]
    assert [ref for ref, _, bad in got if bad] == [i for i, r in enumerate(rows) if not isinstance(r, dict)]
    f = open_source(str(path)).files[0]
    assert len(f) == len(rows) and [r.value for r in f.get_many([3, 0])] == [rows[3], rows[0]]


@pytest.mark.parametrize("text, error", [
    ("[{\"a\": 1}", "ends inside the array"),
    ("[{\"a\": 1}] {}", "more after the array's closing ']'"),
    ("[{\"a\": [1}]", "'}' closes a '['"),
    ("[{\"a\": 1},]", "a comma before the ']'"),
    ("[, {\"a\": 1}]", "no value before the comma"),
    ("", "starts with nothing"),
    ("\"rows\"", "starts with '\"'"),
    ("{\"a\": ", "not valid JSON"),
    ("{\"a\": 1}", "got one JSON object"),
])
def test_a_broken_array_is_refused_with_where(tmp_path, text, error):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"bad.json: .*{__import__('re').escape(error)}"):
        open_source(str(path))


def test_bad_rows_inside_the_array_are_bad_rows_with_their_index(tmp_path):
    path = tmp_path / "rows.json"
    good = {"text": "ok"}
    path.write_bytes(b"[" + json.dumps(good).encode() + b", {\"a\": 1x}, " + b"[" * 100_000 + b"]" * 100_000 + b", "
                     + b'{"t": "caf\xff"}, {"text": "' + b"y" * 400_000 + b'"}, ' + json.dumps(good).encode() + b"]")
    rows = list(jsonarray.JsonArrayFile(str(path), lambda: open(path, "rb"), max_row=300_000))
    assert [(r.ref, r.value) for r in rows if r.error is None] == [(0, good), (5, good)]
    errors = {r.ref: r.error for r in rows if r.error is not None}
    assert "not valid JSON" in errors[1] and "nested too deeply" in errors[2] and "UTF-8" in errors[3]
    assert "longer than 300000" in errors[4]
    (tmp_path / "rows2.json").write_text("[{\"a\": 1}, {\"b\": 2}]")
    assert [r.value for r in open_source(str(tmp_path / "rows2.json"))] == [{"a": 1}, {"b": 2}]


def test_json_lines_saved_as_json_is_still_read_as_lines(tmp_path):
    path = tmp_path / "lines.json"
    path.write_text('{"a": 1}\n{"b": 2}\n')
    assert [(r.where.split()[-2:], r.value) for r in open_source(str(path))] == [(["line", "1"], {"a": 1}),
                                                                               (["line", "2"], {"b": 2})]


def _peak_kib(path) -> int:
    """Peak RSS (KiB) of `yeto data check --data path` in a process of its own."""
    code = ("import resource, sys\nfrom yeto.cli.main import main\nrc = main(['data', 'check', '--data', sys.argv[1]])\n"
            "print(rc, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=240)
    rc, kib = done.stdout.split()[-2:]
    assert rc == "0", done.stdout + done.stderr
    return int(kib)


@pytest.mark.slow
def test_data_check_reads_a_large_array_in_memory_a_small_multiple_of_its_largest_row(tmp_path):
    row = {"messages": [{"role": "user", "content": "q " * 400}, {"role": "assistant", "content": "a " * 400}]}
    largest = {"messages": [{"role": "user", "content": "Q" * (4 << 20)}, {"role": "assistant", "content": "A"}]}
    big, small = tmp_path / "big.json", tmp_path / "small.json"
    with open(big, "w") as f:
        f.write("[" + json.dumps(largest))
        for _ in range(96 << 20 >> 11):                     # ~96 MiB of ~2 KiB rows
            f.write(",\n" + json.dumps(row))
        f.write("]")
    small.write_text(json.dumps([largest, row]))
    largest_bytes = len(json.dumps(largest))
    grew = (_peak_kib(big) - _peak_kib(small)) * 1024
    baseline = _peak_kib(small) * 1024
    print(f"{big.stat().st_size >> 20} MiB array, largest row {largest_bytes >> 20} MiB: peak RSS {baseline >> 20} MiB "
          f"for two rows, +{grew >> 20} MiB for all of them")
    assert grew <= 4 * largest_bytes, "memory is a small multiple of one row, not of the file"
