"""The generated parts of the docs are current: README file tree and model table, the event catalogue."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _check(script: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / script), "--check"], cwd=ROOT, capture_output=True, text=True)


def test_readme_file_tree_and_event_catalogue_are_current():
    result = _check("gen_docs.py")
    assert result.returncode == 0, result.stderr


def test_every_file_in_the_readme_tree_says_what_it_is_for():
    sys.path.insert(0, str(ROOT / "scripts"))
    import gen_docs

    silent = [str(p.relative_to(ROOT)) for p in gen_docs.tracked_files() if not gen_docs.describe(p)]
    assert not silent, f"give these files a first docstring line (or a heading): {silent}"


def test_readme_model_table_matches_the_alias_table():
    result = _check("gen_model_table.py")
    assert result.returncode == 0, result.stderr


# A result is dated and tied to a commit, never to an internal work period ("session 14", "S19", "the third session").
_WORK_PERIOD = [re.compile(r"\b[Ss]ession \d+\b"), re.compile(r"\bS\d{1,2}\b"),
                re.compile(r"\b(?:first|second|third|fourth|fifth|previous|next|this|that|same) session\b", re.I)]
_NOT_A_LABEL = {"S3"}  # the storage service, should a doc name it


def _markdown_under_review() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "benchmarks" / "results").rglob("*.md"))]


def test_no_doc_labels_a_result_by_a_work_period():
    found = []
    for path in _markdown_under_review():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            hits = [m.group(0) for pattern in _WORK_PERIOD for m in pattern.finditer(line) if m.group(0) not in _NOT_A_LABEL]
            found += [f"{path.relative_to(ROOT)}:{number}: {hit}" for hit in hits]
    assert not found, "label these by date and commit instead:\n" + "\n".join(found)


def test_every_claim_on_the_results_page_has_a_date_a_commit_and_raw_results_that_exist():
    page = (ROOT / "docs" / "BENCHMARK_RESULTS.md").read_text()
    table = page.split("## The claims at a glance", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if re.match(r"\| \d+ \|", line)]
    assert len(rows) >= 8, "one row per claim"
    for row in rows:
        when = row.rstrip().rstrip("|").rsplit("|", 1)[1]
        assert re.search(r"\b20\d\d-\d\d-\d\d\b", when) and re.search(r"\b[0-9a-f]{7,40}\b", when), row
    named = set(re.findall(r"`(benchmarks/results/[^`<>*\s]+)`", page))
    linked = {(ROOT / "docs" / target).resolve() for target in re.findall(r"\]\((?!https?:)([^)#]+)", page)}
    missing = [p for p in named if not (ROOT / p).exists()] + [str(p) for p in linked if not p.exists()]
    assert not missing, missing
