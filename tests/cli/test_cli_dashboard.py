"""`yeto dashboard` in a real headless Chromium (Debian's, driven by Playwright) during a real local run of two
islands: the island rows and the loss curves appear, the curves grow and rounds show up without a reload, the
run's end shows as finalized; screenshots (live, and at the end) are kept in the test's folder."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
sys.path.insert(0, str(Path(__file__).parents[1] / "learner"))
import learner_tiny
from e2e_stack import YETO, Stack

pytestmark = [pytest.mark.slow]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
RUN = "dash"
POINTS = "[...document.querySelectorAll('path.curve')].reduce((n, p) => n + Number(p.dataset.n), 0)"


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (`apt-get install chromium`; .ci/run installs it)")
@pytest.mark.timeout(420)     # a real run: the learners alone take a minute to start on a busy 2-core machine
def test_the_page_shows_a_live_run_islands_curves_and_rounds_updating_without_a_reload(tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the test extra)")
    s = Stack(tmp_path / "home", learner_tiny.write_model_dir(tmp_path / "model"),
              learner_tiny.write_chat_jsonl(tmp_path / "chat.jsonl", 300))
    dash = subprocess.Popen([YETO, "dashboard", "--port", "0"], env=s.env, stdout=subprocess.PIPE, text=True)
    try:
        line = dash.stdout.readline()      # "dashboard on http://127.0.0.1:PORT/  (Ctrl-C to stop)": it is serving
        url = line.split()[2]
        assert url.startswith("http://127.0.0.1:"), line
        s.launch(RUN, "--max-steps", "80")
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM)
            page = browser.new_page(viewport={"width": 1280, "height": 720}, bypass_csp=True)   # the waits evaluate JS
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{url}run/{RUN}")       # before the run's first event: the page says so and keeps polling
            page.evaluate("window.sameDocument = true")     # gone if the page ever reloaded
            wait = lambda js, s=240: page.wait_for_function(js, timeout=s * 1000)  # noqa: E731
            wait("[...document.querySelectorAll('tr.island')].filter(r => r.cells[1].textContent === 'up').length === 2")
            before = page.evaluate(POINTS)     # the islands are up; the learners report a while later
            wait(f"{POINTS} > {before} && document.querySelectorAll('tr.learner').length === 2 "
                 "&& document.querySelectorAll('path.curve').length >= 3 "      # two learners' and the merged mean
                 "&& document.querySelectorAll('rect.span').length === 2 && document.querySelectorAll('tr.round').length > 0")
            page.screenshot(path=str(tmp_path / "live.png"))
            assert page.locator("#tps").inner_text() != "-" and page.locator("#step").inner_text().endswith("/ 80")
            wait("document.getElementById('phase').textContent.startsWith('finalized')", 240)
            assert page.evaluate("window.sameDocument === true && Number(document.body.dataset.polls) > 2"), "no reload"
            assert page.locator("#eta").inner_text() == "done" and errors == [], errors
            page.screenshot(path=str(tmp_path / "dashboard.png"))
            browser.close()
        s.finish(RUN, timeout=60)
        print(f"screenshots: {tmp_path}/live.png, dashboard.png")
    finally:
        dash.terminate()
        dash.wait(10)
        s.down()
