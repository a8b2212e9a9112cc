"""fairseq-entropy: entropy-controlled systematic-generalization experiments as a fairseq plugin.

Package data: the presets (``fairseq_entropy/experiments/presets.json``), the paper's results
(``fairseq_entropy/analysis/paper_results.tsv``), and the shell recipes and sweep grids
(``recipes/*.sh``, ``recipes/grids/*.toml``), installed as ``fairseq_entropy/recipes/``
from the top-level ``recipes/`` folder (``fairseq-entropy recipes-dir`` prints where they are).
"""

from setuptools import find_packages, setup

setup(
    name="fairseq-entropy",
    version="0.1.0",
    description="fairseq --user-dir plugin reproducing 'Systematic Generalization in Language "
                "Models Scales with Information Entropy' (Wold et al., ACL Findings 2025)",
    license="MIT",
    packages=find_packages(include=["fairseq_entropy", "fairseq_entropy.*"])
    + ["fairseq_entropy.recipes"],
    package_dir={"fairseq_entropy.recipes": "recipes"},
    package_data={"fairseq_entropy": ["analysis/*.tsv", "experiments/*.json"],
                  "fairseq_entropy.recipes": ["*.sh", "grids/*.toml"]},
    python_requires=">=3.10",
    # fairseq itself (ve-fairseq, installed with --no-deps) and its real dependencies are
    # installed by the Makefile; see README.md for why.
    install_requires=["numpy", "scipy", "tqdm"],
    # the figures of aggregate and predict --plot; without it they write tables and reports
    extras_require={"figures": ["matplotlib"]},
    entry_points={"console_scripts": ["fairseq-entropy = fairseq_entropy.cli:main"]},
)
