"""deepdensity: Cunha et al. (HPML 2018) strong-vs-weak scaling study, in tf.keras + Horovod.

TensorFlow is an extra, not a hard requirement, so that CPU and CUDA users pick
exactly one build (`pip install .[cpu]` or `.[gpu]`); `make install` picks for you.
Horovod is not listed: it must be compiled against the TensorFlow already in the
environment (`--no-build-isolation`), which pip cannot order; the Makefile does it.
"""
from setuptools import find_packages, setup

setup(
    name="deepdensity",
    version="0.1.0",
    description="3D Gaussian-mixture autoencoder and its strong/weak scaling study under Horovod",
    packages=find_packages(include=["deepdensity", "deepdensity.*"]),
    # the study presets and report templates, so that `deepdensity repro` runs outside a checkout too
    package_data={"deepdensity.study": ["presets/*.yaml", "templates/*.md"],
                  # the rendering kernel's source: `python -m deepdensity.model.kernels.build` compiles it
                  "deepdensity.model.kernels": ["render.cc"]},
    entry_points={"console_scripts": ["deepdensity = deepdensity.cli:main"]},
    python_requires=">=3.10,<3.12",
    install_requires=[
        "numpy<2",
        "h5py>=3.8",
        "pydicom>=3",
        "PyYAML>=6",
        "matplotlib>=3.7",
        "tqdm>=4.60",
        "scipy>=1.10",          # ndimage: trilinear resampling of scans
        "SimpleITK>=2.3",       # MetaImage (.mhd/.raw/.zraw, .mha), as LUNA16's own code reads it
        "scikit-learn>=1.3",    # PCA, t-SNE and DBSCAN of the data filter (Gahlot et al. 2020)
        "submitit>=1.5.4,<1.6",  # the study's Slurm jobs (study/slurm_jobs.py leans on its executor's internals)
    ],
    extras_require={
        # TF 2.16+ ships Keras 3, which Horovod 0.28.1 does not support (horovod/horovod#4290).
        "cpu": ["tensorflow-cpu==2.15.1"],
        "gpu": ["tensorflow[and-cuda]==2.15.1"],
        "test": ["pytest>=7", "pytest-cov>=7"],     # pytest-cov: make coverage
    },
)
