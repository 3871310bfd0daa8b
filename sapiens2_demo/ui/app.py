"""The Gradio interface: one tab per task (built from the task descriptions), then All tasks, Video, Live and
Features. No model logic lives here: each tab is a thin front door onto `jobs`."""

from __future__ import annotations

import gradio as gr

from .. import tasks
from ..jobs.image import AppContext
from .common import STANDIN_NOTE, runs_stand_ins, session_of, task_tab
from .features_tab import build_features_tab
from .image_tabs import build_all_tab, build_task_tab, run_request
from .live_tab import build_live_tab
from .video_tab import build_video_tab
from .viewers import CARD_PREFIX, SHOWN_MODELS


def build_app(ctx: AppContext) -> gr.Blocks:
    # the downloads are served from the output folder as they are: gradio would otherwise hash and copy every
    # file of every answer into its cache (~0.7 s for a 1080p normals answer; the folders sweep themselves)
    gr.set_static_paths([ctx.outputs.root])
    with gr.Blocks(title="Sapiens2 demo", delete_cache=(1800, 3600)) as demo:
        gr.Markdown("# Sapiens2: human-centric vision\nPose (308 keypoints), body-part segmentation, "
                    "surface normals, depth & 3D, and matting with Meta's Sapiens2 models. Models load on "
                    "first use; the first run of each model takes longer.")
        for spec in tasks.all_specs():
            if spec.present is not None:
                build_task_tab(ctx, spec)
        build_all_tab(ctx)
        build_video_tab(ctx)
        build_live_tab(ctx)
        build_features_tab(ctx, task_tab, lambda *args, **kwargs: run_request(ctx, *args, **kwargs))
        gr.Markdown(footer_text(ctx), elem_id="road")

        def forget_session(request: gr.Request):
            ctx.outputs.delete_session(session_of(request))
            SHOWN_MODELS.forget(session_of(request))

        demo.unload(forget_session)
    demo.sapiens2_context = ctx  # for tests and tools that inspect the running app
    return demo


def footer_text(ctx: AppContext) -> str:
    """The road the models take here (chosen at start: --device, --dtype and --compile override it), led on the
    stand-ins by what they are."""
    standins = (f"<strong>{STANDIN_NOTE}</strong>: this server runs the stand-ins of sapiens2_demo/standins (tiny "
                "models trained on synthetic pictures), not Sapiens2's weights. " if runs_stand_ins(ctx.manager)
                else "")
    return (f"<small>{standins}Models run on {ctx.manager.road} (chosen for this machine; --device, --dtype and "
            "--compile override it).</small>")


# A failed run leaves the outputs as they were (or empty): the toast names the task and says what to do, so the
# red "Error" badge gradio lays over each output panel is hidden. Download lists are outputs: gradio 6.31 gives
# every row of a list of two or more files a remove button, even when the list is not interactive. The All-tasks
# gallery (height "auto") is capped at 55 % of the window by gradio and scrolls: its second row of renders and
# their captions were cut off on a laptop's screen, so it takes the height its tiles need. An uploaded image is
# shown at most 75 % of the window high: a tall one (60 x 4000) made the page 4000 px long; and an image or a
# result at least 200 px high, centred: a wide one (3000 x 40) was an 8 px strip under its own toolbar buttons (and
# a result's 4000 x 60 picture a 12 px strip under its label). A progress box (the Video tab's, under its button) is
# empty and flat until a run shows its progress there.
CSS = """
[data-testid="status-tracker"]:has(> .error) { display: none !important; }
[id$="-files"] .label-clear-button { display: none !important; }
a[data-testid="model3d-download-link"][href*="CARD_PREFIX"] { display: none !important; }
.toast-message-item[data-unplayable] { display: none !important; }
#all-output .grid-wrap { max-height: none !important; overflow-y: auto !important; }
.image-frame img { max-height: 75vh; }
.upload-container:has(> .image-frame img) { min-height: 200px; align-items: center; justify-content: center; }
.slider-wrap { min-height: 200px; align-items: center; }
.image-container > button:has(> .image-frame img) { min-height: 200px; align-items: center; justify-content: center; }
.progress-box:has(> [data-testid="status-tracker"]:not(.hide)):not(:has(> [data-testid="status-tracker"] > .error)) {
  min-height: 80px !important;
}
[data-testid="toast-body"]:has([data-unplayable]):not(:has(.toast-message-item:not([data-unplayable]))) {
  display: none !important;
}
""".replace("CARD_PREFIX", CARD_PREFIX)  # an empty viewer's card (viewers.py) is not a download


# What the page adjusts as it changes (one observer):
# - the Live tab's stream buttons are named for what they do: gradio's say "Record", which sounds like saving a
#   video (its translation keys cannot be overridden in 6.31, so the page renames the button's text when it appears);
# - gradio's own red "Video not playable" message (a video box whose file the browser cannot decode) is marked, and
#   the CSS above hides it (and its toast, when it holds nothing else; gradio groups the errors in one toast): the
#   upload check says it in our words (video_tab.check_video_upload: a file we cannot read is refused, one the
#   browser may not preview is processed all the same), and the results are H.264, which every browser plays.
PAGE_JS = """
() => {
  const names = {"Record": "Start webcam", "Stop": "Stop webcam"};  // gradio's "audio.record" / "audio.stop"
  const UNPLAYABLE = "Video not playable";
  const rename = () => {
    const root = document.getElementById("live-camera");
    if (!root) return;
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const name = names[node.textContent.trim()];
      if (name && node.parentElement.closest("button")) node.textContent = name;
    }
  };
  const markUnplayable = () => {  // the CSS hides a marked message, and a toast of only such messages
    for (const text of document.querySelectorAll('[data-testid="toast-text"]')) {
      const item = text.parentElement, unplayable = text.textContent.trim() === UNPLAYABLE;
      if (unplayable !== item.hasAttribute("data-unplayable")) item.toggleAttribute("data-unplayable", unplayable);
    }
  };
  new MutationObserver(() => { rename(); markUnplayable(); })
    .observe(document.body, {childList: true, subtree: true, characterData: true});
}
"""


def launch_options() -> dict:
    """The page's settings for demo.launch: the style and the script above."""
    return {"css": CSS, "js": PAGE_JS}
