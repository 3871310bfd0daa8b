"""The pinned requirement files (`make lock`'s output) read as requirements: each `name==version ; marker` entry
with its `--hash` options, backslash continuations joined."""

from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


def entries(path: Path) -> list[tuple[Requirement, list[str]]]:
    """(requirement, its hashes) per package entry of a lock file."""
    text = path.read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip() if not line.lstrip().startswith("--hash") else line.strip()
        if not line or line.startswith("-"):
            continue
        spec, *options = line.split(" --")
        out.append((Requirement(spec.strip()), [o.split("=", 1)[1] for o in options if o.startswith("hash=")]))
    return out


def pins(path: Path, python: str) -> dict[str, str]:
    """name -> version of the entries whose marker holds on `python` (a Linux x86-64 machine)."""
    env = {"python_version": ".".join(python.split(".")[:2]), "python_full_version": python, "sys_platform": "linux",
           "platform_machine": "x86_64", "platform_system": "Linux", "implementation_name": "cpython",
           "platform_python_implementation": "CPython", "os_name": "posix"}
    out = {}
    for req, _ in entries(path):
        if req.marker is None or req.marker.evaluate(env):
            out[req.name.lower()] = next(s.version for s in req.specifier if s.operator == "==")
    return out


def wanted(path: Path) -> list[Requirement]:
    """A person's `.in` file: its requirements, `-r` includes followed."""
    out = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            out += wanted(path.parent / line[3:].strip())
        elif line:
            out.append(Requirement(line))
    return out
