import os
from pathlib import Path

import pytest

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
