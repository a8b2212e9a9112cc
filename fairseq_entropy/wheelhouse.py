"""A wheelhouse for installing the plugin on a machine without internet (e.g. a GPU node of a
cluster that has its own CUDA torch): every wheel the plugin needs at run time, for a chosen
Python version and platform, with the packages that machine brings (torch, numpy, scipy by
default) left out.

``make wheelhouse`` runs ``python -m fairseq_entropy.wheelhouse``.  The wheels are those of
the requirements' run-time closure in this environment (each package at the version
installed here, the version the test suite passed with), found through the installed
packages' metadata: the roots are ``requirements.txt`` less the development tools
(:data:`DEVELOPMENT`) and of what is never needed at run time (:data:`NOT_AT_RUN_TIME`) or
only for figures (:data:`FIGURES`, kept with ``--figures``), plus ``ve-fairseq``, whose own
metadata is not followed (it names torchaudio and a CUDA torch, see the Makefile).
``pip download --no-deps --only-binary :all:`` fetches them for the target (a project
published as a source archive only is built here, and kept when it is pure Python); the
plugin's own wheel is built from the source tree.
The directory gets a ``requirements.txt`` of exactly its wheels, which the target installs
with ``pip install --no-index --no-deps --find-links DIR -r DIR/requirements.txt``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
import sys
from importlib import metadata
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from .errors import UserError
from .files import atomic_directory

#: left out by default: the target machine brings its own (a CUDA build of torch, and the
#: numpy and scipy it was built against)
DEFAULT_EXCLUDE = ("torch", "numpy", "scipy")
#: requirements of requirements.txt that only the tests and the linter use
DEVELOPMENT = ("pytest", "pytest-xdist", "ruff")
#: never needed at run time: Cython builds fairseq's extensions (its wheel has them built), and
#: tensorboard is the log viewer (fairseq writes its logs with tensorboardX when
#: torch.utils.tensorboard cannot import tensorboard)
NOT_AT_RUN_TIME = ("cython", "tensorboard")
#: the figures of ``aggregate`` and ``predict --plot``: left out unless asked for (aggregate
#: writes its tables and report without them, and says that the figures are not drawn)
FIGURES = ("matplotlib",)
#: fairseq's distribution: its wheel is fetched, its metadata's requirements are not followed
FAIRSEQ = "ve-fairseq"
#: the default platform of the target: x86-64 Linux with glibc 2.28 or newer (most clusters)
DEFAULT_PLATFORM = "manylinux_2_28_x86_64"
#: what the plugin's wheel is built from (copied, so that no earlier build/ enters it)
SOURCE_PARTS = ("setup.py", "fairseq_entropy", "recipes", "README.md", "LICENSE")
#: the size the wheelhouse without torch must stay under, in bytes (60 MiB)
SIZE_LIMIT = 60 * 2 ** 20


class WheelhouseError(UserError):
    """The wheelhouse cannot be made; the message names the cause and the fix."""


def requirement_names(path: str | Path) -> List[str]:
    """The project names of a pip requirements file (comments, blank lines, options and
    version specifiers dropped).

    Raises:
        WheelhouseError: the file cannot be read, or a line is not a requirement.
    """
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise WheelhouseError(f"{path}: {e.strerror}. Fix: pass the project's "
                              "requirements.txt with --requirements") from None
    names = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        try:
            names.append(Requirement(line).name)
        except Exception:
            raise WheelhouseError(f"{path}:{lineno}: {line!r} is not a requirement. Fix: "
                                  "one requirement per line, e.g. numpy>=1.24") from None
    return names


def runtime_closure(roots: Iterable[str], python_version: str,
                    exclude: Sequence[str] = DEFAULT_EXCLUDE,
                    opaque: Sequence[str] = (FAIRSEQ,)) -> Dict[str, str]:
    """Every distribution that ``roots`` need at run time, with its installed version.

    Walks the installed distributions' ``Requires-Dist`` metadata, evaluating environment
    markers for the target ``python_version`` (a requirement behind an ``extra`` is not
    followed).  A name of ``exclude`` is left out with everything only it needs; the
    requirements of a name of ``opaque`` are not followed.

    Args:
        roots: project names to start from.
        python_version: the target's ``X.Y``.
        exclude: project names the target machine brings.
        opaque: project names whose own requirements are not followed.

    Returns:
        canonical project name -> installed version, sorted by name.

    Raises:
        WheelhouseError: a needed distribution is not installed in this environment.
    """
    skip = {canonicalize_name(n) for n in exclude}
    stop = {canonicalize_name(n) for n in opaque}
    env = {"python_version": python_version, "python_full_version": f"{python_version}.0",
           "extra": ""}
    found: Dict[str, str] = {}
    todo = [(n, "requirements.txt") for n in roots]
    while todo:
        name, needed_by = todo.pop()
        key = canonicalize_name(name)
        if key in skip or key in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise WheelhouseError(f"{name} (needed by {needed_by}) is not installed here, so "
                                  "its version is unknown. Fix: run make install first, then "
                                  "make wheelhouse in the same environment") from None
        found[key] = dist.version
        if key in stop:
            continue
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is not None and not Marker(str(req.marker)).evaluate(env):
                continue
            todo.append((req.name, name))
    return dict(sorted(found.items()))


def platform_tags(platform: str) -> List[str]:
    """``platform`` and the older manylinux tags a machine of that platform also installs:
    ``manylinux_2_28_x86_64`` gives ``manylinux_2_28_x86_64`` ... ``manylinux_2_17_x86_64``,
    ``manylinux2014_x86_64`` (PEP 600 and PEP 599).  Any other tag is returned alone.

    Raises:
        WheelhouseError: an empty tag.
    """
    if not platform:
        raise WheelhouseError("--platform is empty. Fix: pass a wheel platform tag, e.g. "
                              f"{DEFAULT_PLATFORM}")
    m = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
    if not m:
        return [platform]
    glibc, arch = int(m.group(1)), m.group(2)
    tags = [f"manylinux_2_{v}_{arch}" for v in range(glibc, 16, -1)]
    return tags + ([f"manylinux2014_{arch}"] if glibc >= 17 else [])


def download_command(pins: Dict[str, str], dest: Path, python_version: str,
                     platform: str) -> List[str]:
    """The ``pip download`` command that fetches the wheels of ``pins`` for the target."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "--python-version", python_version, "--implementation", "cp", "--dest", str(dest)]
    for tag in platform_tags(platform):
        cmd += ["--platform", tag]
    return cmd + [f"{name}=={version}" for name, version in pins.items()]


