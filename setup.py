"""deepdensity: Cunha et al. (HPML 2018) strong-vs-weak scaling study, in tf.keras + Horovod.

TensorFlow is an extra, not a hard requirement, so that CPU and CUDA users pick exactly one
build, and an environment that has TensorFlow already (a cluster module, NVIDIA's container)
keeps it: `make install` picks for you (STACK=current, paper or existing; docs/install.md).
The current stack is TensorFlow 2.21 with tf-keras 2.21 (Keras 2, what tf.keras is under
TF_USE_LEGACY_KERAS=1, which importing deepdensity sets). tf-keras asks for `tensorflow`, so
beside tensorflow-cpu it goes in with --no-deps: `pip install .[cpu]` then
`pip install --no-deps tf-keras==2.21.0`. Horovod is not listed: it must be compiled against
the TensorFlow already in the environment, with the project's patch from TF 2.16 on, which
pip cannot order: scripts/horovod.sh does it. Python 3.10 to 3.13 are admitted; CI runs 3.11
(Debian 12) and 3.13 (Debian 13), docs/install.md "Systems run".
"""
from setuptools import find_packages, setup

setup(
    name="deepdensity",
    version="0.1.0",
    description="3D Gaussian-mixture autoencoder and its strong/weak scaling study under Horovod",
    packages=find_packages(include=["deepdensity", "deepdensity.*"]),
    # the study presets and report templates, so that `deepdensity repro` runs outside a checkout too
    package_data={"deepdensity.study": ["presets/*.yaml", "templates/*.md", "templates/*.txt"],
                  # the rendering kernel's source: `python -m deepdensity.model.kernels.build` compiles it
                  "deepdensity.model.kernels": ["render.cc"]},
    entry_points={"console_scripts": ["deepdensity = deepdensity.cli:main"]},
    python_requires=">=3.10,<3.14",
    # admitted; CI runs 3.11 (Debian 12) and 3.13 (Debian 13); utils/stack.py says the same
    classifiers=[
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
    ],
    install_requires=[
        # numpy 2 where TensorFlow takes it (the current stack, 2.21, asks for >= 1.26 and, on
        # Python 3.13, ml-dtypes asks for >= 2.1); the paper-era extras below keep numpy below 2
        "numpy>=1.23",
        "h5py>=3.8",
        "pydicom>=3",
        "PyYAML>=6",
        "matplotlib>=3.7",
        "tqdm>=4.60",
        "scipy>=1.10",          # ndimage: trilinear resampling of scans
        "SimpleITK>=2.3",       # MetaImage (.mhd/.raw/.zraw, .mha), as LUNA16's own code reads it
        "scikit-learn>=1.3",    # PCA, t-SNE and DBSCAN of the data filter (Gahlot et al. 2020)
        "submitit>=1.5.4,<1.6",  # the study's Slurm jobs (launch/slurm_jobs.py leans on its executor's internals)
        "jinja2>=3.1,<4",       # the study's reports: their text and display conditions (study/templates)
    ],
    extras_require={
        # the current stack; TF 2.16+ ships Keras 3 as `keras`, and the project runs on Keras 2
        # TensorBoard no longer comes with TensorFlow 2.21: the runs' logs are read with it
        "cpu": ["tensorflow-cpu==2.21.0", "tensorboard==2.21.*"],   # and tf-keras with --no-deps (above)
        "gpu": ["tensorflow[and-cuda]==2.21.0", "tensorboard==2.21.*", "tf-keras==2.21.0"],
        # the paper-era stack, the committed study's: Python 3.10 or 3.11
        # TensorFlow 2.15 was built against numpy 1 and fails to import under numpy 2
        "paper-cpu": ["tensorflow-cpu==2.15.1", "numpy<2"],
        "paper-gpu": ["tensorflow[and-cuda]==2.15.1", "numpy<2"],
        "test": ["pytest>=7", "pytest-cov>=7"],     # pytest-cov: make coverage
    },
)
