"""Write the docstring Q&A chat data (examples/data/docqa_train.jsonl, docqa_heldout.jsonl): real English, unseen answers.

Questions about the Python standard library ("What does `textwrap.dedent` do?"), answered with the first paragraph
of the object's own docstring: text people wrote, not templates. The split is by module: no held-out answer is the
answer of any training row and no held-out row's module occurs in training, so the held-out CE measures how the
fine-tuned model writes docstring prose for code it never saw answered, not recall of memorized answers (the demo
data's held-out rows share their answers with training: a memorization task).

Deterministic for one Python version (docstrings change between versions): the files in examples/data were written
by CPython 3.11. Re-run only on purpose; the LoRA results name the file they trained on.

    .venv/bin/python scripts/make_docqa_data.py [--out examples/data]
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import inspect
import json
import random
import re
import sys
from pathlib import Path

SYSTEM = "You answer questions about the Python standard library in one short paragraph."
MODULES = (
    "abc argparse ast base64 bisect calendar cmath codecs collections colorsys configparser contextlib copy csv "
    "dataclasses datetime decimal difflib dis email.message email.utils enum filecmp fnmatch fractions ftplib "
    "functools getopt gettext glob gzip hashlib heapq hmac html html.parser http.client http.cookies imaplib "
    "importlib inspect io ipaddress itertools json keyword linecache locale logging lzma mailbox math mimetypes "
    "numbers operator optparse os os.path pathlib pickle pkgutil platform plistlib poplib pprint queue quopri "
    "random re reprlib sched secrets selectors shelve shlex shutil smtplib socket sqlite3 ssl stat statistics "
    "string struct subprocess tarfile tempfile textwrap threading time timeit token tokenize trace traceback "
    "types typing unicodedata urllib.parse urllib.request uuid warnings wave weakref xml.dom.minidom "
    "xml.etree.ElementTree zipfile zlib").split()
QUESTIONS = (
    "What does `{q}` do?",
    "In Python, what is `{q}` for?",
    "Explain `{q}` from the standard library.",
    "Briefly, what does {q} do?",
    "I found `{q}` in some code. What is it?",
    "Describe the Python {kind} `{q}`.",
)
ALIASES = {"posix": "os", "posixpath": "os", "sre_compile": "re", "elementtree": "xml"}
"""Modules whose objects a public module re-exports as its own."""
HELDOUT_EVERY = 6
"""A module is held out when the first byte of sha1(name) is divisible by this (about one in six)."""
MAX_TRAIN, MAX_HELDOUT = 1500, 300
SIGNATURE = re.compile(r"^[\w.]+\(.*\)(\s*->\s*.*)?$")


def first_paragraph(doc: str | None) -> str | None:
    """The docstring's first prose paragraph, whitespace collapsed, cut at a sentence end near 360 characters."""
    if not doc:
        return None
    paras = [" ".join(p.split()) for p in re.split(r"\n\s*\n", doc.strip())]
    paras = [p for p in paras if p and not SIGNATURE.match(p)]
    if not paras:
        return None
    text = paras[0]
    if len(text) > 360:
        cut = text.rfind(". ", 0, 360)
        if cut < 80:
            return None
        text = text[:cut + 1]
    if len(text) < 40 or not text[0].isupper() or ">>>" in text or "::" in text:
        return None
    return text


def entries(module_name: str):
    """(qualified name, kind, answer) for the module's public functions, classes and their own methods."""
    try:
        mod = importlib.import_module(module_name)
    except ImportError:
        return
    for name in sorted(vars(mod)):
        obj = getattr(mod, name)
        owner = (getattr(obj, "__module__", None) or "").lstrip("_").split(".")[0]  # _socket -> socket
        if name.startswith("_") or ALIASES.get(owner, owner) != module_name.split(".")[0]:
            continue              # private, or imported from elsewhere (asked about where it is defined)
        if inspect.isclass(obj):
            yield f"{module_name}.{name}", "class", first_paragraph(inspect.getdoc(obj))
            for meth in sorted(vars(obj)):
                fn = vars(obj)[meth]
                if not meth.startswith("_") and callable(fn) and fn.__doc__:
                    yield f"{module_name}.{name}.{meth}", "method", first_paragraph(fn.__doc__)
        elif inspect.isroutine(obj):
            yield f"{module_name}.{name}", "function", first_paragraph(inspect.getdoc(obj))


def held_out(module_name: str) -> bool:
    return hashlib.sha1(module_name.encode()).digest()[0] % HELDOUT_EVERY == 0


def build(seed: int = 0) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    seen: set[str] = set()
    split: dict[bool, list[dict]] = {False: [], True: []}
    for module_name in sorted(MODULES, key=held_out, reverse=True):  # held-out modules first: they keep an answer
        for qual, kind, answer in entries(module_name):                # that a training module shares
            if answer is None or answer in seen:
                continue
            seen.add(answer)
            question = rng.choice(QUESTIONS).format(q=qual, kind=kind)
            split[held_out(module_name)].append({"messages": [
                {"role": "system", "content": SYSTEM}, {"role": "user", "content": question},
                {"role": "assistant", "content": answer}]})
    train, heldout = split[False], split[True]
    rng.shuffle(train)
    rng.shuffle(heldout)
    return train[:MAX_TRAIN], heldout[:MAX_HELDOUT]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "examples" / "data"))
    args = ap.parse_args()
    train, heldout = build()
    if len(train) < 500 or len(heldout) < 100:
        sys.exit(f"make_docqa_data: only {len(train)} training and {len(heldout)} held-out rows on this Python "
                 f"({sys.version.split()[0]}); the committed files were written by 3.11")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("docqa_train.jsonl", train), ("docqa_heldout.jsonl", heldout)):
        (out / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        print(f"{out / name}: {len(rows)} rows")


if __name__ == "__main__":
    main()
