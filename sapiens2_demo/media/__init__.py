"""Reading media: images (image.py) and videos (video.py)."""
