"""fairseq-entropy: entropy-controlled systematic-generalization experiments as a fairseq plugin."""

from setuptools import find_packages, setup

setup(
    name="fairseq-entropy",
    version="0.1.0",
    description="fairseq --user-dir plugin reproducing 'Systematic Generalization in Language "
                "Models Scales with Information Entropy' (Wold et al., ACL Findings 2025)",
    packages=find_packages(include=["fairseq_entropy", "fairseq_entropy.*"]),
    package_data={"fairseq_entropy": ["data/*.tsv"]},
    python_requires=">=3.10",
    # fairseq itself (ve-fairseq, installed with --no-deps) and its real dependencies are
    # installed by the Makefile; see README.md for why.
    install_requires=["numpy", "scipy", "matplotlib"],
    entry_points={"console_scripts": ["fairseq-entropy = fairseq_entropy.cli:main"]},
)
