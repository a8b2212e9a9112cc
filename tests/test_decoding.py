"""Decoding in a run: a progress line while fairseq-generate works, and a decode of a sample
of the test split for a smoke test, marked as such and kept apart by ``aggregate``."""
import io
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from fairseq_entropy.analysis.aggregate import collect_scores
from fairseq_entropy.experiments.processes import ProcessGroups
from fairseq_entropy.experiments.decoding import count_hypotheses, sample_args, split_size
from fairseq_entropy.experiments.run import _generate, run_level, scored
from fairseq_entropy.progress import decoding_line, parse_decoding, parse_progress
from _toy import tiny_level  # noqa: E402

BIN = Path(sys.executable).parent


def test_decoding_line_is_read_back_by_both_parsers():
    line = decoding_line("last", 1200, 7056, 60.0)
    # 5856 sentences left at 20 sentences/s
    assert line == ("progress: decoding last | 1200/7056 sentences | 60 s elapsed | "
                    "~293 s left")
    assert parse_decoding(f"x\n2026 | {line}\n") == ("last", 1200, 7056)
    assert parse_progress(line) == (60.0, 293.0)  # what the sweep's estimate reads
    unknown = decoding_line("best", 0, None, 5.0)
    assert unknown == "progress: decoding best | 0/? sentences | 5 s elapsed | ? s left"
    assert parse_decoding(unknown) == ("best", 0, None) and parse_progress(unknown) is None


def test_sample_args_stride_over_length_sorted_batches():
    # 7056 test sentences, a sample of 500: batches of 31, every 14th of the 228 batches
    opts, batch, expected = sample_args(7056, 500, 512)
    assert opts == ("--distributed-world-size", "14", "--distributed-rank", "0")
    assert batch == 31 and expected == 17 * 31  # ceil(228 / 14) batches
    opts, batch, expected = sample_args(48, 12, 64)
    assert opts[1] == "4" and batch == 1 and expected == 12
    assert sample_args(48, 100, 64) == ((), 64, 48)  # the whole split


FAKE_GENERATE = textwrap.dedent("""\
    import sys, time
    for i in range(6):
        print(f"S-{i}\\tjump\\nT-{i}\\tI_JUMP\\nH-{i}\\t-0.1\\tI_JUMP", flush=True)
        time.sleep(0.25)
    """)


def test_generate_prints_progress_with_the_sentences_decoded_so_far(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    script = tmp_path / "fake_generate.py"
    script.write_text(FAKE_GENERATE)
    out = io.StringIO()
    _generate(ProcessGroups(), [sys.executable, str(script)], run, "last", (), total=6,
              out=out, interval=0.3)
    assert count_hypotheses(run / "generate-last.txt") == 6
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3 and all(ln.startswith(" [run] progress: decoding last | ")
                                   for ln in lines)
    counts = [parse_decoding(ln)[1:] for ln in lines]
    assert all(total == 6 and 0 <= done <= 6 for done, total in counts)
    assert [d for d, _ in counts] == sorted(d for d, _ in counts) and counts[-1][0] >= 2
    # the same lines in train.log, where the sweep reads a run's time left
    assert (run / "train.log").read_text().splitlines() == [ln[len(" [run] "):]
                                                            for ln in lines]


@pytest.fixture(scope="module")
def databin(tmp_path_factory):
    """One binarized level: 320 training commands, 48 of the 7056 test commands."""
    tmp = tmp_path_factory.mktemp("level")
    return tiny_level(tmp / "data", tmp / "bin")


@pytest.mark.slow
def test_a_sample_decode_is_marked_kept_apart_and_leaves_the_run_unfinished(databin,
                                                                             tmp_path):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    assert split_size(databin) == 48
    run = tmp_path / "entropy_3.0"
    out = io.StringIO()
    result = run_level("exp1_fconv", databin, run, seed=3, max_update=5, device="cpu",
                       out=out, decode_sample=12)
    sample = json.loads((run / "sample" / "score.json").read_text())
    assert sample["test_sample"] == {"n": 12, "split_size": 48} and sample["n"] == 12
    assert sample["checkpoint"] == "last" and result.accuracy == sample["accuracy"]
    hyps = [ln for ln in (run / "generate-sample.txt").read_text().splitlines()
            if ln.startswith("H-")]
    assert len(hyps) == 12
    assert not (run / "last").exists() and scored(run) is None  # not a finished run
    rows = collect_scores([run])
    assert [r["experiment"] for r in rows] == ["exp1+test-sample"]

    # the full run later: the same training, the whole split, a full score of its own
    full = io.StringIO()
    result = run_level("exp1_fconv", databin, run, seed=3, max_update=5, device="cpu",
                       out=full, score_best=False)
    assert "skip training" in full.getvalue()
    last = json.loads((run / "last" / "score.json").read_text())
    assert last["n"] == 48 and "test_sample" not in last
    assert sorted(r["experiment"] for r in collect_scores([run])) == ["exp1",
                                                                      "exp1+test-sample"]
