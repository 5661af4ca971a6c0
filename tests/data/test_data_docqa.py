"""scripts/make_docqa_data.py: the docqa LoRA task's data holds out whole modules and every held-out answer, and the
committed files are what the script writes (on the CPython minor version that wrote them)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "examples" / "data"


def rows(name):
    return [json.loads(line)["messages"] for line in (DATA / name).read_text(encoding="utf-8").splitlines()]


def module_of(question: str) -> str:
    """The module a question asks about: the first dotted lower-case name in it (`tarfile.TarFile.add` -> tarfile)."""
    return next(w for w in re.split(r"[ `?]", question) if "." in w and w[0].islower()).split(".")[0]


def test_held_out_modules_and_answers_never_occur_in_training():
    train, held = rows("docqa_train.jsonl"), rows("docqa_heldout.jsonl")
    assert len(train) == 1500 and len(held) == 300
    assert all([m["role"] for m in r] == ["system", "user", "assistant"] for r in train + held)
    train_answers, held_answers = {r[-1]["content"] for r in train}, {r[-1]["content"] for r in held}
    assert len(held_answers) == 300 and not train_answers & held_answers
    train_modules, held_modules = {module_of(r[1]["content"]) for r in train}, {module_of(r[1]["content"]) for r in held}
    assert len(held_modules) >= 10 and not train_modules & held_modules, train_modules & held_modules


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the committed files were written from CPython 3.11's "
                    "docstrings, which other versions change")
def test_the_script_writes_the_committed_files(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "scripts/make_docqa_data.py"), "--out", str(tmp_path)], check=True,
                   capture_output=True)
    for name in ("docqa_train.jsonl", "docqa_heldout.jsonl"):
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), name
