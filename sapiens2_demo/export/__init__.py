"""Downloadable files: per-image writers (image.py), point clouds (pointcloud.py)."""
