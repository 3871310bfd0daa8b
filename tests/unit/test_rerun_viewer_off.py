"""A trimmed install without gradio-rerun / rerun-sdk: the Video tab builds with a line saying the viewer is off,
no option to ask for the recording, and nothing of rerun imported."""

import sys

import gradio as gr


def test_without_gradio_rerun_the_tab_says_the_viewer_is_off(monkeypatch):
    from sapiens2_demo.ui import rerun_viewer

    for name in [m for m in sys.modules if m.split(".")[0] in ("rerun", "gradio_rerun", "rerun_bindings")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "gradio_rerun", None)  # any import of it now fails
    monkeypatch.setitem(sys.modules, "rerun", None)
    assert not rerun_viewer.available()
    with gr.Blocks() as page:
        button = gr.Button()
        viewer = rerun_viewer.rerun_viewer()
        rerun_viewer.fill_after(button.click(lambda: None), viewer)  # no step for a viewer that is not there
    assert viewer is None
    notes = [block for block in page.blocks.values() if isinstance(block, gr.Markdown)]
    assert [block.value for block in notes] == [rerun_viewer.OFF]
    assert len(page.fns) == 1
