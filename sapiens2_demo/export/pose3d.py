"""Files for the lifted (3D) pose: a JSON document and a skeleton .glb for 3D viewers.

pose_3d.json:
    {"units": "metres", "camera": "...", "num_keypoints": K, "keypoint_names": [...],
     "keypoint_fields": ["x", "y", "z", "score"],
     "people": [{"track_id": int (only on tracked video; -1 = not yet tracked), "keypoints": K x [x, y, z, score]}]}
x, y, z are in the camera frame of the input image (x right, y down, z forward, OpenCV; metres) and are
null where the keypoint could not be lifted (JSON has no NaN); score is the 2D keypoint score (null if not
finite). Values are rounded to 0.01 mm / 1e-5.

pose_3d.json's "floor" is the floor the pointmap shows beside the feet (pose/floor_pixels.py): {"up": [x, y, z] its
normal in the camera frame, "offset": metres, the plane up . p + offset = 0}, or null where none was seen.

pose_3d.glb: a sphere per available joint and a cylinder per bone whose two ends are available, in the
keypoint and link colours of the 2D skeleton, in the glTF frame (x, -y, -z: y up, the viewer on +z), and a grey
floor disc under the people. With a floor seen the scene is turned upright on it (its up along +Y, the camera's
tilt and roll taken out); without, the disc lies under the lowest foot, level with the camera, and the notes say so.
Only the linked joints (body, feet, hands; the face has no links) are drawn, to keep the file light.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..pose.lift import Pose3DResult
from ..pose.meta import FACE_START, keypoint_meta
from ..util import atomic_write, target
from .bounds import remember
from .image import NothingToExport
from .pointcloud import to_gltf_frame

CAMERA_FRAME = "camera frame of the input image: x right, y down, z forward (OpenCV); origin at the camera centre"
JOINT_RADIUS = 0.015  # metres
BONE_RADIUS = 0.006
BONE_SECTIONS = 8
DECIMALS = 5
FALLBACK_COLOUR = (200, 200, 200)  # bones that are not links of the 2D skeleton
FLOOR_COLOUR, FLOOR_MARGIN = (115, 115, 115, 255), 0.3  # the disc's grey, metres beyond the joints it lies under


def pose3d_document(result: Pose3DResult, keypoint_names: list[str]) -> dict:
    """JSON-ready dict (see the module docstring)."""
    people, count = result.available.shape
    if len(keypoint_names) != count:
        raise ValueError(f"{len(keypoint_names)} keypoint names for {count} keypoints")
    values = np.concatenate([np.asarray(result.points, np.float64), np.asarray(result.scores, np.float64)[..., None]],
                            axis=2).round(DECIMALS).astype(object)  # object: Python floats that can become None
    values[..., :3][~np.asarray(result.available, bool)] = None
    values[..., 3][~np.isfinite(np.asarray(result.scores, np.float64))] = None
    persons = []
    for person in range(people):
        entry = {}
        if result.track_ids is not None:
            entry["track_id"] = int(result.track_ids[person])
        entry["keypoints"] = values[person].tolist()
        persons.append(entry)
    floor = photo_floor(result)
    return {"units": "metres", "camera": CAMERA_FRAME, "num_keypoints": int(count),
            "keypoint_names": list(keypoint_names), "keypoint_fields": ["x", "y", "z", "score"], "people": persons,
            "floor": None if floor is None else {"up": np.round(floor[0], DECIMALS).tolist(),
                                                 "offset": round(float(floor[1]), DECIMALS)}}


def photo_floor(result: Pose3DResult) -> tuple[np.ndarray, float] | None:
    """The floor the result's floor pixels show under its lifted feet (pose/floor_pixels.py), or None."""
    from ..pose.floor_pixels import FEET
    from ..pose.floor_pixels import photo_floor as floor_of
    from ..pose.meta import name_index

    if getattr(result, "floor", None) is None or not result.num_people:
        return None
    index = name_index()
    columns = [index[k] for k in FEET if index[k] < result.points.shape[1]]
    feet = np.where(np.asarray(result.available)[:, columns, None], np.asarray(result.points)[:, columns], np.nan)
    return floor_of(result.floor, feet.reshape(-1, 3))


def _write_atomically(path: Path, data: bytes) -> Path:
    with atomic_write(path) as partial:  # a reader never sees a half-written file
        partial.write_bytes(data)
    return path


def write_pose3d_json(result: Pose3DResult, folder, keypoint_names: list[str], name: str = "pose_3d.json") -> Path:
    text = json.dumps(pose3d_document(result, keypoint_names), allow_nan=False, separators=(",", ":"))
    return _write_atomically(target(folder, name), text.encode())


