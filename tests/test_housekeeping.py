"""Nothing kept that no one asked for: old files go, visitors' sessions go, Gradio's orphaned
component copies go. On a small Gradio app of the same shape as specdec's (a streaming handler
returning some outputs as gr.update, a gr.State), served in this process, so the tests can look
inside its session store; and the page-close path through a real browser."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

gr = pytest.importorskip("gradio")
pytest.importorskip("gradio_client")   # app_client needs it

from conftest import free_port  # noqa: E402
from serverload import notices  # noqa: E402
from specdec.app.server import budget, housekeeping, serving  # noqa: E402
from specdec.bench.app_client import app_client  # noqa: E402


def tiny_app() -> gr.Blocks:
    """A handler that, like specdec's Run, streams partial updates (Gradio fills the outputs it
    leaves out with gr.update) and keeps a per-visitor state."""
    with gr.Blocks() as demo:
        state = gr.State(None)
        n = gr.Slider(1, 10, value=3, step=1, label="how many")
        text = gr.HTML("")
        plot_like = gr.Markdown("")
        slider = gr.Slider(1, 2, value=1, step=1, label="round", interactive=False)
        btn = gr.Button("go")

        def run(k):
            big = "x" * 50_000
            yield {text: f"<b>{big}</b>", state: big}
            yield {plot_like: big + str(k), slider: gr.update(maximum=int(k) + 1, value=1)}

        btn.click(run, [n], [text, plot_like, slider, state], api_name="run")
    return demo


@pytest.fixture(scope="module")
def served():
    demo = tiny_app()
    serving.configure(demo, housekeeping_thread=False)
    port = free_port()
    demo.launch(server_port=port, prevent_thread_lock=True, quiet=True, ssr_mode=False, **serving.launch_options())
    yield demo, f"http://127.0.0.1:{port}/"
    demo.close()


def session_of(demo, client):
    return demo.state_holder.session_data[client.session_hash]


def _orphans(demo, c) -> list:
    own = set(demo.default_config.blocks)
    return [k for k in session_of(demo, c).blocks_config.blocks if k not in own]


def test_outputs_left_out_leave_no_component_copies(served):
    """`skips`: an output a handler leaves out is not rebuilt, so it leaves no copy behind."""
    demo, url = served
    c = app_client(url, download_files=False)
    for k in range(5):
        c.predict(k + 1, api_name="/run")
    assert _orphans(demo, c) == []


def test_a_request_makes_the_queue_look_for_work_briskly(served, monkeypatch):
    """`serving.QueuePoll` on Gradio's own push: the queue looks every 50 ms while the server is
    quiet (a test of its own in test_limits), every 10 ms once a request comes."""
    demo, url = served
    monkeypatch.setattr(serving, "BRISK_FOR_SECONDS", 600)   # the request's settle comes after the test
    demo._queue.sleep_when_free = serving.QUIET_POLL_SECONDS   # as if quiet for a while
    app_client(url, download_files=False).predict(1, api_name="/run")
    assert demo._queue.sleep_when_free == serving.BRISK_POLL_SECONDS


def test_orphaned_component_copies_are_pruned(served, monkeypatch):
    demo, url = served
    monkeypatch.delattr(demo, "postprocess_data")   # Gradio's own, without `skips`, which leaves copies
    c = app_client(url, download_files=False)
    for k in range(5):
        c.predict(k + 1, api_name="/run")
    session = session_of(demo, c)
    own = set(demo.default_config.blocks)
    orphans = _orphans(demo, c)
    # Gradio 6.31 files a new copy of each component it rebuilds, per run: this is what pruning is
    # for. (If a Gradio upgrade stops doing it, this assertion says so and pruning can go.)
    assert len(orphans) >= 4, "Gradio no longer leaves orphaned copies: prune_sessions may be unneeded"
    assert housekeeping.prune_sessions(demo) == len(orphans)
    assert all(k in own for k in session.blocks_config.blocks)
    assert all(k in own for k in session.config_values)
    # the visitor's session still works and still has its state
    c.predict(2, api_name="/run")
    assert session_of(demo, c).state_data   # the gr.State value is kept


def test_idle_and_closed_sessions_are_dropped(served):
    demo, url = served
    a = app_client(url, download_files=False)
    b = app_client(url, download_files=False)
    a.predict(1, api_name="/run")
    b.predict(1, api_name="/run")
    assert {a.session_hash, b.session_hash} <= set(demo.state_holder.session_data)
    # nothing is idle yet
    assert housekeeping.drop_idle_sessions(demo, max_idle=60) == 0
    # a is idle from the point of view of a clock 120 s ahead; so is b: both go
    dropped = housekeeping.drop_idle_sessions(demo, max_idle=60, now=time.time() + 120)
    assert dropped >= 2 and a.session_hash not in demo.state_holder.session_data
    # a closed page's session goes at the next sweep, whatever its age
    a.predict(1, api_name="/run")
    demo.state_holder.session_data[a.session_hash].is_closed = True
    assert housekeeping.drop_idle_sessions(demo, max_idle=3600) == 1
    assert a.session_hash not in demo.state_holder.session_data


def test_past_the_byte_budget_the_least_recently_used_go_and_are_told_at_their_next_action(served):
    demo, url = served
    for session_hash in list(demo.state_holder.session_data):   # only this test's visitors
        housekeeping.drop_session(demo, session_hash)
    clients = [app_client(url, download_files=False) for _ in range(4)]
    for c in clients:
        c.predict(2, api_name="/run")   # each holds 50 kB in its state, and what its page shows
        time.sleep(0.05)
    sizes = budget.SIZER.held(demo.state_holder)
    assert all(sizes[c.session_hash] > 100_000 for c in clients), sizes
    # room for the two most recently used visitors only
    limit = sizes[clients[2].session_hash] + sizes[clients[3].session_hash] + 1000
    released = housekeeping.enforce_budget(demo, limit=limit)
    assert released == [clients[0].session_hash, clients[1].session_hash]
    assert sum(budget.SIZER.held(demo.state_holder).values()) <= limit
    assert {clients[2].session_hash, clients[3].session_hash} <= set(demo.state_holder.session_data)
    # their next action, whatever it is, tells them what happened and what to do (once)
    job = clients[0].submit(1, api_name="/run")
    job.result()
    told = notices(job)
    assert any("let go of your run" in m and "SPECDEC_SESSION_BYTES" in m and "Reload the page" in m
               for m in told), told
    job = clients[0].submit(1, api_name="/run")
    job.result()
    assert not any("let go" in m for m in notices(job))
    # the visitor being served is spared while others can go
    assert housekeeping.enforce_budget(demo, protect=clients[0].session_hash, limit=1)[-1] == clients[0].session_hash


def test_a_visitor_whose_connection_dropped_is_told_what_to_do_at_their_next_action(served):
    demo, url = served
    c = app_client(url, download_files=False)
    c.predict(1, api_name="/run")
    unload = next(fn for fn in demo.fns.values() if any(t[1] == "unload" for t in fn.targets))
    unload.fn(SimpleNamespace(session_hash=c.session_hash))   # what Gradio calls when a page's heartbeat drops
    assert c.session_hash not in demo.state_holder.session_data
    job = c.submit(1, api_name="/run")   # the same page, connected again
    job.result()
    assert any("lost its connection" in m and "Reload the page" in m for m in notices(job)), notices(job)


def test_closing_the_page_releases_the_visitors_session_at_once(served, browser):
    demo, url = served
    before = set(demo.state_holder.session_data)
    context = browser.new_context()
    page = context.new_page()
    page.goto(url, wait_until="load")
    page.get_by_role("button", name="go", exact=True).click()
    deadline = time.time() + 20
    while time.time() < deadline and not set(demo.state_holder.session_data) - before:
        time.sleep(0.2)
    new = set(demo.state_holder.session_data) - before
    assert new, "the page's run made no session"
    page.close()
    context.close()
    deadline = time.time() + 20
    while time.time() < deadline and new & set(demo.state_holder.session_data):
        time.sleep(0.2)
    assert not new & set(demo.state_holder.session_data), "the session outlived its page"


@pytest.fixture
def folders(tmp_path, monkeypatch):
    """Gradio's cache folder and the temp folder, both fresh: (cache, tmp)."""
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    (tmp_path / "gradio").mkdir()
    return (tmp_path / "gradio").resolve(), (tmp_path / "tmp").resolve()


