"""The wheelhouse for a machine without internet: its download list (the run-time closure
without torch, numpy and scipy), its size, and an install with ``pip --no-index`` into a fresh
venv whose torch, numpy and scipy stand in for a GPU node's own."""
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from fairseq_entropy import wheelhouse as wh

REPO = Path(__file__).resolve().parents[1]
HERE = f"{sys.version_info.major}.{sys.version_info.minor}"


def closure(figures=False, python_version=HERE):
    roots = [n for n in wh.requirement_names(REPO / "requirements.txt")
             if n not in wh.DEVELOPMENT]
    left_out = [*wh.DEFAULT_EXCLUDE, *wh.NOT_AT_RUN_TIME, *(() if figures else wh.FIGURES)]
    return wh.runtime_closure([*roots, wh.FAIRSEQ], python_version, left_out)


def test_the_download_list_is_the_run_time_closure_without_the_machines_own_packages():
    pins = closure()
    # fairseq, and what fairseq, hydra, sacrebleu, scikit-learn and submitit need to import
    for name in ("ve-fairseq", "hydra-core", "omegaconf", "antlr4-python3-runtime", "pyyaml",
                 "sacrebleu", "portalocker", "tabulate", "colorama", "lxml", "regex",
                 "scikit-learn", "joblib", "threadpoolctl", "submitit", "cloudpickle",
                 "sentencepiece", "tensorboardx", "protobuf", "bitarray", "cffi", "tqdm"):
        assert name in pins, name
    # the machine's own, the development tools, the build-only and viewer packages, and
    # fairseq's metadata (torchaudio) stay out; matplotlib only with figures
    for name in ("torch", "numpy", "scipy", "pytest", "pytest-xdist", "ruff", "cython",
                 "tensorboard", "grpcio", "torchaudio", "matplotlib", "pillow"):
        assert name not in pins, name
    assert all(v == metadata.version(n) for n, v in pins.items())
    with_figures = closure(figures=True)
    assert {"matplotlib", "pillow", "kiwisolver", "fonttools"} <= set(with_figures) - set(pins)


def test_platform_tags_and_the_download_command_for_another_python():
    tags = wh.platform_tags("manylinux_2_28_x86_64")
    assert tags == [f"manylinux_2_{v}_x86_64" for v in range(28, 16, -1)] + \
        ["manylinux2014_x86_64"] and len(tags) == 13
    assert wh.platform_tags("macosx_11_0_arm64") == ["macosx_11_0_arm64"]
    pins = closure(python_version="3.12")
    cmd = wh.download_command(pins, Path("w"), "3.12", "manylinux_2_28_x86_64")
    assert cmd[cmd.index("--python-version") + 1] == "3.12" and "--no-deps" in cmd
    assert cmd.count("--platform") == 13 and f"ve-fairseq=={pins['ve-fairseq']}" in cmd
    with pytest.raises(wh.WheelhouseError, match="expected 3.X"):
        wh.make_wheelhouse(Path("w"), REPO / "requirements.txt", REPO, "3", "x", ())


def test_make_wheelhouse_runs_the_module_with_the_variables():
    dry = subprocess.run(["make", "-n", "-C", str(REPO), "-o", ".venv/.fairseq-entropy-installed",
                          "wheelhouse", "WHEELHOUSE=/tmp/w", "PY_VERSION=3.12",
                          "PLATFORM=manylinux_2_17_x86_64"],
                         capture_output=True, text=True, check=True).stdout
    dry = " ".join(dry.replace("\\\n", " ").split())
    assert "-m fairseq_entropy.wheelhouse --out \"/tmp/w\" --platform " \
           "\"manylinux_2_17_x86_64\" --exclude \"torch,numpy,scipy\"" in dry
    assert "--python-version \"3.12\"" in dry and "--figures" not in dry


def machine_torch_venv(venv: Path) -> Path:
    """A fresh venv that sees this environment's torch, numpy and scipy (and what they need)
    through links on a .pth path, as a GPU node's venv sees the machine's own torch."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], capture_output=True, text=True,
                               check=True).stdout.strip())
    own = venv / "machine"
    own.mkdir()
    for name in wh.runtime_closure(["torch", "numpy", "scipy"], HERE, exclude=()):
        dist = metadata.distribution(name)
        for top in {Path(str(f)).parts[0] for f in dist.files or []}:
            src = Path(dist.locate_file(top))
            if top not in ("..", "bin") and not top.endswith(".pth") and src.exists() \
                    and not (own / top).exists():
                (own / top).symlink_to(src)
    (site / "machine.pth").write_text(f"{own}\n")
    return py


def test_the_wheelhouse_fits_and_installs_offline_into_a_fresh_venv(tmp_path):
    out = tmp_path / "wheelhouse"
    got = wh.make_wheelhouse(out, REPO / "requirements.txt", REPO, HERE, wh.DEFAULT_PLATFORM,
                             wh.DEFAULT_EXCLUDE)
    wheels = sorted(out.glob("*.whl"))
    size = sum(w.stat().st_size for w in wheels)
    assert size == got["bytes"] < 60 * 2 ** 20
    names = {canonicalize_name(w.name.split("-")[0]) for w in wheels}
    assert names == set(got["pins"]) | {"fairseq-entropy"} and len(wheels) == len(names)
    assert not any(w.name.startswith(("torch-", "numpy-", "scipy-")) for w in wheels)
    lines = [ln for ln in (out / "requirements.txt").read_text().splitlines()
             if not ln.startswith("#")]
    assert lines == [f"{n}=={v}" for n, v in got["pins"].items()] + ["fairseq-entropy"]

    py = machine_torch_venv(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_FIND_LINKS")}
    # this environment's pip runs for the fresh venv (a venv made --without-pip)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--quiet",
                    "--no-index", "--no-deps", "--find-links", str(out), "-r",
                    str(out / "requirements.txt")], check=True, env=env)
    done = subprocess.run([str(py), "-c", "import fairseq, fairseq_entropy, sklearn; "
                           "print(fairseq.__version__, fairseq_entropy.__file__)"],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    version, where = done.stdout.split()
    assert version == "0.12.3" and str(tmp_path / "venv") in where
    # the installed console scripts train and score a level there
    bindir = tmp_path / "venv" / "bin"
    run_env = dict(env, PATH=f"{bindir}{os.pathsep}{env['PATH']}")
    for cmd in (["build", "exp1", "--out", "b", "--levels", "3", "--n", "200"],
                ["binarize", "b/entropy_3.0", "--out", "bin"],
                ["run", "exp1_transformer_sinusoidal", "bin", "run", "--max-update", "2",
                 "--device", "cpu", "--no-score-best", "--decode-sample", "8"]):
        r = subprocess.run([str(bindir / "fairseq-entropy"), *cmd], capture_output=True,
                           text=True, env=run_env, cwd=tmp_path)
        assert r.returncode == 0, (cmd, r.stderr[-2000:])
    assert (tmp_path / "run" / "sample" / "score.json").is_file()
