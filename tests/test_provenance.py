"""A score's provenance: the training data and the schedule, recorded in the checkpoint by the
``systematicity`` task, carried into ``score.json``, checked by ``score`` (also when the
checkpoint is gone), kept apart by ``aggregate`` and compared by the skip rule of ``run`` and
``sweep``.  One tiny run (4 updates) on a 3-bit level serves every test."""
import hashlib
import io
import json
import math
import re
import shutil
from pathlib import Path

import pytest

from fairseq_entropy.analysis.aggregate import collect_scores
from fairseq_entropy.analysis.checkpoint_labels import check_selection, selection_label
from fairseq_entropy.analysis.provenance import check_training_data, read_checkpoint_info
from fairseq_entropy.analysis.schedules import (schedule_label, schedule_record,
                                                training_finished)
from fairseq_entropy.analysis.statistics import summarize
from fairseq_entropy.cli import main as cli
from fairseq_entropy.errors import UserError
from fairseq_entropy.experiments.grids import Cell, Schedule
from fairseq_entropy.experiments.presets import load_presets, train_args
from fairseq_entropy.experiments.rerun import ScheduleChanged
from fairseq_entropy.experiments.run import run_level
from fairseq_entropy.experiments.sweep import run_cell
from _toy import cut_and_binarize  # noqa: E402

PRESET = "exp1_transformer_sinusoidal"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "old_checkpoints"


def cell(max_update):
    return Cell("exp1", PRESET, "transformer_sinusoidal", 320, 5, 3.0,
                Schedule(max_update=max_update))


