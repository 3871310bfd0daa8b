"""The Gradio front door: the Blocks (app.py), per-session output folders (outputs.py)."""