def _write(path: Path, text: str = "{}") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


LATER = 7200   # seconds: the sweeps below look at the folders from two hours ahead


def test_exports_are_written_once_into_a_folder_of_our_own_and_kept_until_their_age(folders):
    cache, _ = folders
    path = Path(housekeeping.export_path('{"schema": "specdec.trace"}'))
    own = housekeeping.own_dir()
    assert path.is_file() and path.is_relative_to(own) and own.parent == cache
    assert own.name.startswith(f"specdec-{__import__('os').getpid()}-")
    # nothing lost: a sweep before the export's age keeps it (the visitor can still download it)
    assert housekeeping.sweep_files(max_age=3600)["removed"] == 0
    assert housekeeping.sweep_files(max_age=3600, now=time.time() + 3500)["removed"] == 0
    assert path.read_text() == '{"schema": "specdec.trace"}'
    # past its age it goes, with the folder it was in; our folder stays for the next export
    out = housekeeping.sweep_files(max_age=3600, now=time.time() + LATER)
    assert not path.exists() and not path.parent.exists() and own.is_dir()
    assert out["removed"] == 2 and out["bytes"] > 0 and out["failed"] == 0


def test_a_sweep_deletes_only_what_this_process_made(folders):
    """Gradio's cache folder is shared by every Gradio app on the machine that does not set
    GRADIO_TEMP_DIR: another app's files and folders of the same age, in the same folder, survive
    a sweep, whatever their names (another specdec server's folder, an older specdec's too)."""
    cache, tmp = folders
    ours = Path(housekeeping.export_path("{}"))
    foreign = [_write(cache / "f00d" / "upload.json"),               # another app's upload
               _write(cache / "loose.json"),                         # a file at the top of the cache
               _write(cache / "specdec-exports" / "abc" / "t.json"),  # where older specdecs wrote exports
               _write(cache / "specdec-999-beef" / "t.json"),         # another specdec server's folder
               _write(tmp / "specdec-abc123" / "trace.json")]         # an older specdec's temp folder
    empty = cache / "0123abcd"
    empty.mkdir()                                                    # another app's empty folder
    out = housekeeping.sweep_files(max_age=3600, now=time.time() + LATER)
    assert not ours.exists(), "our own old export was kept"
    assert all(f.read_text() == "{}" for f in foreign), [str(f) for f in foreign if not f.exists()]
    assert empty.is_dir()
    assert out["failed"] == 0