def build_level(tmp, bits, out):
    """Binarize the ``bits`` level of the N=320, seed-5 build under ``tmp`` into ``out``, its
    test split cut to 48 commands (the same 48 at every level: all exp1 test splits are the
    same commands)."""
    level = tmp / "data" / f"entropy_{float(bits):.1f}"
    cut_and_binarize(level, out)
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A sweep root with the 3-bit and 1.5-bit levels and one run of the 3-bit level
    (4 updates, last checkpoint only)."""
    root = tmp_path_factory.mktemp("root")
    assert cli(["build", "exp1", "--out", str(root / "b" / "data"), "--levels", "1.5,3",
                "--n", "320", "--seed", "5"]) == 0
    bin3 = build_level(root / "b", 3, cell(4).databin(root))
    bin15 = build_level(root / "b", 1.5, root / "bin-1.5")
    run = cell(4).run_dir(root)
    result = run_level(PRESET, bin3, run, seed=3, max_update=4, device="cpu", gen_batch=64,
                       score_best=False, out=io.StringIO())
    assert result.status == "done"
    return {"root": root, "bin3": bin3, "bin15": bin15, "run": run}


def test_score_json_records_the_training_data_and_the_schedule(trained):
    run, bin3 = trained["run"], trained["bin3"]
    rec = json.loads((run / "last" / "score.json").read_text())
    log = (run / "train.log").read_text()
    updates = int(re.findall(r"num_updates (\d+)", log)[-1])
    assert updates == 4
    args = train_args(load_presets()[PRESET], bin3, max_update=4)
    sha_args = hashlib.sha256("".join(a + "\n" for a in args).encode()).hexdigest()
    one = train_args(load_presets()[PRESET], bin3, max_update=1)
    sha_config = hashlib.sha256("".join(a + "\n" for a in one).encode()).hexdigest()
    assert one[one.index("--max-update") + 1] == "1"
    # 320 commands in batches of 32: 10 updates an epoch; the preset's 24 epochs are 240
    assert rec["schedule"] == {"max_update": 4, "max_epoch": 0, "updates": 4,
                               "epochs": round(4 / math.ceil(320 / 32), 3),
                               "train_args_sha256": sha_args, "preset_epochs": 24.0,
                               "preset_max_update": 240,
                               # no arguments after the preset's: the hash of no bytes
                               "extra_args_sha256": hashlib.sha256(b"").hexdigest(),
                               "best_checkpoint_metric": "seq_acc",
                               # the preset's arguments with the schedule left out
                               "preset_config_sha256": sha_config}
    assert rec["schedule_label"] == f"max_update=4 args={sha_args[:8]}"
    assert rec["train_data_manifest_sha256"] == rec["data_manifest_sha256"] == \
        hashlib.sha256((bin3 / "manifest.json").read_bytes()).hexdigest()
    assert rec["training_data_check"].startswith("verified: ")
    info = read_checkpoint_info(run / "checkpoints" / "checkpoint_last.pt")["training"]
    assert (info["experiment"], info["level"], info["data_seed"]) == ("exp1", "entropy_3.0", 5)


def test_score_refuses_data_the_checkpoint_was_not_trained_on(trained, tmp_path, capsys):
    run, bin15 = trained["run"], trained["bin15"]
    gen = run / "generate-last.txt"
    assert cli(["score", str(gen), "--out", str(tmp_path / "s"), "--data", str(bin15)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert f"--data {bin15} is exp1 entropy_1.5 (data seed 5), but checkpoint " in err[0]
    assert "was trained on exp1 entropy_3.0 (data seed 5)" in err[0] and "Fix: " in err[0]
    assert not (tmp_path / "s").exists()


def test_without_the_checkpoint_the_decodes_log_holds_the_record(trained, tmp_path, capsys):
    run, bin3, bin15 = trained["run"], trained["bin3"], trained["bin15"]
    moved = tmp_path / "moved"  # the decode and its log, the checkpoints moved away
    moved.mkdir()
    for name in ("generate-last.txt", "generate-last.log"):
        shutil.copy(run / name, moved / name)
    gen = moved / "generate-last.txt"
    assert cli(["score", str(gen), "--out", str(tmp_path / "a"), "--data", str(bin15),
                "--preset", PRESET, "--seed", "3"]) == 2
    err = capsys.readouterr().err
    assert f"but the checkpoint record in {moved / 'generate-last.log'} was trained on exp1 " \
        "entropy_3.0" in err
    assert cli(["score", str(gen), "--out", str(tmp_path / "b"), "--data", str(bin3),
                "--preset", PRESET, "--seed", "3"]) == 0
    rec = json.loads((tmp_path / "b" / "score.json").read_text())
    assert rec["training_data_check"] == "verified: the data's manifest.json is the one the " \
        f"checkpoint record in {moved / 'generate-last.log'} was trained on; preset {PRESET} " \
        f"verified by its arguments' hash, seed 3 taken as given (not in " \
        f"{moved / 'generate-last.log'})"
    assert rec["schedule"]["max_update"] == 4 and rec["schedule"]["updates"] == 4
    # the log's record holds the arguments' hash: another preset of the experiment is refused,
    # and without --preset the hash finds the run's
    other = next(n for n, p in load_presets().items()
                 if p.get("experiment") == "exp1" and n != PRESET)
    capsys.readouterr()
    assert cli(["score", str(gen), "--out", str(tmp_path / "w"), "--data", str(bin3),
                "--preset", other, "--seed", "3"]) == 2
    err = capsys.readouterr().err
    assert f"--preset {other} gives other fairseq-train arguments" in err
    assert f"than the checkpoint record in {moved / 'generate-last.log'} records" in err
    assert not (tmp_path / "w").exists()
    assert cli(["score", str(gen), "--out", str(tmp_path / "h"), "--data", str(bin3),
                "--seed", "3"]) == 0
    assert json.loads((tmp_path / "h" / "score.json").read_text())["preset"] == PRESET
    # neither checkpoint nor log: refused, unless --unverified says to trust the options
    (moved / "generate-last.log").unlink()
    capsys.readouterr()
    assert cli(["score", str(gen), "--out", str(tmp_path / "c"), "--data", str(bin15),
                "--preset", PRESET, "--seed", "3"]) == 2
    err = capsys.readouterr().err
    assert "cannot be verified. Fix: pass --path with the checkpoint" in err
    assert "--unverified" in err and not (tmp_path / "c").exists()
    assert cli(["score", str(gen), "--out", str(tmp_path / "c"), "--data", str(bin3),
                "--preset", PRESET, "--seed", "3", "--unverified"]) == 0
    rec = json.loads((tmp_path / "c" / "score.json").read_text())
    assert rec["training_data_check"].startswith("not verified: no checkpoint at ")
    assert rec["schedule_label"] == "unknown"
    assert "training data: not verified: " in capsys.readouterr().out


def test_an_old_checkpoint_scores_with_a_statement_of_what_is_unverified():
    """Checkpoints written before the record (tests/fixtures/old_checkpoints) hold no data
    hash: the data check says so instead of refusing; their schedule is still read."""
    info = read_checkpoint_info(FIXTURES / "scan_transformer_learned.pt")
    assert info["training"]["data_manifest_sha256"] is None
    assert info["training"]["updates"] == 6 and info["training"]["epoch_state"] == [2, 2]
    statement = check_training_data(info["training"], "checkpoint old.pt", {}, "ab" * 32, "d")
    assert statement.startswith("not verified: checkpoint old.pt does not record its training")
    assert check_training_data({"data_manifest_sha256": ""}, "c", {}, "x", "d") == \
        "not verified: c was trained on data without a manifest.json"
    with pytest.raises(UserError, match="Fix: pass --data"):
        check_training_data({"data_manifest_sha256": "cd" * 32}, "c", {}, "ab" * 32, "d")
    # 1 whole epoch and 2 of ceil(16 / 4) = 4 updates of the second
    sched = schedule_record(dict(info["training"], batch_size=4), 16)
    assert sched["epochs"] == 1.5 and sched["max_update"] == info["training"]["max_update"]


def test_a_changed_schedule_is_refused_not_skipped(trained):
    root, run, bin3 = trained["root"], trained["run"], trained["bin3"]
    before = (run / "last" / "score.json").read_bytes()
    again = run_level(PRESET, bin3, run, seed=3, max_update=4, out=io.StringIO())
    assert again.status == "skipped"
    with pytest.raises(ScheduleChanged, match=f"{run} was scored with max_update 4, the run "
                                              "asks 40. Fix: move or remove"):
        run_level(PRESET, bin3, run, seed=3, max_update=40, out=io.StringIO())
    with pytest.raises(ScheduleChanged, match="max_update 4, the run asks 240"):
        run_level(PRESET, bin3, run, seed=3, out=io.StringIO())  # the preset's own schedule
    assert run_cell(cell(4), root).status == "skipped"
    result = run_cell(cell(40), root)
    assert result.status == "failed"
    assert result.reason.startswith(f"{run} was scored with max_update 4, the run asks 40.")
    assert (run / "last" / "score.json").read_bytes() == before  # nothing was retrained


def write_score(path, max_update, seed, accuracy, sha="a1" * 32):
    rec = {"experiment": "exp1", "preset": PRESET, "model": "transformer_sinusoidal",
           "n_train": 6000, "level": "entropy_3.0", "entropy_bits": 3.0,
           "checkpoint": "last", "seed": seed, "data_seed": 1, "accuracy": accuracy}
    if max_update is not None:
        rec["schedule"] = {"max_update": max_update, "max_epoch": 0, "updates": max_update,
                           "epochs": None, "train_args_sha256": sha,
                           "preset_max_update": 4500}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec))


def test_runs_of_different_schedules_are_never_one_cell(tmp_path, capsys):
    runs = tmp_path / "runs"
    write_score(runs / "a/score.json", 60, 1, 0.5)
    write_score(runs / "b/score.json", 40, 2, 0.1)
    write_score(runs / "c/score.json", 40, 3, 0.3)
    write_score(runs / "d/score.json", None, 4, 0.9)  # written before schedules were recorded
    assert cli(["aggregate", str(runs), "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    summary = (tmp_path / "r" / "summary.tsv").read_text().splitlines()
    header = summary[0].split("\t")
    got = {r[header.index("schedule")]: (r[header.index("mean")], r[header.index("n")],
                                         r[header.index("updates")])
           for r in (line.split("\t") for line in summary[1:])}
    assert got == {"max_update=40 args=a1a1a1a1": ("0.200000", "2", "40"),
                   "max_update=60 args=a1a1a1a1": ("0.500000", "1", "60"),
                   "unknown": ("0.900000", "1", "")}
    # the agreement with the paper names the schedule and how it differs from the preset's
    assert "(schedule max_update=40 args=a1a1a1a1 (40 updates), shorter than the preset's " \
        "own 4500 updates: not the paper's schedule)" in out
    report = (tmp_path / "r" / "report.md").read_text()
    assert "Schedules (runs of different schedules are different cells" in report
    assert "shorter than the preset's own 4500 updates" in report


def test_resuming_on_other_data_is_refused_before_training(trained, tmp_path):
    """A cut-off run (its checkpoint_last.pt, no finished-training mark) resumed on the 1.5-bit
    level is refused with both levels named, and fairseq-train is not started."""
    run, bin15 = trained["run"], trained["bin15"]
    cut = tmp_path / "cut"
    (cut / "checkpoints").mkdir(parents=True)
    shutil.copy(run / "checkpoints" / "checkpoint_last.pt", cut / "checkpoints")
    with pytest.raises(ScheduleChanged) as e:
        run_level(PRESET, bin15, cut, seed=3, max_update=4, device="cpu", out=io.StringIO())
    msg = str(e.value)
    assert "holds a run started (and cut off) on exp1 level entropy_3.0 (data seed 5)" in msg
    assert f"the run asks {bin15}: exp1 level entropy_1.5 (data seed 5)" in msg
    assert "Fix: " in msg and not (cut / "train.log").exists()


def test_extra_arguments_give_their_own_schedule_and_are_never_mixed(trained, tmp_path):
    """A run with fairseq-train arguments after the preset's (``run ... -- ARGS``) records
    their hash: its schedule label gains ``extra=``, so it never averages with the preset's
    own runs of the same seed, and its run directory is never skipped, resumed or decoded
    under other extra arguments."""
    from fairseq_entropy.analysis.aggregate import aggregate

    bin3, plain = trained["bin3"], trained["run"]
    extra = ["--weight-decay", "0.05"]
    run = tmp_path / "wd" / "seed3"
    result = run_level(PRESET, bin3, run, seed=3, max_update=4, device="cpu", gen_batch=64,
                       score_best=False, extra_args=extra, out=io.StringIO())
    assert result.status == "done"
    sha = hashlib.sha256("--weight-decay\n0.05\n".encode()).hexdigest()
    rec = json.loads((run / "last" / "score.json").read_text())
    assert rec["schedule"]["extra_args_sha256"] == sha
    own = json.loads((plain / "last" / "score.json").read_text())["schedule_label"]
    assert rec["schedule_label"] == f"{own} extra={sha[:8]}"
    # the same seed with and without the extra arguments: two cells, not one of two seeds
    aggregate([str(plain), str(run)], str(tmp_path / "agg"))
    lines = (tmp_path / "agg" / "results.tsv").read_text().splitlines()
    header = lines[0].split("\t")
    schedules = sorted(row.split("\t")[header.index("schedule")] for row in lines[1:])
    assert schedules == sorted([own, f"{own} extra={sha[:8]}"])
    # asked again without them, or with others: refused, naming both
    with pytest.raises(ScheduleChanged, match=r"after --: sha256 " + sha[:12]
                       + r"; the run asks none"):
        run_level(PRESET, bin3, run, seed=3, max_update=4, device="cpu", score_best=False,
                  out=io.StringIO())
    (run / "last" / "score.json").unlink()  # trained, not scored: decoding is refused too
    with pytest.raises(ScheduleChanged, match="the run asks sha256"):
        run_level(PRESET, bin3, run, seed=3, max_update=4, device="cpu", score_best=False,
                  extra_args=["--weight-decay", "0.1"], out=io.StringIO())


def test_a_run_selected_by_validation_is_not_rescored_as_test_loss(trained, tmp_path):
    """A run trained keeping its best checkpoint by validation seq_acc (SELECT=valid) is
    refused when asked to score its best checkpoint as the lowest test loss
    (SELECT=test-loss), and accepted when only its last checkpoint is scored."""
    run, bin3 = trained["run"], trained["bin3"]
    info = read_checkpoint_info(run / "checkpoints" / "checkpoint_last.pt")["training"]
    assert info["best_checkpoint_metric"] == "seq_acc"
    with pytest.raises(ScheduleChanged, match=r"best seq_acc .*\(SELECT=valid\); the run "
                       r"asks for the best loss \(SELECT=test-loss\)"):
        run_level(PRESET, bin3, run, seed=3, max_update=4, device="cpu", select="test-loss",
                  out=io.StringIO())
    skipped = run_level(PRESET, bin3, run, seed=3, max_update=4, device="cpu",
                        select="test-loss", score_best=False, out=io.StringIO())
    assert skipped.status == "skipped"


@pytest.mark.parametrize("name, options, message", [
    # the decode's name says best: the default label follows it, --checkpoint last is refused
    ("generate-best.txt", ["--checkpoint", "last"],
     "is named as the decode of the best checkpoint, but the checkpoint label is last. "
     "Fix: pass --checkpoint best"),
    ("decode.txt", ["--checkpoint", "best", "--path", "checkpoint_last.pt"],
     "is the last checkpoint, but the checkpoint label is best. Fix: pass --checkpoint last"),
    ("decode.txt", ["--checkpoint", "last", "--path", "checkpoint_best.pt"],
     "is the best checkpoint, but the checkpoint label is last. Fix: pass --checkpoint best"),
    # trained keeping the best validation seq_acc: not the lowest test loss
    ("decode.txt", ["--checkpoint", "test-loss", "--path", "checkpoint_best.pt"],
     "was trained keeping its best checkpoint by seq_acc on valid, but the label test-loss "
     "means the best loss on the test split. Fix: pass --checkpoint best"),
])
def test_score_refuses_a_checkpoint_label_that_the_files_contradict(trained, tmp_path, capsys,
                                                                     name, options, message):
    run = trained["run"]
    assert (run / "checkpoints" / "checkpoint_best.pt").is_file()
    gen = tmp_path / name
    shutil.copy(run / "generate-last.txt", gen)
    options = [str(run / "checkpoints" / o) if o.startswith("checkpoint_") else o
               for o in options]
    assert cli(["score", str(gen), "--out", str(tmp_path / "s"), "--data",
                str(trained["bin3"]), *options]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("loaded, options, message", [
    ("checkpoint_best.pt", ["--checkpoint", "last"],
     "the best checkpoint, but the checkpoint label is last. Fix: pass --checkpoint best "
     "(or test-loss)"),
    ("checkpoint_last.pt", ["--checkpoint", "best"],
     "the last checkpoint, but the checkpoint label is best. Fix: pass --checkpoint last"),
])
def test_score_refuses_a_label_that_the_decodes_log_contradicts(trained, tmp_path, capsys,
                                                                loaded, options, message):
    run = trained["run"]
    gen = tmp_path / "decode.txt"
    shutil.copy(run / "generate-last.txt", gen)
    path = run / "checkpoints" / loaded
    # fairseq-generate's own line, as its log (generate-<label>.log, decode.log) keeps it
    (tmp_path / "decode.log").write_text(
        f"2026-12-04 10:00:00 | INFO | fairseq_cli.generate | loading model(s) from {path}\n")
    assert cli(["score", str(gen), "--out", str(tmp_path / "s"), "--data",
                str(trained["bin3"]), *options]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'decode.log'} says the decode loaded {path}, " + message in err, err
    assert not (tmp_path / "s").exists()
    # the log agreeing with the label: scored
    assert cli(["score", str(gen), "--out", str(tmp_path / "s"), "--data",
                str(trained["bin3"]), "--path", str(path), "--checkpoint",
                "last" if loaded == "checkpoint_last.pt" else "best"]) == 0


def test_an_unlabelled_decode_takes_its_label_from_the_checkpoint_or_is_refused(
        trained, tmp_path, capsys):
    """A decode whose name holds no label (not generate-<label>.txt) and no --checkpoint: the
    label is that of the checkpoint --path names, else of the one its log says it loaded;
    with neither, score refuses instead of taking the last checkpoint's provenance."""
    run = trained["run"]
    gen = tmp_path / "decode.txt"
    shutil.copy(run / "generate-last.txt", gen)
    best = run / "checkpoints" / "checkpoint_best.pt"
    assert cli(["score", str(gen), "--out", str(tmp_path / "p"), "--path", str(best)]) == 0
    assert json.loads((tmp_path / "p" / "score.json").read_text())["checkpoint"] == "best"
    (tmp_path / "decode.log").write_text(
        f"2026-12-04 10:00:00 | INFO | fairseq_cli.generate | loading model(s) from {best}\n")
    assert cli(["score", str(gen), "--out", str(tmp_path / "l"), "--data", str(trained["bin3"]),
                "--preset", PRESET, "--seed", "3", "--unverified"]) == 0
    assert json.loads((tmp_path / "l" / "score.json").read_text())["checkpoint"] == "best"
    (tmp_path / "decode.log").unlink()
    capsys.readouterr()
    assert cli(["score", str(gen), "--out", str(tmp_path / "n"), "--data",
                str(trained["bin3"])]) == 2
    err = capsys.readouterr().err
    assert f"{gen}: which checkpoint was decoded is not known" in err
    assert "Fix: pass --checkpoint last (or best, test-loss)" in err
    assert not (tmp_path / "n").exists()


