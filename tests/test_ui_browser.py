"""`snaprun ui` in a real browser (issue 23, part 4): Debian's headless Chromium
(/usr/bin/chromium) driven by Playwright against a real `snaprun ui --allow-decisions`
subprocess over a real store (tests/ui_server.py). One browser and one store per module.

Checked: the job list (statuses, filter, search), a job's timeline and effect ledger,
a snapshot's frames and variables, an approval's exact scope and expiry; approving it in
the browser records alice, a real `snaprun worker --once` then finishes the job, and the
open timeline shows it done without a reload (the live updates); a label holding
`<script>` is shown as text and runs nothing (no dialog, no global set).

Screenshots go to $SNAPSTATE_TEST_ARTIFACTS/ui (else pytest's temporary folder).
Without Playwright or Chromium the tests are skipped, saying so, unless
SNAPSTATE_TEST_REQUIRE_BROWSER=1 (.ci/run sets it): then they fail."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from helpers import snaprun
from ui_server import XSS_LABEL, make_store, start_ui

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _unavailable(reason: str) -> None:
    if os.environ.get("SNAPSTATE_TEST_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason}, and SNAPSTATE_TEST_REQUIRE_BROWSER=1")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install -e '.[test]')")
    if not os.path.exists(CHROMIUM):
        _unavailable(f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("ui-browser")
    store = make_store(root)
    server = start_ui(store, "--allow-decisions", "--user", "alice", "--poll", "0.5", cwd=root)
    server.store = store
    yield server
    assert server.stop() == 0, server.stderr()
    assert "Traceback" not in server.stderr(), server.stderr()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    base = os.environ.get("SNAPSTATE_TEST_ARTIFACTS")
    folder = Path(base) / "ui" if base else tmp_path_factory.mktemp("ui-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def page(browser, server):
    """A new browser context, logged in through the printed URL; every dialog the
    page opens is recorded (and dismissed) in page.dialogs; no console error (a
    blocked script or style, a failed request) may have happened by its end."""
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    tab = context.new_page()
    dialogs: list[str] = []
    tab.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    tab.dialogs = dialogs
    errors: list[str] = []  # a script or style the CSP blocked would be one
    tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    tab.goto(server.url)
    assert tab.url == server.base + "/"  # the token traded for the cookie
    yield tab
    context.close()
    assert errors == []


def test_the_job_list_filters_searches_and_shows_a_script_label_as_text(page, server, shots):
    """The list shows the three jobs with their statuses (xss waiting, parked parked);
    the status filter and the search narrow it; the xss job's timeline shows its label
    `<script>...` as text: no dialog opened, no global set by it."""
    rows = page.locator("table.jobs tbody tr")
    assert sorted(rows.evaluate_all("rs => rs.map(r => r.dataset.job)")) == [
        "parked",
        "publisher",
        "xss",
    ]
    assert page.locator('tr[data-job="xss"] .status').inner_text() == "waiting"
    assert page.locator('tr[data-job="parked"] .status').inner_text() == "parked"
    page.screenshot(path=shots / "jobs.png", full_page=True)
    page.select_option("select[name=status]", "parked")
    page.click(".filters button")
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.job)") == ["parked"]
    page.goto(server.base + "/")
    page.fill("input[name=q]", "XS")
    page.click(".filters button")
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.job)") == ["xss"]
    page.click('tr[data-job="xss"] a[href="/jobs/xss"]')
    label = page.locator("table.snapshots td.label").first
    assert label.inner_text() == XSS_LABEL
    page.screenshot(path=shots / "xss.png", full_page=True)
    assert page.evaluate("window.__xss") is None
    assert page.dialogs == []


def test_a_timeline_and_a_snapshots_frames_and_variables(page, server, shots):
    """A job's page: the timeline (created, lease, snapshots, the approval), the ledger
    row of its publish() effect, confirmed; its snapshot 2 shows main() at its line and
    the local `notes` as the inert view renders it; a click drills into `notes`, then
    into its `pages`; the diff of snapshots 1 and 2 names the page added."""
    page.goto(server.base + "/jobs/parked")
    assert page.locator(".summary .status").first.inner_text() == "parked"
    assert page.locator('tr[data-effect="1"] .status').inner_text() == "ambiguous"
    assert page.locator('tr[data-effect="1"] form.reconcile').count() == 1
    page.goto(server.base + "/jobs/xss")
    kinds = page.locator("table.timeline tbody td:nth-child(2)").all_inner_texts()
    assert {"created", "lease", "snapshot", "approval"} <= set(kinds)
    assert "publish('first')" in page.locator('tr[data-effect="1"]').inner_text()
    assert page.locator('tr[data-effect="1"] .status').inner_text() == "confirmed"
    page.screenshot(path=shots / "timeline.png", full_page=True)
    page.click('table.snapshots a[href="/jobs/xss/snapshots/2"]')
    frame = page.locator("details.frame").last
    assert "main()" in frame.locator(":scope > summary").inner_text()
    assert frame.locator("pre.source").inner_text() == 'snapshot("drafted")'
    notes = frame.locator("tr", has=page.locator("th", has_text="notes"))
    assert notes.locator("summary").inner_text() == (
        f"Notebook(title={XSS_LABEL!r}, pages=['draft one', 'draft two'])"
    )
    page.screenshot(path=shots / "snapshot.png", full_page=True)
    frame.locator("table.vars th a", has_text="notes").click()  # drill into the value
    assert page.locator("h1 code").inner_text() == "frame[0].locals.notes"
    page.locator("table.vars a", has_text="frame[0].locals.notes.pages").click()
    assert page.locator("pre.value").inner_text() == "['draft one', 'draft two']"
    page.goto(server.base + "/jobs/xss")
    page.click('table.snapshots a.diff-link:has-text("since 1")')
    change = page.locator("table.changes tbody tr").first
    assert change.locator("td").first.inner_text() == "frame[0].locals.notes.pages[1]"
    assert "added" in change.inner_text() and "'draft two'" in change.inner_text()
    page.screenshot(path=shots / "diff.png", full_page=True)
    assert page.dialogs == []


def test_approving_in_the_browser_lets_the_worker_finish_the_job(page, server, shots):
    """The approvals page shows publisher's request with its exact scope and expiry;
    Approve as alice records alice (`snaprun approvals --json`); the job's timeline,
    left open, shows it done once a real `snaprun worker --once` has run it, without a
    reload (the live part refreshes)."""
    page.goto(server.base + "/approvals")
    card = page.locator('article[data-approval^="publisher/"]')
    scope = json.loads(card.locator("pre.scope").inner_text())
    assert scope == {"channel": "blog", "max_posts": 1}
    assert re.search(r"\(in (5\dm|60m|1h)\)", card.inner_text())  # expires in about an hour
    page.screenshot(path=shots / "approval.png", full_page=True)
    card.locator("select[name=by]").select_option("alice")
    card.locator("input[name=note]").fill("looks right")
    card.locator("button.approve").click()
    assert "granted by alice" in page.locator(".done-text").inner_text(), page.content()
    listed = snaprun(
        "approvals", "--store", server.store, "--all", "--json", cwd=server.store.parent
    )
    (decided,) = [a for a in json.loads(listed.stdout) if a["job"] == "publisher"]
    assert (decided["state"], decided["decided_by"], decided["note"]) == (
        "granted",
        "alice",
        "looks right",
    )
    page.goto(server.base + "/jobs/publisher")
    assert page.locator("#job .summary .status").first.inner_text() == "waiting"
    worker = snaprun("worker", "--store", server.store, "--once", cwd=server.store.parent)
    assert worker.returncode == 0, worker.stderr
    page.wait_for_selector("#job .summary .status-done", timeout=20_000)  # no reload
    labels = page.locator("table.snapshots td.label").all_inner_texts()
    assert labels[-1] == "approved"
    page.screenshot(path=shots / "done.png", full_page=True)
    page.goto(server.base + "/")
    assert page.locator('tr[data-job="publisher"] .status').inner_text() == "done"
    page.screenshot(path=shots / "jobs-after.png", full_page=True)
    assert page.dialogs == []
