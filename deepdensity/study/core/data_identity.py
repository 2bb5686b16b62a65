"""The data a run reads, named by its cubes (data_identity), and the identities of entries
written before that (CUBES_OF): the ledger's keys hold it (ledger.run_key)."""

from __future__ import annotations

import hashlib


def data_identity(path) -> str:
    """The data as the runs read it: a hash of the cubes of every split (each dataset named
    `cubes`: its name, dtype, shape and values). Not the file's bytes: HDF5 stores creation
    times, so the same cubes written twice (the study writes its synthetic data once per runs
    folder, on every machine) differ byte for byte. Not the columns beside the cubes (diameters,
    positions, series), which no run reads: the synthetic diameters are drawn through numpy's
    exponential, whose last bit differs between numpy 1 and 2 on AVX-512 and between instruction
    sets, and the identity of every dataset ("arrays:", until 2026-12-01) kept apart runs of the
    same cubes (CUBES_OF)."""
    import h5py
    import numpy as np

    h = hashlib.sha256()

    def add(name, obj):
        if isinstance(obj, h5py.Dataset) and name.rsplit("/", 1)[-1] == "cubes":
            values = np.ascontiguousarray(obj[()])
            h.update(f"{name}|{values.dtype.str}|{values.shape}|".encode())
            h.update(values.tobytes())

    def add_linked(group, prefix: str) -> None:
        # visititems follows hard links only; the cubes a soft or external link names are read
        # by the runs too (a file without links hashes as before)
        for key in group:
            link, name = group.get(key, getlink=True), f"{prefix}{key}"
            if isinstance(link, (h5py.SoftLink, h5py.ExternalLink)):
                obj = group[key]
                if isinstance(obj, h5py.Dataset):
                    add(name, obj)
                else:
                    obj.visititems(lambda sub, o: add(f"{name}/{sub}", o))
            elif isinstance(group[key], h5py.Group):
                add_linked(group[key], f"{name}/")

    with h5py.File(path, "r") as f:
        f.visititems(add)
        add_linked(f, "")
    return "cubes:" + h.hexdigest()[:32]


# The data identities of entries written while the identity hashed every dataset ("arrays:"),
# each with the identity of its cubes alone (data_identity). Each was established by making that
# data again where it hashed to the recorded "arrays:" identity (numpy 1.26.4 on an Intel Xeon
# with AVX-512, 2026-12-01: the default study's 2100 cubes and the tiny study's 96, tests/study/
# conftest.py) and hashing its cubes; numpy 2.4.6 there made the same cubes. An entry of another
# "arrays:" identity (the beyond study's filtered data) keeps its key: no request asks for it now.
CUBES_OF = {
    "arrays:2ab307e62792a44b99e68add21ec9e6e": "cubes:7da38e56852aedd509f25ab413ca22b8",
    "arrays:04360c22eefd04f99eede8ba4100d7b5": "cubes:ff68deb5ed8ae4ff877d2c396bb383d3",
}