def make_wheelhouse(out: Path, requirements: Path, source: Path, python_version: str,
                    platform: str, exclude: Sequence[str], limit: Optional[int] = SIZE_LIMIT,
                    figures: bool = False, run=subprocess.run) -> Dict[str, object]:
    """Write the wheelhouse into ``out`` (replaced as a whole once complete).

    Args:
        out: the wheelhouse directory.
        requirements: the project's ``requirements.txt``.
        source: the project's source tree (its ``setup.py``), built into the plugin's wheel.
        python_version: the target's ``X.Y``.
        platform: the target's wheel platform tag (:func:`platform_tags`).
        exclude: project names left out (the target brings them).
        figures: keep matplotlib and what it needs (:data:`FIGURES`).
        limit: refuse a wheelhouse larger than this many bytes (None: no limit).
        run: :func:`subprocess.run`, or a stand-in.

    Returns:
        ``{"wheels": [file names], "bytes": total size, "pins": {name: version}}``.

    Raises:
        WheelhouseError: a bad version, a package without a wheel for the target (pip's
            message), or a wheelhouse over ``limit``.
    """
    if not re.fullmatch(r"3\.\d+", python_version):
        raise WheelhouseError(f"--python-version {python_version}: expected 3.X, e.g. 3.12")
    roots = [n for n in requirement_names(requirements)
             if canonicalize_name(n) not in {canonicalize_name(d) for d in DEVELOPMENT}]
    left_out = [*exclude, *NOT_AT_RUN_TIME, *(() if figures else FIGURES)]
    pins = runtime_closure([*roots, FAIRSEQ], python_version, left_out)
    with atomic_directory(out) as tmp:
        tmp = Path(tmp)
        left = dict(pins)
        while left:
            done = run(download_command(left, tmp, python_version, platform),
                       capture_output=True, text=True)
            if done.returncode == 0:
                break
            # a project published as a source archive only: built here, kept if pure Python
            m = re.search(r"No matching distribution found for (\S+?)==", done.stderr or "")
            name = canonicalize_name(m.group(1)) if m else None
            if name not in left:
                _fail("pip download", done, python_version, platform)
            _check(run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-binary", name,
                        "--wheel-dir", str(tmp), f"{name}=={left.pop(name)}"],
                       capture_output=True, text=True), "pip wheel", python_version, platform)
            built = [w for w in tmp.glob("*.whl")
                     if canonicalize_name(w.name.split("-")[0]) == name]
            if not built or not all(w.name.endswith("-none-any.whl") for w in built):
                raise WheelhouseError(f"{name} has no wheel for Python {python_version} on "
                                      f"{platform}, and its source builds a wheel for this "
                                      "machine only. Fix: leave it out with EXCLUDE and "
                                      "install it on the target")
        with tempfile.TemporaryDirectory() as clean:  # no build/ of an earlier build
            for part in SOURCE_PARTS:
                src = Path(source) / part
                if src.is_dir():
                    shutil.copytree(src, Path(clean) / part,
                                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
                elif src.is_file():
                    shutil.copy2(src, Path(clean) / part)
            _check(run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                        "--no-build-isolation", "--wheel-dir", str(tmp), clean],
                       capture_output=True, text=True), "pip wheel", python_version, platform)
        wheels = sorted(p.name for p in tmp.glob("*.whl"))
        size = sum((tmp / w).stat().st_size for w in wheels)
        if limit is not None and size > limit:
            raise WheelhouseError(f"the wheelhouse would hold {size / 2**20:.1f} MiB, over "
                                  f"the {limit / 2**20:.0f} MiB limit. Fix: leave out what "
                                  "the target brings (EXCLUDE)")
        lines = [f"{n}=={v}" for n, v in pins.items()] + ["fairseq-entropy"]
        (tmp / "requirements.txt").write_text(
            "# install on the target (no internet):\n#   pip install --no-index --no-deps "
            "--find-links DIR -r DIR/requirements.txt\n" + "".join(f"{x}\n" for x in lines))
    return {"wheels": wheels, "bytes": size, "pins": pins}


