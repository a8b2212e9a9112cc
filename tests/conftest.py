import os
from pathlib import Path

import pytest

# One intra-op thread per test process, set before torch is imported: `make test` runs one
# pytest-xdist worker per core, and torch's default of one thread per core in every worker
# oversubscribes the cores (tests/test_packed.py on 2 cores, 2 workers: 323 s with the
# default, 44 s with one thread, measured side by side).  A value set by the caller is kept.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def scan_reference():
    """Directory of the original SCAN files, or skip when the shared folder is absent."""
    d = Path(os.environ.get("SCAN_REFERENCE_DIR", SHARED / "reference" / "scan"))
    if not (d / "tasks.txt").exists():
        pytest.skip(f"SCAN reference files not found in {d}")
    return d


@pytest.fixture
def drawn(monkeypatch):
    """Every figure the report module draws, as {file name: matplotlib figure}, kept open
    instead of written to a PNG."""
    from fairseq_entropy.analysis import report

    figures = {}

    def keep(fig, path, dpi):
        fig.canvas.draw()
        figures[Path(path).name] = fig
        return Path(path)

    monkeypatch.setattr(report, "_save_png", keep)
    return figures
