"""Processes end with their parent, and a run's lock outlives none of them: real processes
(sleep, bash, xargs) under ``fairseq-entropy lock``, ``run``, ``sweep`` and ``quickstart.sh``,
stopped by SIGTERM."""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from fairseq_entropy.experiments import locks
from fairseq_entropy.experiments.processes import group_alive

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def env(**extra):
    return dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                OMP_NUM_THREADS="1", **extra)


def alive(pid):
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def left_its_group(pid):
    """Whether ``pid`` leads its own session (it has run setsid(2)); gone counts as not."""
    try:
        return os.getsid(pid) == pid
    except ProcessLookupError:
        return False


def wait_for(predicate, timeout=120.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def pids_file(path):
    """The PIDs written one per line to ``path`` so far (a fake command writes them)."""
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def lock_cmd(run, *command):
    return [sys.executable, "-m", "fairseq_entropy.cli", "lock", str(run), "--", *command]


# a command whose processes outlive its first process: bash starts sleep | cat and writes
# the PIDs of all three, then waits
PIPELINE = 'sleep 600 | cat & echo $$ >> "$1"; pgrep -P $$ >> "$1"; wait'


def test_term_to_lock_stops_the_whole_command_then_frees_the_lock(tmp_path):
    run, pids = tmp_path / "run", tmp_path / "pids"
    proc = subprocess.Popen(lock_cmd(run, "bash", "-c", PIPELINE, "x", str(pids)),
                            stderr=subprocess.PIPE, text=True, env=env())
    started = wait_for(lambda: len(pids_file(pids)) >= 3 and pids_file(pids), what="pipeline")
    # held while it runs: a second launch is refused, and runs nothing
    second = subprocess.run(lock_cmd(run, "touch", str(tmp_path / "ran")),
                            capture_output=True, text=True, env=env())
    assert second.returncode == locks.LOCKED_EXIT == 75, second.stderr
    assert not (tmp_path / "ran").exists()
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=30)[1]
    assert proc.returncode == 128 + signal.SIGTERM
    assert "stopped by signal 15; every process of the command has exited" in err
    assert "Fix: run the same command again" in err
    assert not any(alive(p) for p in started)  # sleep and cat too, not only bash
    assert (run / ".lock").read_text() == ""  # freed cleanly
    assert locks.run_locked(run, ["touch", str(tmp_path / "ran")]) == 0
    assert (tmp_path / "ran").exists()


def test_a_killed_lock_process_leaves_the_lock_held_while_its_command_lives(tmp_path):
    run, pids = tmp_path / "run", tmp_path / "pids"
    proc = subprocess.Popen(lock_cmd(run, "bash", "-c", PIPELINE, "x", str(pids)),
                            stderr=subprocess.DEVNULL, env=env())
    started = wait_for(lambda: len(pids_file(pids)) >= 3 and pids_file(pids), what="pipeline")
    proc.kill()  # SIGKILL: no handler runs, the command is orphaned
    proc.wait()
    assert all(alive(p) for p in started)
    try:
        second = subprocess.run(lock_cmd(run, "touch", str(tmp_path / "ran")),
                                capture_output=True, text=True, env=env())
        assert second.returncode == 75, second.stderr
        assert f"locked by pid {proc.pid}" in second.stderr
        assert not (tmp_path / "ran").exists()
    finally:
        os.killpg(started[0], signal.SIGKILL)  # the command's own process group
    wait_for(lambda: not group_alive(started[0]), what="the orphans to exit")
    assert locks.run_locked(run, ["true"]) == 0  # free once the last of them is gone


def test_a_background_process_left_by_a_finished_command_keeps_the_lock(tmp_path):
    run, pids = tmp_path / "run", tmp_path / "pids"
    # the command exits at once and leaves sleep running in the background
    rc = locks.run_locked(run, ["bash", "-c", 'sleep 600 & echo $! > "$0"', str(pids)])
    assert rc == 0
    (orphan,) = pids_file(pids)
    try:
        assert alive(orphan)
        assert locks.run_locked(run, ["true"]) == locks.LOCKED_EXIT
    finally:
        os.kill(orphan, signal.SIGKILL)
    wait_for(lambda: not alive(orphan), what="sleep to exit")
    assert locks.run_locked(run, ["true"]) == 0


