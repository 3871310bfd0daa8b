"""Every task described once (`catalog.py`), and the registry the front doors read (`spec.py`)."""

from . import catalog  # noqa: F401 - registers the built-in tasks
from .spec import Option, TaskSpec, UnknownTask, all_specs, choices, get, names, register, specs, unregister

__all__ = ["Option", "TaskSpec", "UnknownTask", "all_specs", "choices", "get", "names", "register", "specs",
           "unregister"]