def test_score_takes_the_checkpoint_label_from_the_decodes_name(trained, tmp_path):
    run = trained["run"]
    gen = tmp_path / "generate-best.txt"
    shutil.copy(run / "generate-last.txt", gen)
    assert cli(["score", str(gen), "--out", str(tmp_path / "s"), "--path",
                str(run / "checkpoints" / "checkpoint_best.pt")]) == 0
    assert json.loads((tmp_path / "s" / "score.json").read_text())["checkpoint"] == "best"


def test_the_label_of_a_best_checkpoint_follows_the_selection_it_was_kept_by():
    assert selection_label("seq_acc", "valid") == "best"
    assert selection_label("loss", "test,valid") == "test-loss"
    assert selection_label("loss", "valid") is None        # fairseq's default selection
    assert selection_label("bleu", "valid") is None
    check_selection("c.pt", "best", "seq_acc", "valid")
    check_selection("c.pt", "test-loss", "loss", "test,valid")
    check_selection("c.pt", "last", "loss", "valid")       # the last checkpoint: any selection
    check_selection("c.pt", "best", None, None)            # not recorded: not compared
    with pytest.raises(UserError, match=r"by loss on valid, but the label best means the best "
                       r"seq_acc\. Fix: score its last checkpoint"):
        check_selection("c.pt", "best", "loss", "valid")
    with pytest.raises(UserError, match=r"label test-loss means the best loss on the test "
                       r"split\. Fix: score its last checkpoint"):
        check_selection("c.pt", "test-loss", "loss", "valid")
    with pytest.raises(UserError, match=r"Fix: pass --checkpoint test-loss"):
        check_selection("c.pt", "best", "loss", "test,valid")


