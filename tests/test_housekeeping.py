"""Nothing kept that no one asked for: old files go, visitors' sessions go, Gradio's orphaned
component copies go. On a small Gradio app of the same shape as specdec's (a streaming handler
returning some outputs as gr.update, a gr.State), served in this process, so the tests can look
inside its session store; and the page-close path through a real browser."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

gr = pytest.importorskip("gradio")
gradio_client = pytest.importorskip("gradio_client")

from conftest import free_port  # noqa: E402
from specdec.app import housekeeping, serving  # noqa: E402


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


def test_orphaned_component_copies_are_pruned(served):
    demo, url = served
    c = gradio_client.Client(url, verbose=False, download_files=False)
    for k in range(5):
        c.predict(k + 1, api_name="/run")
    session = session_of(demo, c)
    own = set(demo.default_config.blocks)
    orphans = [k for k in session.blocks_config.blocks if k not in own]
    # Gradio 6.31 files a new copy of each updated component per run: this is what pruning is for.
    # (If a Gradio upgrade stops doing it, this assertion says so and pruning can go.)
    assert len(orphans) >= 4, "Gradio no longer leaves orphaned copies: prune_sessions may be unneeded"
    assert housekeeping.prune_sessions(demo) == len(orphans)
    assert all(k in own for k in session.blocks_config.blocks)
    assert all(k in own for k in session.config_values)
    # the visitor's session still works and still has its state
    c.predict(2, api_name="/run")
    assert session_of(demo, c).state_data   # the gr.State value is kept


def test_idle_and_closed_sessions_are_dropped(served):
    demo, url = served
    a = gradio_client.Client(url, verbose=False, download_files=False)
    b = gradio_client.Client(url, verbose=False, download_files=False)
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


def test_exports_are_written_once_into_gradios_cache_and_swept_when_old(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    path = Path(housekeeping.export_path('{"schema": "specdec.trace"}'))
    assert path.is_file() and path.is_relative_to((tmp_path / "gradio" / housekeeping.EXPORTS).resolve())
    legacy = tmp_path / "tmp" / "specdec-abc123"   # where older versions wrote each run's export
    legacy.mkdir()
    (legacy / "specdec-trace.json").write_text("{}")
    empty = tmp_path / "gradio" / "0123abcd"      # Gradio deletes old files but leaves their folders
    empty.mkdir()
    unrelated = tmp_path / "tmp" / "someone-else"
    unrelated.mkdir()
    upload = tmp_path / "gradio" / "f00d" / "upload.json"   # an upload Gradio's own sweep missed
    upload.parent.mkdir()
    upload.write_text("{}")
    example = tmp_path / "gradio" / "beef" / "example.json"   # a file the app keeps in the cache
    example.parent.mkdir()
    example.write_text("{}")
    # young: nothing goes
    assert housekeeping.sweep_files(max_age=3600)["removed"] == 0
    assert path.exists() and legacy.exists()
    # an hour later: ours go, other programs' files stay
    out = housekeeping.sweep_files(max_age=3600, now=time.time() + 7200, keep=[example])
    assert not path.exists() and not legacy.exists() and not empty.exists() and not upload.exists()
    assert out["bytes"] > 0 and out["failed"] == 0
    assert unrelated.exists() and example.exists()


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