FAKE_TRAIN = textwrap.dedent("""\
    #!/usr/bin/env bash
    # stands in for fairseq-train: a pipeline that ignores nothing and lives 60 s
    sleep 600 | cat &
    echo $$ >> "$PIDS"; pgrep -P $$ >> "$PIDS"
    wait
    """)

RUN_DRIVER = textwrap.dedent("""\
    import os, sys
    from fairseq_entropy.cli import main
    from fairseq_entropy.experiments import fairseq_train, run
    fake = lambda name: os.environ["FAKE_TRAIN"]  # noqa: E731 - fairseq-train and -generate
    fairseq_train.tool_path = run.tool_path = fake
    sys.exit(main(sys.argv[1:]))
    """)


def fake_run_setup(tmp_path):
    """A fake trainer, a ``fairseq-entropy`` that runs it as fairseq-train (named like the
    console script, so that importing the package skips fairseq), and a level directory
    whose index header says 4 training sentences.  Returns (bin dir, databin, run, pids)."""
    fake = tmp_path / "fake-train"
    fake.write_text(FAKE_TRAIN)
    fake.chmod(0o755)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    driver = bindir / "fairseq-entropy"
    driver.write_text(f"#!{sys.executable}\n" + RUN_DRIVER)
    driver.chmod(0o755)
    databin, run, pids = tmp_path / "databin", tmp_path / "run", tmp_path / "pids"
    databin.mkdir()
    # the header of a fairseq mmap index of 4 training sentences: what the preset reads
    (databin / "train.in-out.in.idx").write_bytes(
        b"MMIDIDX\x00\x00" + (1).to_bytes(8, "little") + bytes([4]) + (4).to_bytes(8, "little")
        + bytes(12 * 4))
    return bindir, databin, run, pids


def check_run_stopped(proc, run, pids):
    started = wait_for(lambda: len(pids_file(pids)) >= 3 and pids_file(pids), what="trainer")
    assert locks.run_locked(run, ["true"]) == locks.LOCKED_EXIT
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=30)[1]
    assert proc.returncode == 143, err
    assert "stopped by signal 15; its processes were stopped and the lock is free" in err
    assert not any(alive(p) for p in started)
    assert (run / ".lock").read_text() == ""
    assert not (run / "checkpoints" / "trained").exists()