@pytest.mark.parametrize("record,needle", [
    ('{"training": "x"}', "training entry is 'x', not a JSON object"),
    ('[1, 2]', "training entry is [1, 2], not a JSON object"),
    ('{"training": {"data_manifest_sha256": 5}}', "data_manifest_sha256 is 5, not a JSON str"),
    ('{"training": {"updates": "9"}}', "updates is '9', not a JSON int"),
    ('{"training": {"epoch_state": [3]}}', "epoch_state is [3], not two integers"),
])
def test_a_malformed_logged_checkpoint_record_is_a_data_error(tmp_path, record, needle):
    """A hand-edited generate log: a one-line error with its line, not a traceback."""
    from fairseq_entropy.analysis.provenance import RECORD_MARK, read_generate_log
    from fairseq_entropy.errors import DataFormatError

    log = tmp_path / "generate-last.log"
    log.write_text(f"loading\n2026 | INFO | {RECORD_MARK}{record}\n")
    with pytest.raises(DataFormatError, match=rf"^{log}:2: the checkpoint record's "):
        read_generate_log(log)
    with pytest.raises(DataFormatError) as e:
        read_generate_log(log)
    assert needle in str(e.value) and "Fix: decode again" in str(e.value)
    good = '{"training": {"updates": 9, "epoch_state": [2, 0], "level": "entropy_1.5"}}'
    log.write_text(f"2026 | INFO | {RECORD_MARK}{good}\n")
    assert read_generate_log(log)["updates"] == 9


