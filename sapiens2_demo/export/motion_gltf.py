"""motion.glb: every person's solved skeleton (pose/skeleton3d.py) as glTF 2.0 nodes with animations.

Per person a node `person_<track id>` holds the joint hierarchy: each joint a node whose rest translation is its
BVH OFFSET, with a small mesh (a sphere at the joint, a rod along each bone it starts) in the 2D skeleton's side
colours, so viewers draw the skeleton. One animation per person (`track_<id>`): a rotation channel per joint and
a translation channel for the root, one keyframe per processed video frame (times in seconds, from the video).
glTF's frame is the skeleton's: Y up, metres, facing +Z. With the world the feet gave (pose/world.py) it also
holds `floor` (a grey disc at Y = 0 under the people, FLOOR_MARGIN beyond the ground they cover) and `camera` (a
small pyramid at the camera's place, pointing where it looks; a turning camera's node turns in every animation).
Written as GLB directly (JSON + one binary buffer).
The scene's `extras.animated_bounds` ({"min", "max"}) is the box the skeletons fill while the first animation
plays: a viewer frames on it (the file's static bounds hold the first frame only; a walk leaves them).
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np

from ..pose.skeleton3d import SolvedMotion, end_positions
from ..util import atomic_write, target

SIDE_COLOURS = {"Left": (0.0, 1.0, 0.0, 1.0), "Right": (1.0, 0.5, 0.0, 1.0), "": (0.2, 0.6, 1.0, 1.0),
                "floor": (0.45, 0.45, 0.45, 1.0), "camera": (0.9, 0.9, 0.2, 1.0)}
FLOOR_MARGIN = 1.0  # metres of floor around the ground the people cover
JOINT_RADIUS, BONE_RADIUS = 0.02, 0.008
FLOAT, UINT32 = 5126, 5125
ARRAY_BUFFER, ELEMENT_ARRAY_BUFFER = 34962, 34963


def quaternions(rotations: np.ndarray) -> np.ndarray:
    """(..., 3, 3) rotation matrices -> (..., 4) unit quaternions x, y, z, w (glTF's order), w >= 0 where
    the largest component allows; call `continuous` for an animation."""
    r = np.asarray(rotations, dtype=np.float64)
    m00, m11, m22 = r[..., 0, 0], r[..., 1, 1], r[..., 2, 2]
    candidates = np.stack([
        np.stack([1 + m00 - m11 - m22, r[..., 0, 1] + r[..., 1, 0], r[..., 0, 2] + r[..., 2, 0],
                  r[..., 2, 1] - r[..., 1, 2]], -1),
        np.stack([r[..., 0, 1] + r[..., 1, 0], 1 - m00 + m11 - m22, r[..., 1, 2] + r[..., 2, 1],
                  r[..., 0, 2] - r[..., 2, 0]], -1),
        np.stack([r[..., 0, 2] + r[..., 2, 0], r[..., 1, 2] + r[..., 2, 1], 1 - m00 - m11 + m22,
                  r[..., 1, 0] - r[..., 0, 1]], -1),
        np.stack([r[..., 2, 1] - r[..., 1, 2], r[..., 0, 2] - r[..., 2, 0], r[..., 1, 0] - r[..., 0, 1],
                  1 + m00 + m11 + m22], -1)], -2)  # (..., 4 choices, 4): each 4 q_k q, best where q_k largest
    best = np.argmax(np.stack([m00 - m11 - m22, m11 - m00 - m22, m22 - m00 - m11, m00 + m11 + m22], -1), -1)
    q = np.take_along_axis(candidates, best[..., None, None], axis=-2)[..., 0, :]
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def continuous(q: np.ndarray) -> np.ndarray:
    """(T, ..., 4) quaternions with signs flipped so consecutive frames are on the same side (q and -q are one
    rotation; players interpolate the shorter way then)."""
    q = q.copy()
    for t in range(1, len(q)):
        flip = (q[t] * q[t - 1]).sum(-1) < 0
        q[t][flip] *= -1
    return q


def _side(name: str) -> str:
    return next((side for side in ("Left", "Right") if name.startswith(side)), "")


def _joint_mesh(segments: list[np.ndarray]):
    """A sphere at the origin and a rod along each segment (joint-local coordinates): vertices, normals, faces."""
    import trimesh

    parts = [trimesh.creation.icosphere(subdivisions=1, radius=JOINT_RADIUS)]
    for segment in segments:
        length = float(np.linalg.norm(segment))
        if length < 1e-6:
            continue
        rod = trimesh.creation.cylinder(radius=BONE_RADIUS, height=length, sections=6)
        rod.apply_translation([0, 0, length / 2])
        rod.apply_transform(trimesh.geometry.align_vectors([0, 0, 1], segment / length))
        parts.append(rod)
    return _arrays(trimesh.util.concatenate(parts))


def _arrays(mesh):
    """A trimesh's vertices, normals and faces as glTF's arrays."""
    vertices, faces = np.asarray(mesh.vertices, np.float64), np.asarray(mesh.faces, np.int64)
    # vertex normals: the area-weighted mean of the faces' (trimesh's own wants scipy, or logs a traceback)
    corners = vertices[faces]
    face_normals = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    normals = np.zeros_like(vertices)
    for k in range(3):
        np.add.at(normals, faces[:, k], face_normals)
    normals /= np.maximum(np.linalg.norm(normals, axis=1, keepdims=True), 1e-12)
    return vertices.astype(np.float32), normals.astype(np.float32), faces.astype(np.uint32).reshape(-1)


class _Buffer:
    """Binary chunk and its bufferViews/accessors."""

    def __init__(self):
        self.data, self.views, self.accessors = bytearray(), [], []

    def add(self, array: np.ndarray, kind: str, target: int | None = None, bounds: bool = False) -> int:
        array = np.ascontiguousarray(array)
        self.data += b"\0" * (-len(self.data) % 4)
        view = {"buffer": 0, "byteOffset": len(self.data), "byteLength": array.nbytes}
        if target is not None:
            view["target"] = target
        self.data += array.tobytes()
        self.views.append(view)
        accessor = {"bufferView": len(self.views) - 1, "componentType": UINT32 if array.dtype == np.uint32 else FLOAT,
                    "count": int(len(array)), "type": kind}
        if bounds:
            flat = array.reshape(len(array), -1)
            accessor["min"], accessor["max"] = flat.min(0).tolist(), flat.max(0).tolist()
        self.accessors.append(accessor)
        return len(self.accessors) - 1


def _primitive(buffer: _Buffer, mesh, material: int) -> dict:
    vertices, normals, faces = mesh
    return {"attributes": {"POSITION": buffer.add(vertices, "VEC3", ARRAY_BUFFER, bounds=True),
                           "NORMAL": buffer.add(normals, "VEC3", ARRAY_BUFFER)},
            "indices": buffer.add(faces, "SCALAR", ELEMENT_ARRAY_BUFFER), "material": material}


def _world_nodes(buffer: _Buffer, people, world, material_of: dict, first_mesh: int) -> tuple[list, list]:
    """(nodes, meshes): the floor disc under the people and the camera's pyramid (see the module docstring)."""
    import trimesh

    ground = np.concatenate([m.positions.reshape(-1, 3) for _, m in people])[:, [0, 2]]
    ground = ground[np.isfinite(ground).all(1)]
    centre = (ground.min(0) + ground.max(0)) / 2
    radius = float(np.linalg.norm(ground.max(0) - ground.min(0)) / 2 + FLOOR_MARGIN)
    disc = trimesh.creation.cylinder(radius=radius, height=0.002, sections=48)
    disc.apply_transform(trimesh.transformations.rotation_matrix(np.pi / 2, [1, 0, 0]))
    disc.apply_translation([centre[0], -0.001, centre[1]])
    pyramid = trimesh.creation.cone(radius=0.08, height=0.15, sections=4)
    pyramid.apply_translation([0, 0, -0.15])
    pyramid.apply_transform(trimesh.transformations.rotation_matrix(np.pi, [1, 0, 0]))  # apex at the camera
    meshes = [{"name": "floor", "primitives": [_primitive(buffer, _arrays(disc), material_of["floor"])]},
              {"name": "camera", "primitives": [_primitive(buffer, _arrays(pyramid), material_of["camera"])]}]
    # the node turned as the camera is (its axes x right, y down, z forward in the world: the rotation's columns)
    nodes = [{"name": "floor", "mesh": first_mesh},
             {"name": "camera", "mesh": first_mesh + 1, "translation": world.camera_position.astype(float).tolist(),
              "rotation": quaternions(world.rotation).astype(float).tolist()}]
    return nodes, meshes


def glb_bytes(people: list[tuple[int, SolvedMotion]], times: np.ndarray, world=None) -> bytes:
    """The GLB for (track id, motion) pairs sharing the video's frame `times` (seconds); `world` (pose/world.py)
    adds the floor and the camera."""
    times = np.asarray(times, np.float32)
    if not people or len(times) == 0:
        raise ValueError("no motion to write")
    buffer = _Buffer()
    materials = [{"name": side or "centre", "pbrMetallicRoughness": {"baseColorFactor": list(colour),
                                                                      "metallicFactor": 0.0}}
                 for side, colour in SIDE_COLOURS.items()]
    material_of = {side: i for i, side in enumerate(SIDE_COLOURS)}
    nodes, meshes, animations, roots = [], [], [], []
    time_accessor = buffer.add((times - times[0])[:, None], "SCALAR", bounds=True)
    for track_id, motion in people:
        if len(motion.local) != len(times):
            raise ValueError(f"{len(motion.local)} frames of motion for {len(times)} frame times")
        first = len(nodes)
        children = [[] for _ in motion.names]
        for i, parent in enumerate(motion.parents):
            if parent >= 0:
                children[parent].append(i)
        rotations = continuous(quaternions(motion.local)).astype(np.float32)  # (T, J, 4)
        channels, samplers = [], []
        for i, name in enumerate(motion.names):
            segments = [motion.offsets[c] for c in children[i]] + ([motion.ends[i]] if motion.ends[i] is not None else [])
            vertices, normals, faces = _joint_mesh(segments)
            primitive = {"attributes": {"POSITION": buffer.add(vertices, "VEC3", ARRAY_BUFFER, bounds=True),
                                        "NORMAL": buffer.add(normals, "VEC3", ARRAY_BUFFER)},
                         "indices": buffer.add(faces, "SCALAR", ELEMENT_ARRAY_BUFFER),
                         "material": material_of[_side(name)]}
            meshes.append({"name": name, "primitives": [primitive]})
            node = {"name": f"{name}_{track_id}", "mesh": len(meshes) - 1,
                    "translation": (motion.root[0] if i == 0 else motion.offsets[i]).astype(float).tolist(),
                    "rotation": rotations[0, i].astype(float).tolist()}
            if children[i]:
                node["children"] = [first + c for c in children[i]]
            nodes.append(node)
            samplers.append({"input": time_accessor, "output": buffer.add(rotations[:, i], "VEC4"),
                             "interpolation": "LINEAR"})
            channels.append({"sampler": len(samplers) - 1, "target": {"node": first + i, "path": "rotation"}})
        samplers.append({"input": time_accessor, "output": buffer.add(motion.root.astype(np.float32), "VEC3"),
                         "interpolation": "LINEAR"})
        channels.append({"sampler": len(samplers) - 1, "target": {"node": first, "path": "translation"}})
        animations.append({"name": f"track_{track_id}", "channels": channels, "samplers": samplers})
        nodes.append({"name": f"person_{track_id}", "children": [first]})
        roots.append(len(nodes) - 1)
    if world is not None:
        extra_nodes, extra_meshes = _world_nodes(buffer, people, world, material_of, len(meshes))
        if world.turns is not None:  # a turning camera: its node turns in every person's animation
            turned = buffer.add(continuous(quaternions(world.camera_rotations(len(times)))).astype(np.float32), "VEC4")
            for animation in animations:
                animation["samplers"].append({"input": time_accessor, "output": turned, "interpolation": "LINEAR"})
                animation["channels"].append({"sampler": len(animation["samplers"]) - 1,
                                              "target": {"node": len(nodes) + 1, "path": "rotation"}})
        meshes += extra_meshes
        roots += list(range(len(nodes), len(nodes) + len(extra_nodes)))
        nodes += extra_nodes
    buffer.data += b"\0" * (-len(buffer.data) % 4)
    document = {"asset": {"version": "2.0", "generator": "sapiens2_demo"}, "scene": 0,
                "scenes": [{"nodes": roots, "extras": {"animated_bounds": animated_bounds(people)}}],
                "nodes": nodes, "meshes": meshes, "materials": materials,
                "animations": animations, "accessors": buffer.accessors, "bufferViews": buffer.views,
                "buffers": [{"byteLength": len(buffer.data)}]}
    text = json.dumps(document, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 4)
    total = 12 + 8 + len(text) + 8 + len(buffer.data)
    return (struct.pack("<III", 0x46546C67, 2, total) + struct.pack("<II", len(text), 0x4E4F534A) + text
            + struct.pack("<II", len(buffer.data), 0x004E4942) + bytes(buffer.data))


def animated_bounds(people: list[tuple[int, SolvedMotion]]) -> dict:
    """The box the skeletons fill while the first animation plays (a viewer plays the first: gradio's does): the
    first person at every frame, the others where their first frame puts them; joints and end sites, with the
    joint spheres' radius around them."""
    points = []
    for k, (_, motion) in enumerate(people):
        frames = slice(None) if k == 0 else slice(0, 1)
        points += [motion.positions[frames].reshape(-1, 3), *(end[frames] for end in end_positions(motion).values())]
    points = np.concatenate(points)
    points = points[np.isfinite(points).all(axis=1)]
    return {"min": (points.min(0) - JOINT_RADIUS).tolist(), "max": (points.max(0) + JOINT_RADIUS).tolist()}


def read_animated_bounds(path: str | os.PathLike) -> np.ndarray | None:
    """(2, 3) min and max: the `animated_bounds` a .glb's scene carries (written by glb_bytes), else None."""
    try:
        with open(path, "rb") as file:
            magic, _, _, length, kind = struct.unpack("<IIIII", file.read(20))
            if magic != 0x46546C67 or kind != 0x4E4F534A:  # "glTF", then the JSON chunk
                return None
            document = json.loads(file.read(length))
        box = document["scenes"][document.get("scene", 0)]["extras"]["animated_bounds"]
        bounds = np.array([box["min"], box["max"]], dtype=float)
    except (OSError, ValueError, KeyError, IndexError, TypeError, struct.error):
        return None
    return bounds if bounds.shape == (2, 3) and np.isfinite(bounds).all() else None


def write_motion_glb(people: list[tuple[int, SolvedMotion]], times, folder, world=None,
                     name: str = "motion.glb") -> Path:
    data, path = glb_bytes(people, times, world), target(folder, name)
    with atomic_write(path) as partial:  # a reader never sees a half-written file
        partial.write_bytes(data)
    return path
