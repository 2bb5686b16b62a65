"""Real scans to nodule cubes (`python -m deepdensity.data prepare`), and synthetic scans to try
it on (`synth-scans`). The modules, in the order a scan goes through them:

    dicom.py            DICOM series -> volumes (pydicom)
    metaimage_nifti.py  MetaImage (LUNA16) and NIfTI volumes (SimpleITK)
    geometry.py         a volume in world space, and a nodule's cube resampled from it
    annotations.py      LUNA16's annotations CSV
    pipeline.py         prepare: scans and nodules -> train/val cubes in the HDF5 layout
    synthetic_scans.py  synth-scans: CT scans with planted nodules, on disk

The two commands' functions are importable from here.
"""

from deepdensity.data.ingest.pipeline import prepare
from deepdensity.data.ingest.synthetic_scans import synth_scans

__all__ = ["prepare", "synth_scans"]