@pytest.mark.parametrize("schedule,finished", [
    ({"max_update": 300, "max_epoch": 0, "updates": 300, "epochs": 10.0}, True),
    ({"max_update": 300, "max_epoch": 0, "updates": 100, "epochs": 3.333}, False),
    # an epoch limit reached before max_update (fairseq stops at whichever comes first)
    ({"max_update": 300, "max_epoch": 5, "updates": 150, "epochs": 5.0}, True),
    ({"max_update": 0, "max_epoch": 5, "updates": 60, "epochs": 2.0}, False),
    ({"max_update": 300, "max_epoch": 0, "updates": None, "epochs": None}, None),
    ({}, None),
])
def test_training_finished_reads_the_limits_that_stop_fairseq_train(schedule, finished):
    assert training_finished(schedule) is finished


def test_a_cut_off_last_checkpoint_is_never_a_seed_of_the_finished_runs_cell(tmp_path):
    """A last checkpoint saved before max_update (a killed or preempted training) gets
    ``unfinished=<updates>`` in its schedule label, so aggregate keeps it out of the finished
    runs' cell; a best checkpoint (saved early by design) does not."""
    base = {"max_update": 300, "max_epoch": 0, "train_args_sha256": "ab" * 32}
    done = {**base, "updates": 300, "epochs": 10.0}
    cut = {**base, "updates": 30, "epochs": 1.0}
    assert schedule_label(done, "last") == "max_update=300 args=abababab"
    assert schedule_label(cut, "last") == "max_update=300 args=abababab unfinished=30"
    assert schedule_label(cut, "best") == "max_update=300 args=abababab"
    rec = {"experiment": "exp1", "preset": "exp1_fconv", "model": "cnn", "n_train": 6000,
           "level": "entropy_1.5", "entropy_bits": 1.5, "checkpoint": "last", "data_seed": 1,
           "n": 100}
    for seed, schedule, correct in ((1, done, 99), (2, cut, 1)):
        d = tmp_path / f"seed{seed}"
        d.mkdir()
        (d / "score.json").write_text(json.dumps({**rec, "seed": seed, "schedule": schedule,
                                                  "correct": correct,
                                                  "accuracy": correct / 100}))
    rows = collect_scores([str(tmp_path)])
    assert sorted((r["seed"], r["schedule"]) for r in rows) == [
        (1, "max_update=300 args=abababab"), (2, "max_update=300 args=abababab unfinished=30")]
    cells = summarize(rows)
    assert sorted((c["n"], c["mean"]) for c in cells) == [(1, 0.01), (1, 0.99)]


