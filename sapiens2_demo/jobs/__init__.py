"""Requests and jobs: an image request, a video job, a live frame (source -> executor -> render/export -> sink)."""
