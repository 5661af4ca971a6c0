"""A folder derived from a GGUF (the model dequantized, the tokenizer read) is derived by one process of the host at
a time: the islands of a first run start together, and each dequantized the same file beside the others. A load that
finds another process deriving it waits, then reads the folder that process stored (infra/gguf_cache.py
`FolderCache.deriving`, used by learners/torch/model.py); a holder that keeps it past the bound is not waited for."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from yeto.infra.gguf_cache import FolderCache

pytestmark = pytest.mark.timeout(120)

HOLDER = """
import sys
from pathlib import Path
from yeto.infra.gguf_cache import FolderCache
cache = FolderCache("models", lambda source: "k1", max_file_bytes=1 << 20)
with cache.deriving("the.gguf"):
    print("held", flush=True)
    sys.stdin.readline()                     # the test says when to store
    cache.store("the.gguf", lambda folder: (folder / "config.json").write_text("{}"))
"""


@pytest.fixture
def holder(tmp_path, monkeypatch):
    """A real process deriving the folder: it holds the lock until the test writes a line, then stores and exits."""
    monkeypatch.setenv("YETO_HOME", str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "YETO_HOME": str(tmp_path)})
    assert proc.stdout.readline() == "held\n"
    yield proc
    proc.kill()
    proc.wait()


def test_a_load_waits_for_the_process_deriving_the_folder_and_reads_what_it_stored(holder):
    asked = threading.Event()

    def key(source):
        asked.set()
        return "k1"
    cache, found = FolderCache("models", key, max_file_bytes=1 << 20), []

    def load():
        with cache.deriving("the.gguf"):
            found.append(cache.cached_folder("the.gguf"))    # None here would mean: derive it again
    waiter = threading.Thread(target=load)
    waiter.start()
    asked.wait(30)
    holder.stdin.write("store\n")
    holder.stdin.flush()
    waiter.join(60)
    assert holder.wait(30) == 0
    assert found and found[0] is not None and (found[0] / "config.json").read_text() == "{}"


def test_a_holder_past_the_bound_is_not_waited_for(holder):
    cache = FolderCache("models", lambda source: "k1", max_file_bytes=1 << 20)
    with cache.deriving("the.gguf", wait_s=0):       # returns although the holder still holds it
        assert cache.cached_folder("the.gguf") is None
    assert holder.poll() is None