def test_score_records_the_decodes_generation_options_from_its_log(trained):
    """The run's own decode: fairseq-generate's logged configuration gives greedy decoding
    and the length limit run passed (the longest reference of the split)."""
    rec = json.loads((trained["run"] / "last" / "score.json").read_text())
    # SCAN data: run's fixed limit of 60 actions (the longest SCAN output has 48)
    assert rec["decoding"] == {"beam": 1, "max_len_a": 0.0, "max_len_b": 60, "lenpen": 1.0,
                               "unkpen": 0.0, "min_len": 1, "no_repeat_ngram_size": 0,
                               "match_source_len": False}
    assert "beam=" not in rec["schedule_label"]


@pytest.mark.parametrize("option, value, flag", [
    ("score_reference", True, "--score-reference"),  # prints the reference as the hypothesis
    ("prefix_size", 2, "--prefix-size"),  # forces the reference's first tokens
    ("sampling", True, "--sampling"),
    ("nbest", 3, "--nbest"),
])
def test_score_refuses_a_decode_that_is_not_the_models_own_output(trained, tmp_path, capsys,
                                                                  option, value, flag):
    run = trained["run"]
    gen = tmp_path / "generate-last.txt"
    shutil.copy(run / "generate-last.txt", gen)
    log = (run / "generate-last.log").read_text()
    config = [ln for ln in log.splitlines() if "'generation': {" in ln]
    assert len(config) == 1, "fairseq-generate logs its configuration once"
    default = {"score_reference": False, "prefix_size": 0, "sampling": False, "nbest": 1}
    edited = config[0].replace(f"'{option}': {default[option]!r},", f"'{option}': {value!r},")
    assert edited != config[0]
    (tmp_path / "generate-last.log").write_text(log.replace(config[0], edited))
    assert cli(["score", str(gen), "--out", str(tmp_path / "s"), "--data",
                str(trained["bin3"]), "--path",
                str(run / "checkpoints" / "checkpoint_last.pt")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'generate-last.log'}: the decode was made with {flag} {value!r}" in err
    assert f"Fix: decode again without {flag}" in err and not (tmp_path / "s").exists()


def test_a_beam_decode_is_its_own_cell():
    sched = {"max_update": 300, "max_epoch": 0, "updates": 300, "epochs": 10.0,
             "train_args_sha256": "cd" * 32}
    assert schedule_label(sched, "last", {"beam": 1}) == "max_update=300 args=cdcdcdcd"
    assert schedule_label(sched, "last", {"beam": 5}) == "max_update=300 args=cdcdcdcd beam=5"
    assert schedule_label({}, "last", {"beam": 5}) == "unknown beam=5"
    assert schedule_label(sched, "last", None) == "max_update=300 args=cdcdcdcd"
