"""Batch-first task pipelines: RGB frames in, one typed result per frame out."""
