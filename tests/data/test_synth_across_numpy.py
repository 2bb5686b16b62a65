"""The synthetic cubes are the same arrays under numpy 1 (the paper-era stack) and numpy 2 (the
current one), so that a study on either stack trains on the data the committed runs trained on.

The references are not computed by the code under test in this process: the hash was taken
under numpy 1.26.4 and numpy 2.4.6 (Python 3.11, AMD EPYC with AVX2, 2026-11-29: the same digest
from both), and the collapse level is the committed study's own record, computed on AVX-512
machines under numpy 1.26 when the study ran.

What is hashed is the cubes, the arrays the runs read, and so is the data identity the ledger keys
runs by (core/data_identity.py), since 2026-12-01: before, it hashed the float64 diameters too,
drawn through np.exp, whose float64 kernel is numpy's own SIMD code on AVX-512 and the C
library's elsewhere, so that it differed between numpys and instruction sets (docs/install.md,
"numpy 2"). The last tests check the identities the committed ledgers' entries are read with."""

import hashlib
import json

import pytest

from deepdensity.data.cubes import input_independent_loss, to_density
from deepdensity.data.synth import synthesize
from tests.support import ROOT

# sha256 of the train cubes' then the validation cubes' float32 bytes, synthesize(96, 32, seed 0)
TINY_CUBES = "75c0a8bacbb69c4f5a24ae202945f18165288cfd48bf908c29010c5fe9fc3ba9"


def test_the_tiny_studys_cubes_are_the_arrays_numpy_1_and_numpy_2_both_made():
    train, val = synthesize(96, 32, 0, progress=False)
    assert (train.cubes.dtype.str, train.cubes.shape, val.cubes.shape) == ("<f4", (64, 16, 16, 16), (32, 16, 16, 16))
    assert hashlib.sha256(train.cubes.tobytes() + val.cubes.tobytes()).hexdigest() == TINY_CUBES


@pytest.mark.medium
def test_the_default_studys_cubes_give_the_committed_studys_collapse_level():
    """The default preset's 2100 cubes (5 s to make) against reports/study.json's
    collapse level, the validation loss of rendering the training set's mean cube. Moving one
    float32 value of the cubes by one ulp moved it by 7e-16 to 3e-12 relative (four values
    tried); numpy 2's float64 log1p and pairwise mean move it by 1 ulp of its own (1e-16),
    hence 1e-15: a change of the cubes shows unless it is a single ulp of one training value."""
    record = json.loads((ROOT / "reports" / "study.json").read_text())
    d = record["study"]["data"]
    train, val = synthesize(d["n"], d["val"], d["seed"], progress=False)
    assert (len(train.cubes), len(val.cubes)) == (record["n_train"], record["n_val"])
    level = input_independent_loss(to_density(train.cubes)[0], to_density(val.cubes)[0])
    assert level == pytest.approx(record["collapse_loss"], rel=1e-15, abs=0)


# The committed ledgers' data, named by the identity their entries recorded ("arrays:", every
# dataset) and given here by their cubes' identity as measured when the identity became the
# cubes' alone (numpy 1.26.4, Intel Xeon with AVX-512, 2026-12-01; CUBES_OF), so that a
# change to the table or to data_identity shows
COMMITTED = {
    "default": ("arrays:2ab307e62792a44b99e68add21ec9e6e", "cubes:7da38e56852aedd509f25ab413ca22b8"),
    "tiny": ("arrays:04360c22eefd04f99eede8ba4100d7b5", "cubes:ff68deb5ed8ae4ff877d2c396bb383d3"),
}


def _identity_of_synthetic(tmp_path, n: int, val: int, seed: int) -> str:
    from deepdensity.data.synth import write_synthetic
    from deepdensity.study.core.data_identity import data_identity

    write_synthetic(tmp_path / "data.h5", n, val, seed, progress=False)
    return data_identity(tmp_path / "data.h5")


def _recorded(path) -> set:
    """The identities a ledger's entries were written with."""
    return {json.loads(line)["data"] for line in path.read_text().splitlines() if line.strip()}


def _read(path) -> set:
    """The identities a ledger's entries are read with."""
    from deepdensity.study.core import ledger

    return {e["data"] for e in ledger.read_entries(path)}


def test_the_tiny_studys_data_made_here_is_the_committed_tiny_ledgers(tmp_path):
    """The tests' committed tiny ledger (tests/study/data/tiny-reports) would answer a tiny study
    trained here (given with --ledger): its recorded identity reads as the cubes made here."""
    from deepdensity.study.core.data_identity import CUBES_OF

    recorded, cubes = COMMITTED["tiny"]
    assert _recorded(ROOT / "tests" / "study" / "data" / "tiny-reports" / "ledger.jsonl") == {recorded}
    assert CUBES_OF[recorded] == cubes
    assert _identity_of_synthetic(tmp_path, 96, 32, 0) == cubes


@pytest.mark.medium
def test_the_default_studys_data_made_here_is_the_committed_ledgers(tmp_path):
    """`make repro` on this stack and machine reuses the committed runs: the default study's data
    made here (5 s) has the identity the committed ledger's entries are read with."""
    from deepdensity.study.core.data_identity import CUBES_OF

    recorded, cubes = COMMITTED["default"]
    assert _read(ROOT / "reports" / "ledger.jsonl") == {cubes} and CUBES_OF[recorded] == cubes
    d = json.loads((ROOT / "reports" / "study.json").read_text())["study"]["data"]
    assert _identity_of_synthetic(tmp_path, d["n"], d["val"], d["seed"]) == cubes