def test_term_to_run_stops_the_trainers_group_and_frees_the_lock(tmp_path):
    bindir, databin, run, pids = fake_run_setup(tmp_path)
    proc = subprocess.Popen([str(bindir / "fairseq-entropy"), "run", "exp1_fconv", str(databin),
                             str(run), "--device", "cpu"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            env=env(PIDS=str(pids), FAKE_TRAIN=str(tmp_path / "fake-train")))
    check_run_stopped(proc, run, pids)


def test_term_to_train_level_sh_stops_the_trainer_and_frees_the_lock(tmp_path):
    bindir, databin, run, pids = fake_run_setup(tmp_path)
    proc = subprocess.Popen(["bash", str(REPO / "recipes" / "train_level.sh"), "exp1_fconv",
                             str(databin), str(run)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            env={**env(PIDS=str(pids), FAKE_TRAIN=str(tmp_path / "fake-train"),
                                       DEVICE="cpu"),
                                 "PATH": f"{bindir}{os.pathsep}{env()['PATH']}"})
    check_run_stopped(proc, run, pids)


def fake_quickstart(tmp_path):
    """A checkout holding quickstart.sh (and the Makefile) beside a fake train_level.sh (the
    recipe of the quickstart's sweep) that logs its run directory and MAX_UPDATE and runs
    sleep | cat, on data marked as built.
    Returns (checkout, OUT, the start log, the PIDs file)."""
    work = tmp_path / "work"
    recipes = work / "recipes"
    recipes.mkdir(parents=True)
    shutil.copy(REPO / "recipes" / "quickstart.sh", recipes)
    shutil.copy(REPO / "Makefile", work)
    started_log, pids = tmp_path / "started", tmp_path / "pids"
    (recipes / "train_level.sh").write_text(textwrap.dedent(f"""\
        #!/usr/bin/env bash
        echo "$3 MAX_UPDATE=$MAX_UPDATE" >> {started_log}
        sleep 600 | cat &
        echo $$ >> {pids}; pgrep -P $$ >> {pids}
        wait
        """))
    (recipes / "train_level.sh").chmod(0o755)
    out = tmp_path / "demo"
    databin = out / "data-bin" / "exp1" / "n50" / "seed1"
    for level in ("entropy_0.0", "entropy_0.5", "entropy_1.0"):  # binarized: no build runs
        (databin / level).mkdir(parents=True)
        (databin / level / "manifest.json").write_text("{}")
    (out / ".data-args").write_text("BUILD_ARGS= BINARIZE_ARGS= N=50\n")
    (databin / ".done-0,0.5,1").touch()
    return work, out, started_log, pids


QUICK_ENV = dict(LEVELS="0,0.5,1", JOBS="1", N="50", MAX_UPDATE="7", CUDA_VISIBLE_DEVICES="",
                 PACK="0")  # each level its own recipe call: the fake recipe is started


def quick_env(work):
    """QUICK_ENV with the fake recipe of :func:`fake_quickstart` as quickstart's RECIPE."""
    return dict(QUICK_ENV, RECIPE=str(work / "recipes" / "train_level.sh"))


def check_stopped(proc, out, started_log, pids):
    # the sweep's start (a Python process) may take long on a loaded machine
    started = wait_for(lambda: len(pids_file(pids)) >= 3 and pids_file(pids), timeout=180,
                       what="level 1")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert "quickstart: stopped by signal 15; every process it started has exited" in err
    assert not any(alive(p) for p in started)
    time.sleep(1.0)  # xargs would have launched the next level by now
    lines = started_log.read_text().splitlines()
    assert lines == [f"{out}/runs/exp1/exp1_cnn_authors/n50/seed1/entropy_0.0 MAX_UPDATE=7"]
    return err


def test_term_to_quickstart_stops_every_level_and_launches_no_more(tmp_path):
    work, out, started_log, pids = fake_quickstart(tmp_path)
    proc = subprocess.Popen(["bash", str(work / "recipes" / "quickstart.sh")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env(OUT=str(out), **quick_env(work)))
    err = check_stopped(proc, out, started_log, pids)
    assert proc.returncode == 143, err


def test_term_to_make_demo_stops_every_level(tmp_path):
    work, out, started_log, pids = fake_quickstart(tmp_path)
    # a venv marked as installed (its stamp newer than setup.py & co); its empty bin/ goes
    # first on make's PATH, and the tools come from this Python's environment after it
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for f in ("setup.py", "requirements.txt", "constraints.txt"):
        (work / f).touch()
        os.utime(work / f, (0, 0))
    (venv / ".fairseq-entropy-installed").touch()
    proc = subprocess.Popen(["make", "-s", "demo", f"VENV={venv}"], cwd=work,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env(OUT=str(out), **quick_env(work)))
    err = check_stopped(proc, out, started_log, pids)
    assert proc.returncode != 0, err


def test_quickstart_refuses_a_bad_n_or_max_update(tmp_path):
    for setting in ({"N": "-5"}, {"N": "lots"}, {"MAX_UPDATE": "0"}):
        res = subprocess.run(["bash", str(REPO / "recipes" / "quickstart.sh")],
                             capture_output=True, text=True,
                             env=env(OUT=str(tmp_path / "demo"), **setting))
        (name, value), = setting.items()
        assert res.returncode == 2
        assert res.stderr.startswith(f"{name}={value}: expected a positive whole number")
        assert "Fix: " in res.stderr
        assert not (tmp_path / "demo").exists()


def test_term_to_a_local_sweep_stops_its_cells_and_starts_no_more(tmp_path):
    from fairseq_entropy.experiments.grids import load_grid

    grid = tmp_path / "two.toml"
    grid.write_text('experiment = "exp1"\npresets = ["exp1_fconv"]\nlevels = [3]\n'
                    'seeds = [5, 6]\nn = [320]\nschedule = {max_update = 80}\n')
    root, started_log, pids = tmp_path / "root", tmp_path / "started", tmp_path / "pids"
    for cell in load_grid(grid).cells():  # data marked as binarized: no build runs
        cell.databin(root).mkdir(parents=True, exist_ok=True)
        (cell.databin(root) / "manifest.json").write_text("{}")
    recipe = tmp_path / "recipe.sh"
    recipe.write_text(f'echo "$3" >> {started_log}\nsleep 600 | cat &\n'
                      f'echo $$ >> {pids}; pgrep -P $$ >> {pids}\nwait\n')
    proc = subprocess.Popen([sys.executable, "-m", "fairseq_entropy.cli", "sweep", str(grid),
                             "--root", str(root), "--device", "cpu", "--jobs", "1",
                             "--recipe", str(recipe)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env())
    started = wait_for(lambda: len(pids_file(pids)) >= 3 and pids_file(pids), what="cell 1")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "sweep: stopped by signal 15" in err
    assert not any(alive(p) for p in started)
    time.sleep(1.0)
    assert len(started_log.read_text().splitlines()) == 1  # the second cell never began
    # the status file names both cells as cancelled by the stop, for a re-run to resume
    rows = (root / "sweep-status.tsv").read_text().splitlines()
    assert rows[0].split("\t")[:2] == ["cell", "status"], rows[0]
    assert len(rows) == 3 and all(r.split("\t")[1] == "cancelled" for r in rows[1:]), rows
    assert all("stopped (signal 15)" in r for r in rows[1:]), rows


def test_term_to_lock_says_so_when_a_process_that_left_the_group_holds_the_lock(tmp_path):
    """A process that left the command's process group (setsid) survives the stop and still
    holds the inherited lock: the stop line says so instead of "the lock is free"."""
    run, pids = tmp_path / "run", tmp_path / "pids"
    # the escaped process's output goes elsewhere, or it would hold the stderr pipe open
    command = 'setsid sleep 600 >/dev/null 2>&1 & echo $! >> "$1"; wait'
    proc = subprocess.Popen(lock_cmd(run, "bash", "-c", command, "x", str(pids)),
                            stderr=subprocess.PIPE, text=True, env=env())
    (escaped,) = wait_for(lambda: pids_file(pids), what="setsid sleep")
    # $! is written at fork, before setsid(2) runs: a stop sent earlier reaches it in the group
    wait_for(lambda: left_its_group(escaped), what="sleep to leave the command's group")
    try:
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=30)[1]
        assert proc.returncode == 128 + signal.SIGTERM
        assert "still holds the lock. Fix: stop it (fuser" in err and "lock is free" not in err
        assert alive(escaped)
        assert locks.run_locked(run, ["true"]) == locks.LOCKED_EXIT
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(escaped, signal.SIGKILL)


# a stop signal whose handler runs while the main thread is inside ProcessGroups.start (in
# Popen, holding the registry's lock, the child forked but not registered yet)
SIGNAL_WHILE_STARTING = textwrap.dedent("""
    import os, signal, subprocess, sys
    from fairseq_entropy.experiments import processes, run

    children = processes.ProcessGroups()

    class SignalledWhileStarting(subprocess.Popen):
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            print("child", self.pid, flush=True)
            os.kill(os.getpid(), signal.SIGTERM)  # its handler runs before start() returns
            print("handler ran inside start:", children.stopping, flush=True)

    subprocess.Popen = SignalledWhileStarting
    if sys.argv[1] == "plain":  # a submitit task's or the lock command's handling
        stop = processes.stop_on_signals(children, grace_s=5)
    else:  # a run's: RunStopped once no child runs
        stop = run._stop_on_signal(children)
    try:
        with stop:
            p = run._start(children, ["sleep", "60"])
            print("exit", run._wait(children, p) if sys.argv[1] == "run" else children.wait(p),
                  flush=True)
    except run.RunStopped as e:
        print("stopped", e.signal, flush=True)
""")


def test_a_stop_signal_while_a_child_starts_stops_it_without_a_hang(tmp_path):
    """The handler takes the registry's lock the interrupted start holds (re-entrant, no
    deadlock), and the child forked before the signal is stopped once registered (a run's
    handler does not raise while a child is being started, which would leave it running)."""
    script = tmp_path / "signalled.py"
    script.write_text(SIGNAL_WHILE_STARTING)
    for how, last in (("plain", "exit -15"), ("run", "stopped 15")):
        res = subprocess.run([sys.executable, str(script), how], capture_output=True,
                             text=True, env=env(), timeout=30)
        lines = res.stdout.splitlines()
        assert res.returncode == 0 and lines[1:] == ["handler ran inside start: True", last], \
            (how, res.stdout, res.stderr[-2000:])
        child = int(lines[0].split()[1])
        wait_for(lambda: not alive(child), timeout=5, what=f"{how}: the child's exit")
