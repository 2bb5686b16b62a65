"""`python -m deepdensity.data` (or `deepdensity data`): make the cubes a run trains on.

    python -m deepdensity.data synth --out data/synth.h5 --n 2100 --seed 0
    python -m deepdensity.data prepare --luna DIR --annotations annotations.csv --out data/luna.h5
    python -m deepdensity.data prepare --dicom DIR --annotations nodules.csv --out data/lidc.h5
    python -m deepdensity.data prepare --nifti DIR --annotations nodules.csv --out data/ct.h5
    python -m deepdensity.data synth-scans --out data/scans --n 3 [--format mhd|nifti]

The file layout is described in deepdensity/data/cubes.py.
"""

from __future__ import annotations

import argparse
import sys

from deepdensity.data.cubes import HU_WINDOW, DataError
from deepdensity.data.ingest.pipeline import prepare
from deepdensity.data.ingest.synthetic_scans import synth_scans
from deepdensity.data.synth import write_synthetic
from deepdensity.utils.args import HelpFormatter, parser
from deepdensity.utils.errors import command
from deepdensity.utils.files import check_output
from deepdensity.utils.machine import check_fits_in_memory


def _parser() -> argparse.ArgumentParser:
    ap = parser(__doc__, "python -m deepdensity.data")
    sub = ap.add_subparsers(dest="cmd", required=True)
    _add_synth(sub)
    _add_prepare(sub)
    _add_synth_scans(sub)
    return ap


def _add_synth(sub) -> None:
    s = sub.add_parser("synth", formatter_class=HelpFormatter, help="write synthetic LUNA-like nodule cubes to HDF5")
    s.add_argument("--out", required=True, help="output .h5 path")
    s.add_argument("--n", type=int, default=2100, help="number of cubes (paper: 2100 nodules)")
    s.add_argument("--val", type=int, default=256, help="validation cubes (paper: 256)")
    s.add_argument("--seed", type=int, default=0, help="cube i depends only on (seed, i)")
    s.add_argument("--cube", type=int, default=16, help="cube edge in voxels")
    s.add_argument("--spacing", type=float, default=1.0, help="voxel spacing, mm")
    s.add_argument("--force", action="store_true", help="replace --out if it exists")


def _add_prepare(sub) -> None:
    pr = sub.add_parser(
        "prepare", formatter_class=HelpFormatter, help="cut nodule cubes from DICOM series, LUNA16 or NIfTI volumes"
    )
    src = pr.add_mutually_exclusive_group(required=True)
    src.add_argument("--dicom", help="folder of DICOM files (any names, any order, mixed series)")
    src.add_argument("--luna", help="folder of LUNA16 .mhd/.raw volumes")
    src.add_argument(
        "--nifti",
        help="folder of NIfTI volumes (.nii, .nii.gz) in HU; the annotations' seriesuid is "
        "the file name, coordinates in ITK's world frame (LPS) as for LUNA16",
    )
    pr.add_argument("--annotations", help="CSV: seriesuid,coordX,coordY,coordZ,diameter_mm (LUNA16's)")
    pr.add_argument(
        "--lidc-xml",
        action="store_true",
        help="nodules from LIDC-IDRI's XML readings next to the --dicom series instead of a CSV",
    )
    pr.add_argument(
        "--min-readers",
        type=int,
        default=3,
        help="with --lidc-xml: keep nodules >= 3 mm marked by at least this many readers (LUNA16: 3)",
    )
    pr.add_argument("--out", required=True, help="output .h5 path")
    pr.add_argument("--cube", type=int, default=16, help="cube edge in voxels")
    pr.add_argument("--spacing", type=float, default=1.0, help="isotropic voxel spacing of the cubes, mm")
    pr.add_argument("--val", type=int, default=256, help="validation cubes, whole scans at a time")
    pr.add_argument("--seed", type=int, default=0, help="seeds which scans go to validation")
    pr.add_argument(
        "--window",
        type=float,
        nargs=2,
        default=list(HU_WINDOW),
        metavar=("LO", "HI"),
        help="HU window mapped to [0, 1]",
    )
    pr.add_argument("--force", action="store_true", help="replace --out if it exists")
    pr.add_argument(
        "--assume-hu",
        action="store_true",
        help="read DICOM slices without RescaleSlope/RescaleIntercept as HU already (else skipped)",
    )


def _add_synth_scans(sub) -> None:
    sd = sub.add_parser(
        "synth-scans",
        formatter_class=HelpFormatter,
        help="write synthetic CT scans (DICOM, .mhd or .nii.gz) and annotations.csv",
    )
    sd.add_argument("--out", required=True, help="output folder")
    sd.add_argument("--n", type=int, default=3, help="number of scans")
    sd.add_argument("--seed", type=int, default=0, help="seeds the scans' anatomy and nodules")
    sd.add_argument(
        "--format",
        choices=("dicom", "mhd", "nifti"),
        default="dicom",
        help="DICOM series (with LIDC-style readings), LUNA16's MetaImage or NIfTI",
    )


@command
def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.cmd in ("synth", "prepare"):  # a data set runs were trained on is never replaced silently
        check_output(args.out, [getattr(args, "annotations", None)], args.force, suffix=".h5")
    try:
        if args.cmd == "prepare":
            summary = prepare(
                args.out,
                args.annotations,
                dicom=args.dicom,
                luna=args.luna,
                nifti=args.nifti,
                cube=args.cube,
                spacing_mm=args.spacing,
                n_val=args.val,
                seed=args.seed,
                window=tuple(args.window),
                progress=sys.stderr.isatty(),
                lidc_xml=args.lidc_xml,
                min_readers=args.min_readers,
                assume_hu=args.assume_hu,
            )
            _print_summary(summary, f" -> {args.out}")
        elif args.cmd == "synth-scans":
            csv_path = synth_scans(args.out, args.n, args.seed, args.format)
            readings = " (each with an LIDC-style readings.xml)" if args.format == "dicom" else ""
            print(f"wrote {args.n} synthetic {args.format} scan(s){readings} and {csv_path}")
        elif args.cmd == "synth":
            _synth(args)
    except KeyboardInterrupt:
        if args.cmd != "prepare":
            raise
        print(
            f"interrupted: the scans already cut are kept in {args.out}.partial; run the same command "
            f"again to go on from there",
            file=sys.stderr,
        )
        return 130
    except DataError as e:
        if getattr(e, "summary", None) is not None:  # what was skipped, and why, before the verdict
            _print_summary(e.summary, "")
        raise
    return 0


def _synth(args) -> None:
    """synth: write the synthetic cubes, once it is known that they fit in memory."""
    # the cubes and their train/val copies are in memory together before the file is written
    per_cube = 2 * args.cube**3 * 4
    check_fits_in_memory(
        args.n * per_cube,
        f"synth --n {args.n} of {args.cube}^3 cubes",
        lambda have: f"at most about --n {have // per_cube} fits",
        error=DataError,
    )
    train, val = write_synthetic(
        args.out, args.n, args.val, args.seed, args.cube, args.spacing, progress=sys.stderr.isatty()
    )
    print(
        f"wrote {args.out}: {len(train.cubes)} train + {len(val.cubes)} val cubes of {args.cube}^3 (seed {args.seed})"
    )


def _print_summary(summary, written_to: str) -> None:
    print(
        f"scans read: {summary.scans_read}; nodules written: {summary.nodules_written} "
        f"({summary.padded} padded with air at the scan's edge){written_to}"
    )
    skipped = [s for s in summary.skipped if s[0] != "note"]
    print(f"skipped: {len(skipped)}")
    for kind, why in summary.skipped:
        print(f"  {kind}: {why}")
