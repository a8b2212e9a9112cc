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
    """Every figure the figures module draws, as {file name: matplotlib figure}, kept open
    instead of written to a PNG."""
    from fairseq_entropy.analysis import figures as figure_module

    figures = {}

    def keep(fig, path, dpi):
        fig.canvas.draw()
        figures[Path(path).name] = fig
        return Path(path)

    monkeypatch.setattr(figure_module, "_save_png", keep)
    return figures


def pytest_collection_modifyitems(session, config, items):
    """Run the long tests first: the files holding a test marked ``slow`` before the others,
    and inside a file its slow tests first (a file's tests stay together, so its
    module-scoped fixtures are built once).  pytest-xdist hands the tests out in this order,
    so the workers end together instead of one finishing a long test alone.  The order
    is otherwise the collection order."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    position = {}
    for item in items:
        position.setdefault(item.path, len(position))
    items.sort(key=lambda item: (item.path not in slow_files, position[item.path],
                                 item.get_closest_marker("slow") is None))