def skeleton_bones() -> list[tuple[int, int]]:
    """The 2D skeleton's links without face points (today that is all of them: the face has no links)."""
    return [(int(a), int(b)) for a, b in keypoint_meta()["skeleton_links"] if a < FACE_START and b < FACE_START]


def _rgba(colours, count: int) -> np.ndarray:
    colours = np.asarray(colours, dtype=np.uint8).reshape(count, -1)[:, :3]
    return np.concatenate([colours, np.full((count, 1), 255, np.uint8)], axis=1)


def _instances(template, origins: np.ndarray, axes: np.ndarray, colours: np.ndarray):
    """One copy of `template` (vertices, faces) per instance: v -> origin + v @ axes (rows = the instance's
    x, y, z axes), vertex-coloured; returns (vertices, faces, colours) for all instances stacked."""
    vertices, faces = template
    moved = origins[:, None, :] + np.einsum("vj,njk->nvk", vertices, axes)
    shift = (np.arange(len(origins)) * len(vertices))[:, None, None]
    return (moved.reshape(-1, 3), (faces[None] + shift).reshape(-1, 3),
            np.repeat(colours, len(vertices), axis=0))


def _bone_axes(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """(B, 3, 3) right-handed frames, z along the bone scaled to its length, x and y scaled to the radius."""
    along = ends - starts
    length = np.linalg.norm(along, axis=1, keepdims=True)
    w = along / length
    helper = np.where(np.abs(w[:, :1]) < 0.9, [[1.0, 0.0, 0.0]], [[0.0, 1.0, 0.0]])  # any vector not along w
    u = np.cross(helper, w)
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    v = np.cross(w, u)  # u x v = w: a rotation, so the template's winding (outward faces) is kept
    return np.stack([u * BONE_RADIUS, v * BONE_RADIUS, w * length], axis=1)


def skeleton_mesh(result: Pose3DResult, bones: list[tuple[int, int]] | None = None,
                  bone_colours=None, joint_colours=None):
    """A vertex-coloured trimesh.Trimesh in the glTF frame, or None when no joint of `bones` is available.

    `bones` default to skeleton_bones(); `bone_colours` (RGB per bone) and `joint_colours` (RGB per keypoint)
    to the 2D skeleton's link and keypoint colours."""
    import trimesh

    meta = keypoint_meta()
    bones = np.asarray(skeleton_bones() if bones is None else bones, dtype=np.int64).reshape(-1, 2)
    if bone_colours is None:  # each bone in its 2D link's colour (either direction), grey if not a 2D link
        link_colour = {tuple(map(int, link)): colour
                       for link, colour in zip(meta["skeleton_links"], meta["skeleton_link_colors"], strict=True)}
        bone_colours = [link_colour.get((a, b), link_colour.get((b, a), FALLBACK_COLOUR)) for a, b in bones.tolist()]
    bone_rgba = _rgba(bone_colours, len(bones))
    count = result.available.shape[1]
    joint_rgba = _rgba(joint_colours if joint_colours is not None else meta["keypoint_colors"][:count], count)

    joints = np.unique(bones)
    joints = joints[joints < count]
    bones_ok = (bones < count).all(axis=1)
    bones, bone_rgba = bones[bones_ok], bone_rgba[bones_ok]
    points = np.asarray(result.points, dtype=np.float64)
    available = np.asarray(result.available, dtype=bool) & np.isfinite(points).all(axis=2)

    person, joint = np.nonzero(available[:, joints])
    if person.size == 0:
        return None
    sphere = trimesh.creation.icosphere(subdivisions=1, radius=1.0)
    sphere_axes = np.broadcast_to(np.eye(3) * JOINT_RADIUS, (person.size, 3, 3))
    parts = [_instances((sphere.vertices, sphere.faces), points[person, joints[joint]], sphere_axes,
                        joint_rgba[joints[joint]])]

    person, bone = np.nonzero(available[:, bones[:, 0]] & available[:, bones[:, 1]])
    starts, ends = points[person, bones[bone, 0]], points[person, bones[bone, 1]]
    long_enough = np.linalg.norm(ends - starts, axis=1) > 1e-6  # a zero-length bone has no direction
    if long_enough.any():
        cylinder = trimesh.creation.cylinder(radius=1.0, height=1.0, sections=BONE_SECTIONS)
        template = (cylinder.vertices + [0.0, 0.0, 0.5], cylinder.faces)  # z from 0 (start) to 1 (end)
        parts.append(_instances(template, starts[long_enough], _bone_axes(starts[long_enough], ends[long_enough]),
                                bone_rgba[bone[long_enough]]))

    offsets = np.cumsum([0] + [len(v) for v, _, _ in parts[:-1]])
    vertices = np.concatenate([v for v, _, _ in parts])
    faces = np.concatenate([f + o for (_, f, _), o in zip(parts, offsets, strict=True)])
    colours = np.concatenate([c for _, _, c in parts])
    # The camera -> glTF flip is a rotation (180 degrees about x): windings stay outward.
    return trimesh.Trimesh(vertices=to_gltf_frame(vertices.astype(np.float32)), faces=faces,
                           vertex_colors=colours, process=False)


def no_skeleton_note(placed: int) -> str:
    """Why there is no pose_3d.glb, in words that agree with the count of placed keypoints beside it in the notes
    (a 4000x60 picture placed 2 face points: "no body keypoint could be placed" then read as a contradiction)."""
    if not placed:
        return "No keypoint could be placed in 3D, so there is no 3D skeleton to save."
    which = "the one keypoint placed in 3D is not" if placed == 1 else f"none of the {placed} keypoints placed in 3D is"
    return (f"No 3D skeleton to save: {which} one of its joints (face points and points between joints have no "
            "bones); pose_3d.json has the placed points.")


def _levelling(up: np.ndarray) -> np.ndarray:
    """(3, 3) the least rotation taking `up` (camera frame) to the camera's own up, (0, -1, 0) (Rodrigues)."""
    target_up = np.array([0.0, -1.0, 0.0])
    axis, cos = np.cross(up, target_up), float(up @ target_up)
    if np.linalg.norm(axis) < 1e-9:
        return np.eye(3)
    skew = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + skew + skew @ skew / (1 + cos)


def floor_disc(result: Pose3DResult):
    """(levelling (3, 3) for the camera frame, the disc (trimesh) in the glTF frame, a note or "") of a result
    with a joint placed (see the module docstring)."""
    import trimesh

    points = np.asarray(result.points, np.float64)[np.asarray(result.available, bool)]
    points = points[np.isfinite(points).all(1)]
    floor = photo_floor(result)
    if floor is not None:
        levelling, height = _levelling(floor[0]), float(floor[1])  # the levelled camera's floor: y = offset
        pitch = float(np.degrees(np.arcsin(np.clip(-floor[0][2], -1, 1))))
        note = (f"pose_3d.glb: the floor read from {len(result.floor)} pointmap pixels beside the feet, the skeleton "
                f"turned upright on it (the camera {abs(pitch):.0f} degrees {'down' if pitch >= 0 else 'up'}, "
                f"{abs(floor[1]):.1f} m above it).")
    else:
        levelling, height = np.eye(3), float(points[:, 1].max())  # the lowest joint (y is down)
        note = ("pose_3d.glb: no floor seen beside the feet (no background there that the segmentation kept lies on "
                "one plane under them): the disc lies under the lowest joint, level with the camera, not upright on a "
                "floor.")
    levelled = points @ levelling.T
    centre = levelled[:, [0, 2]].mean(0)
    radius = float(np.linalg.norm(levelled[:, [0, 2]] - centre, axis=1).max()) + FLOOR_MARGIN
    disc = trimesh.creation.cylinder(radius=radius, height=0.002, sections=48)
    disc.apply_transform(trimesh.transformations.rotation_matrix(np.pi / 2, [1, 0, 0]))  # its axis along Y
    disc.apply_translation([centre[0], -height - 0.001, -centre[1]])  # the glTF frame: (x, -y, -z)
    disc.visual.vertex_colors = np.tile(FLOOR_COLOUR, (len(disc.vertices), 1))
    return levelling, disc, note


def write_skeleton_glb(result: Pose3DResult, folder, bones: list[tuple[int, int]] | None = None,
                       name: str = "pose_3d.glb", notes: list[str] | None = None) -> Path:
    """The skeleton and its floor (see the module docstring); the floor's note appended to `notes` when given."""
    import trimesh

    mesh = skeleton_mesh(result, bones)
    if mesh is None:
        raise NothingToExport(no_skeleton_note(int(np.asarray(result.available).sum())))
    levelling, disc, note = floor_disc(result)
    flip = np.diag([1.0, -1.0, -1.0])  # the camera frame <-> the glTF frame
    mesh.vertices = (np.asarray(mesh.vertices) @ (flip @ levelling @ flip).T).astype(np.float32)
    scene = trimesh.Scene({"skeleton": mesh, "floor": disc})
    path = _write_atomically(target(folder, name), scene.export(file_type="glb"))
    if notes is not None:
        notes.append(note)
    return remember(path, scene.bounds)  # the 3D viewer frames it from these (export/bounds.py)
