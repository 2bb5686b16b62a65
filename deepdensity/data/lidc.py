"""LIDC-IDRI's own XML readings -> nodule centres and diameters, the way LUNA16 derived
its annotations.csv (nodules >= 3 mm accepted by at least 3 of the 4 radiologists).

The XML (one file per series, root LidcReadMessage, namespace http://www.nih.gov) holds a
readingSession per radiologist; in each, one unblindedReadNodule per nodule the reader
marked, with one roi per slice: imageZposition, imageSOP_UID, inclusion, and the outline as
edgeMap points (xCoord = column, yCoord = row, pixels of that slice). A nodule under 3 mm is
marked by one point, so its diameter here is 0.

From marks to nodules (docs/data.md, "LIDC-IDRI's readings"):
- a roi is placed on the slice its imageSOP_UID names, or, when that UID is not in the
  series, on the slice at its imageZposition (within half a slice spacing); else it is
  dropped, and a mark with no roi left is dropped, each with a note;
- a reader's mark: the included outline points in world mm; centre = the midpoint of their
  bounding box; diameter = the longest distance between two points of one slice's outline
  (the longest axial diameter, as radiologists measure it);
- marks of at least `min_diameter_mm` are grouped across readers: two marks are the same
  nodule when their centres are closer than the larger of their radii (single linkage);
- a group marked by at least `min_readers` different readers is a nodule: centre and
  diameter are the means over its marks.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from deepdensity.data.cubes import DataError

NAMESPACE = "http://www.nih.gov"


@dataclass
class Roi:
    sop_uid: str
    z_mm: float
    points_ij: np.ndarray  # (n, 2) column, row


@dataclass
class Mark:
    reader: int  # index of the readingSession in its file
    nodule_id: str
    rois: list


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _children(node, name: str) -> list:
    return [c for c in node if _local(c.tag) == name]


def _text(node, name: str) -> Optional[str]:
    found = _children(node, name)
    return found[0].text.strip() if found and found[0].text else None


def read_xml(path) -> tuple:
    """(series_uid, [Mark, ...]) from one LIDC XML file; (None, []) for a file that is not
    a CT reading (LIDC's chest radiograph files use another root). DataError if damaged."""
    path = Path(path)
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        raise DataError(f"{path}: not well-formed XML ({e}); download the file again") from None
    except OSError as e:
        raise DataError(f"{path}: cannot be read ({e.strerror})") from None
    if _local(root.tag) != "LidcReadMessage":
        return None, []
    header = _children(root, "ResponseHeader")
    uid = _text(header[0], "SeriesInstanceUid") if header else None
    if not uid:
        raise DataError(f"{path}: LIDC XML without ResponseHeader/SeriesInstanceUid; it cannot be matched to a series")
    marks = []
    for reader, session in enumerate(_children(root, "readingSession")):
        for nodule in _children(session, "unblindedReadNodule"):
            rois = []
            for roi in _children(nodule, "roi"):
                if (_text(roi, "inclusion") or "TRUE").upper() != "TRUE":
                    continue  # an excluded region inside the outline
                try:
                    z = float(_text(roi, "imageZposition"))
                    pts = [(float(_text(e, "xCoord")), float(_text(e, "yCoord"))) for e in _children(roi, "edgeMap")]
                except (TypeError, ValueError):
                    raise DataError(
                        f"{path}: a roi of nodule {_text(nodule, 'noduleID')!r} (reader "
                        f"{reader + 1}) has a missing or non-numeric imageZposition, xCoord or "
                        f"yCoord"
                    ) from None
                if pts:
                    rois.append(Roi(_text(roi, "imageSOP_UID") or "", z, np.array(pts)))
            marks.append(Mark(reader, _text(nodule, "noduleID") or "?", rois))
    return uid, marks


def read_folder(folder) -> tuple:
    """({series_uid: [Mark, ...]}, notes) from every .xml file under `folder`."""
    readings, notes = defaultdict(list), []
    for root, _, files in os.walk(folder):
        for name in sorted(files):
            if not name.lower().endswith(".xml"):
                continue
            uid, marks = read_xml(Path(root) / name)
            if uid is None:
                notes.append(f"{Path(root) / name}: not a CT reading (no LidcReadMessage)")
                continue
            readings[uid] += marks
    return dict(readings), notes


def mark_geometry(mark: Mark, vol) -> tuple:
    """(centre_xyz or None, diameter_mm, notes): the mark placed in the world through `vol`
    (an ingest.geometry.Volume with `slice_uids`)."""
    by_uid = {u: k for k, u in enumerate(vol.slice_uids)}
    # imageZposition is the world z of the slice (LIDC's CT scans are axial)
    slice_z = vol.index_to_world(np.column_stack([np.zeros((vol.hu.shape[0], 2)), np.arange(vol.hu.shape[0])]))[:, 2]
    points, longest, notes = [], 0.0, []
    for roi in mark.rois:
        k = by_uid.get(roi.sop_uid)
        if k is None:  # not in the series: try its z position
            nearest = int(np.argmin(np.abs(slice_z - roi.z_mm)))
            if abs(slice_z[nearest] - roi.z_mm) <= vol.spacing[2] / 2:
                k = nearest
            else:
                notes.append(
                    f"reader {mark.reader + 1}, nodule {mark.nodule_id}: roi at z {roi.z_mm:g} mm "
                    f"is on no slice of the series; dropped"
                )
                continue
        ijk = np.column_stack([roi.points_ij, np.full(len(roi.points_ij), k)])
        xyz = vol.index_to_world(ijk)
        points.append(xyz)
        if len(xyz) > 1:
            longest = max(longest, float(np.max(np.linalg.norm(xyz[:, None] - xyz[None], axis=-1))))
    if not points:
        return (
            None,
            0.0,
            notes
            + (
                [f"reader {mark.reader + 1}, nodule {mark.nodule_id}: no roi on this series; mark dropped"]
                if mark.rois
                else []
            ),
        )
    allp = np.concatenate(points)
    return (allp.min(axis=0) + allp.max(axis=0)) / 2, longest, notes


def group_marks(marks: list, min_readers: int = 3, min_diameter_mm: float = 3.0) -> list:
    """[(centre_xyz, diameter_mm, readers)] of the nodules: marks given as (reader, centre,
    diameter), those of at least `min_diameter_mm` grouped by single linkage (centres closer
    than the larger radius), groups of at least `min_readers` different readers kept."""
    if min_readers < 1:
        raise DataError(f"--min-readers must be >= 1, got {min_readers}")
    return [g for g in _groups(marks, min_diameter_mm) if g[2] >= min_readers]


def _groups(marks: list, min_diameter_mm: float) -> list:
    """Every group of marks (see group_marks) as (mean centre, mean diameter, readers)."""
    big = [(r, np.asarray(c, float), d) for r, c, d in marks if d >= min_diameter_mm]
    parent = list(range(len(big)))

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for a in range(len(big)):
        for b in range(a + 1, len(big)):
            if np.linalg.norm(big[a][1] - big[b][1]) < max(big[a][2], big[b][2]) / 2:
                parent[find(a)] = find(b)
    groups = defaultdict(list)
    for a in range(len(big)):
        groups[find(a)].append(big[a])
    found = [
        (
            np.mean([c for _, c, _ in members], axis=0),
            float(np.mean([d for _, _, d in members])),
            len({r for r, _, _ in members}),
        )
        for members in groups.values()
    ]
    return sorted(found, key=lambda n: tuple(n[0]))


def nodules_of_volume(marks: list, vol, min_readers: int = 3, min_diameter_mm: float = 3.0) -> tuple:
    """([(centre_xyz, diameter_mm)], notes) for one series from its readers' marks."""
    placed, notes = [], []
    for mark in marks:
        centre, diameter, why = mark_geometry(mark, vol)
        notes += why
        if centre is not None:
            placed.append((mark.reader, centre, diameter))
    groups = _groups(placed, min_diameter_mm)
    nodules = [g for g in groups if g[2] >= min_readers]
    small = sum(d < min_diameter_mm for _, _, d in placed)
    if small:
        notes.append(f"{small} mark(s) under {min_diameter_mm:g} mm not counted (LUNA16's rule)")
    if len(groups) > len(nodules):
        notes.append(f"{len(groups) - len(nodules)} nodule(s) marked by fewer than {min_readers} readers not kept")
    return [(c, d) for c, d, _ in nodules], notes


# --------------------------------------------------------------------------------------
# Writing (synthetic readings for the tests and `synth-scans`)
# --------------------------------------------------------------------------------------
def write_xml(path, series_uid: str, readers: list, vol, z_of_slice=None) -> None:
    """An LIDC XML file: `readers` is one list per radiologist of (centre_ijk, diameter_mm)
    marks; each becomes a circular outline on every slice the sphere cuts (one point when
    the diameter is under 3 mm, as LIDC's readers mark small nodules). `z_of_slice(k)`
    gives imageZposition (default: the slice's world z)."""
    ET.register_namespace("", NAMESPACE)
    q = lambda name: f"{{{NAMESPACE}}}{name}"  # noqa: E731
    root = ET.Element(q("LidcReadMessage"))
    header = ET.SubElement(root, q("ResponseHeader"))
    ET.SubElement(header, q("SeriesInstanceUid")).text = series_uid
    px = vol.spacing[0]
    for r, marks in enumerate(readers):
        session = ET.SubElement(root, q("readingSession"))
        ET.SubElement(session, q("servicingRadiologistID")).text = f"reader-{r}"
        for n, (c, d) in enumerate(marks):
            nod = ET.SubElement(session, q("unblindedReadNodule"))
            ET.SubElement(nod, q("noduleID")).text = f"Nodule {n:03d}"
            c = np.asarray(c, float)
            if d < 3.0:
                slices = [(int(round(c[2])), [(c[0], c[1])])]
            else:
                slices = []
                for k in range(vol.hu.shape[0]):
                    dz = (k - c[2]) * vol.spacing[2]
                    r_mm = np.sqrt(max((d / 2) ** 2 - dz**2, 0.0))
                    if r_mm < px:
                        continue
                    t = np.linspace(0, 2 * np.pi, 24, endpoint=False)
                    slices.append((k, list(zip(c[0] + r_mm / px * np.cos(t), c[1] + r_mm / px * np.sin(t)))))
            for k, pts in slices:
                roi = ET.SubElement(nod, q("roi"))
                z = z_of_slice(k) if z_of_slice else float(vol.index_to_world([0, 0, k])[2])
                ET.SubElement(roi, q("imageZposition")).text = f"{z:.3f}"
                ET.SubElement(roi, q("imageSOP_UID")).text = vol.slice_uids[k] if 0 <= k < len(vol.slice_uids) else "0"
                ET.SubElement(roi, q("inclusion")).text = "TRUE"
                for x, y in pts:
                    edge = ET.SubElement(roi, q("edgeMap"))
                    ET.SubElement(edge, q("xCoord")).text = str(int(round(x)))
                    ET.SubElement(edge, q("yCoord")).text = str(int(round(y)))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, xml_declaration=True, encoding="UTF-8")