def test_a_link_in_our_folder_is_removed_as_a_link_its_target_untouched(folders, tmp_path):
    own = Path(housekeeping.export_path("{}")).parent.parent   # the folder exports go to
    outside = _write(tmp_path / "outside" / "precious.json", "keep me")
    _write(tmp_path / "outside" / "dir" / "inner.json", "keep me too")
    (own / "to-file").symlink_to(outside)
    (own / "to-dir").symlink_to(tmp_path / "outside" / "dir", target_is_directory=True)
    (own / "sub").mkdir()
    (own / "sub" / "to-outside").symlink_to(tmp_path / "outside", target_is_directory=True)
    out = housekeeping.sweep_files(max_age=3600, now=time.time() + LATER)
    for link in (own / "to-file", own / "to-dir", own / "sub" / "to-outside"):
        assert not link.is_symlink() and not link.exists(), f"{link.name} was kept"
    assert outside.read_text() == "keep me"
    assert (tmp_path / "outside" / "dir" / "inner.json").read_text() == "keep me too"
    assert out["failed"] == 0


def test_folders_gradio_made_for_this_apps_files_go_once_empty_and_old(folders):
    """Gradio's own `delete_cache` deletes this app's uploads but leaves their folders: the sweep
    removes those (only when empty), and nobody else's."""
    cache, _ = folders
    mine = _write(cache / "cafe" / "upload.json")
    still_there = _write(cache / "beef" / "upload.json")
    foreign_empty = cache / "f00d"
    foreign_empty.mkdir()
    made = [str(mine), str(still_there)]
    mine.unlink()   # Gradio deleted it
    housekeeping.sweep_files(max_age=3600, now=time.time() + LATER, gradio_files=made)
    assert not mine.parent.exists() and still_there.exists() and foreign_empty.is_dir()


def test_the_housekeeper_thread_runs_and_survives_errors(served, monkeypatch):
    demo, _ = served
    calls = []

    def boom(d):
        calls.append(1)
        raise RuntimeError("simulated")
    monkeypatch.setattr(housekeeping, "prune_sessions", boom)
    keeper = housekeeping.start(demo, every=0.2, prune_every=0.05)
    try:
        deadline = time.time() + 5
        while time.time() < deadline and len(calls) < 3:
            time.sleep(0.05)
        assert len(calls) >= 3 and keeper.is_alive()   # it logged the error and went on
    finally:
        keeper.stop()