def _check(done, what: str, python_version: str, platform: str) -> None:
    if done.returncode != 0:
        _fail(what, done, python_version, platform)


def _fail(what: str, done, python_version: str, platform: str):
    tail = [ln for ln in (done.stderr or done.stdout or "").strip().splitlines()
            if not ln.startswith("WARNING")][-2:]
    raise WheelhouseError(f"{what} failed for Python {python_version} on {platform}: "
                          f"{' / '.join(tail)}. Fix: check the version and platform (a "
                          "package may have no wheel for them), or the network")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m fairseq_entropy.wheelhouse``: see the module docstring."""
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    p = argparse.ArgumentParser(prog="python -m fairseq_entropy.wheelhouse",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="wheelhouse", help="the wheelhouse directory")
    p.add_argument("--python-version", default=here,
                   help=f"the target's Python X.Y (default: this one, {here})")
    p.add_argument("--platform", default=DEFAULT_PLATFORM,
                   help=f"the target's wheel platform tag (default {DEFAULT_PLATFORM}; older "
                        "manylinux tags are accepted too)")
    p.add_argument("--exclude", default=",".join(DEFAULT_EXCLUDE),
                   help="comma-separated projects the target brings, left out with what only "
                        f"they need (default {','.join(DEFAULT_EXCLUDE)}; '' for none)")
    p.add_argument("--requirements", default="requirements.txt",
                   help="the project's requirements file")
    p.add_argument("--source", default=".", help="the project's source tree")
    p.add_argument("--figures", action="store_true",
                   help="keep matplotlib for the figures of aggregate and predict --plot "
                        "(about 24 MiB more; without it aggregate writes tables and report)")
    p.add_argument("--no-limit", action="store_true",
                   help=f"allow more than {SIZE_LIMIT // 2**20} MiB (e.g. with torch)")
    args = p.parse_args(argv)
    exclude = [x.strip() for x in args.exclude.split(",") if x.strip()]
    try:
        got = make_wheelhouse(Path(args.out), Path(args.requirements), Path(args.source),
                              args.python_version, args.platform, exclude,
                              None if args.no_limit else SIZE_LIMIT, args.figures)
    except UserError as e:
        print(f"wheelhouse: error: {e}", file=sys.stderr)
        return 2
    print(f"wheelhouse {args.out}: {len(got['wheels'])} wheels, {got['bytes'] / 2**20:.1f} "
          f"MiB, for CPython {args.python_version} on {args.platform}"
          f"{' without ' + ', '.join(exclude) if exclude else ''}")
    print(f"install on the target: pip install --no-index --no-deps --find-links {args.out} "
          f"-r {args.out}/requirements.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
