"""A toy SCAN vocabulary, examples and task stand-in shared by the model tests, and small
grammar levels and fairseq command lines shared by the task tests."""

import os
import subprocess
import sys
from pathlib import Path

from fairseq.data import Dictionary

WORDS = "walk run look jump twice thrice and left right".split()
ACTIONS = "WALK RUN LOOK JUMP LTURN RTURN".split()
PAIRS = [
    ("walk", "WALK"),
    ("run twice", "RUN RUN"),
    ("jump left thrice", "LTURN JUMP LTURN JUMP LTURN JUMP"),
    ("look right and walk twice", "RTURN LOOK WALK WALK"),
    ("run left", "LTURN RUN"),
]


def make_dictionary() -> Dictionary:
    """One shared source/target dictionary of :data:`WORDS` and :data:`ACTIONS`."""
    d = Dictionary()
    for w in WORDS + ACTIONS:
        d.add_symbol(w)
    return d


class FakeTask:
    """The two attributes ``build_model`` reads from a fairseq task."""

    def __init__(self, d):
        self.source_dictionary = d
        self.target_dictionary = d


def losses_before_and_after(model, sample, pad: int, lr: float, steps: int = 20):
    """Cross-entropy of ``model`` on one batch before and after ``steps`` Adam updates on it."""
    import torch
    import torch.nn.functional as F

    opt = torch.optim.Adam(model.parameters(), lr=lr)

    def loss_fn():
        logits, _ = model(**sample["net_input"])
        return F.cross_entropy(logits.view(-1, logits.size(-1)), sample["target"].view(-1),
                               ignore_index=pad)

    first = loss_fn().item()
    for _ in range(steps):
        opt.zero_grad()
        loss_fn().backward()
        opt.step()
    return first, loss_fn().item()


def run_fairseq(cmd, cwd) -> str:
    """Run a fairseq command line single-threaded in ``cwd``; fail the test with its stderr."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def write_tiny_corpus(root: Path, copies: int = 4) -> Path:
    """Write ``copies`` x :data:`PAIRS` as train/valid/test ``.in``/``.out`` files under ``root``
    and binarize them on the :func:`make_dictionary` vocabulary into the files that
    ``fairseq-preprocess --srcdict dict.txt --tgtdict dict.txt`` writes, byte for byte (its
    dictionaries, and each split's mmap ``.bin``/``.idx`` of ``Dictionary.encode_line``), in
    this process: a fairseq-preprocess process would import fairseq once more.
    Returns the binarized directory."""
    from fairseq.data import indexed_dataset

    dict_path = root / "dict.txt"
    dict_path.write_text("".join(f"{w} 1\n" for w in WORDS + ACTIONS))
    pairs = PAIRS * copies
    for split in ("train", "valid", "test"):
        (root / f"{split}.in").write_text("".join(s + "\n" for s, _ in pairs))
        (root / f"{split}.out").write_text("".join(t + "\n" for _, t in pairs))
    bin_dir = root / "bin"
    bin_dir.mkdir()
    d = Dictionary.load(str(dict_path))
    for lang in ("in", "out"):
        d.save(str(bin_dir / f"dict.{lang}.txt"))
        for split in ("train", "valid", "test"):
            prefix = str(bin_dir / f"{split}.in-out.{lang}")
            builder = indexed_dataset.make_builder(prefix + ".bin", "mmap", vocab_size=len(d))
            for line in (root / f"{split}.{lang}").read_text().splitlines():
                builder.add_item(d.encode_line(line, add_if_not_exist=False))
            builder.finalize(prefix + ".idx")
    return bin_dir


def train_and_generate(tmp_path: Path, model_args, criterion_args, lr: float = 5e-3,
                       epochs: int = 3) -> list:
    """fairseq-train on the tiny corpus (4 x PAIRS) with ``--user-dir`` fairseq_entropy, then
    fairseq-generate the test split from ``checkpoint_last.pt``; returns the ``H-`` lines."""
    import fairseq_entropy

    bin_dir = write_tiny_corpus(tmp_path)
    common = ["--user-dir", os.path.dirname(fairseq_entropy.__file__), "--task", "translation",
              "--source-lang", "in", "--target-lang", "out", "--cpu", "--num-workers", "0"]
    run_fairseq([sys.executable, "-m", "fairseq_cli.train", str(bin_dir), *common, *model_args,
                 *criterion_args, "--optimizer", "adam", "--lr", str(lr), "--batch-size", "4",
                 "--max-epoch", str(epochs), "--save-dir", str(tmp_path / "ck"),
                 "--no-epoch-checkpoints", "--log-format", "simple"], cwd=tmp_path)
    out = run_fairseq([sys.executable, "-m", "fairseq_cli.generate", str(bin_dir), *common,
                       "--path", str(tmp_path / "ck" / "checkpoint_last.pt"),
                       "--gen-subset", "test", "--beam", "1", "--max-len-a", "0",
                       "--max-len-b", "60", "--batch-size", "512",
                       "--required-batch-size-multiple", "1"], cwd=tmp_path)
    return [line for line in out.splitlines() if line.startswith("H-")]


def make_sample(d, pairs=PAIRS, left_pad_source=True):
    """A collated fairseq batch of ``pairs`` (source, target) on dictionary ``d``."""
    from fairseq.data import LanguagePairDataset

    def enc(s):
        return d.encode_line(s, add_if_not_exist=False, append_eos=True).long()

    src = [enc(s) for s, _ in pairs]
    tgt = [enc(t) for _, t in pairs]
    ds = LanguagePairDataset(src, [len(x) for x in src], d, tgt, [len(x) for x in tgt], d,
                             left_pad_source=left_pad_source)
    return ds.collater([ds[i] for i in range(len(pairs))])


def greedy(model, src_tokens, src_lengths, steps, eos, incremental=True, forbid=()):
    """Greedy tokens and per-step logits, step by step (incremental) or by full re-runs.

    ``forbid``: (step, token) pairs never chosen, to mimic fairseq's generator rules.
    Returns (tokens ``(batch, steps)``, logits ``(batch, steps, vocab)``)."""
    import torch

    enc = model.encoder(src_tokens, src_lengths=src_lengths)
    tokens = torch.full((src_tokens.size(0), 1), eos, dtype=torch.long)
    state = {}
    logits = []
    for _ in range(steps):
        if incremental:
            out, _ = model.decoder(tokens, encoder_out=enc, incremental_state=state)
        else:
            out, _ = model.decoder(tokens, encoder_out=enc)
        logits.append(out[:, -1])
        choice = out[:, -1].clone()
        for step, tok in forbid:
            if step is None or step == tokens.size(1) - 1:
                choice[:, tok] = float("-inf")
        tokens = torch.cat([tokens, choice.argmax(-1, keepdim=True)], dim=1)
    return tokens[:, 1:], torch.stack(logits, dim=1)


def assert_incremental_equals_full(model, d, steps, atol):
    """Greedy decoding of :func:`make_sample` step by step (``incremental_state``) gives the
    tokens, and the logits within ``atol``, of re-running the decoder on the whole prefix at
    every step.  Puts ``model`` in eval mode; returns (net_input, tokens, logits)."""
    import torch

    model.eval()
    net = make_sample(d)["net_input"]
    with torch.no_grad():
        inc_tokens, inc_logits = greedy(model, net["src_tokens"], net["src_lengths"], steps,
                                        d.eos())
        full_tokens, full_logits = greedy(model, net["src_tokens"], net["src_lengths"], steps,
                                          d.eos(), incremental=False)
    assert torch.equal(inc_tokens, full_tokens)
    assert torch.allclose(inc_logits, full_logits, atol=atol)
    return net, inc_tokens, inc_logits


def assert_batch_equals_alone(model, d, steps, atol, left_pad_source=True,
                              teacher_forced=False):
    """Greedy decoding of the padded :func:`make_sample` batch gives every sentence the
    tokens, and the logits within ``atol``, it gets when decoded alone; with
    ``teacher_forced`` also the full (teacher-forced) forward's logits. Puts ``model`` in
    eval mode."""
    import torch

    model.eval()
    batch = make_sample(d, left_pad_source=left_pad_source)
    with torch.no_grad():
        batch_tokens, batch_logits = greedy(model, batch["net_input"]["src_tokens"],
                                            batch["net_input"]["src_lengths"], steps, d.eos())
        batch_tf = model(**batch["net_input"])[0] if teacher_forced else None
        for row, i in enumerate(batch["id"].tolist()):
            alone = make_sample(d, [PAIRS[i]])["net_input"]
            tokens, logits = greedy(model, alone["src_tokens"], alone["src_lengths"], steps,
                                    d.eos())
            assert torch.equal(tokens[0], batch_tokens[row])
            assert torch.allclose(logits[0], batch_logits[row], atol=atol)
            if teacher_forced:
                tf, _ = model(**alone)
                assert torch.allclose(tf[0], batch_tf[row, :tf.size(1)], atol=atol)


def cut_and_binarize(level: Path, out: Path, every: int = 147) -> Path:
    """Keep every ``every``-th test command of the built ``level`` (48 of the 7056 exp1 test
    commands at 147; the same 48 at every exp1 level), record the new test split in its
    ``manifest.json`` (:func:`recount`), and binarize the level into ``out``."""

    from fairseq_entropy.cli import main as cli

    for ext in ("in", "out"):
        lines = (level / f"test.{ext}").read_text().splitlines()[::every]
        (level / f"test.{ext}").write_text("\n".join(lines) + "\n")
    recount(level, "test")
    assert cli(["binarize", str(level), "--out", str(out)]) == 0
    return out


def recount(level: Path, split: str) -> None:
    """Record the size and slot statistics of ``level``'s edited ``split`` in its
    ``manifest.json`` (``binarize`` refuses a split that its manifest misstates)."""
    import json

    from fairseq_entropy.scan.datafiles import parse_examples, read_pair
    from fairseq_entropy.scan.entropy import SlotStatistics
    from fairseq_entropy.scan.grammar import Grammar

    manifest = json.loads((level / "manifest.json").read_text())
    grammar = Grammar.paper()
    commands = parse_examples(read_pair(level / split, grammar), grammar)
    manifest["sizes"][split] = len(commands)
    manifest["slots"][split] = SlotStatistics.of(commands, manifest["verbs"]).as_dict()
    (level / "manifest.json").write_text(json.dumps(manifest))


def tiny_level(build: Path, out: Path, seed: int = 5, n: int = 320, bits: float = 3) -> Path:
    """Build the exp1 level of ``bits`` (N = ``n``, data seed ``seed``) under ``build`` and
    binarize it, with 48 test commands (:func:`cut_and_binarize`), into ``out``."""
    from fairseq_entropy.cli import main as cli

    assert cli(["build", "exp1", "--out", str(build), "--levels", f"{bits:g}", "--n", str(n),
                "--seed", str(seed)]) == 0
    return cut_and_binarize(build / f"entropy_{float(bits):.1f}", out)


def first_commands(grammar, n: int) -> list:
    """The first ``n`` two-clause commands of ``grammar`` as ``Example(command, actions)``."""
    from fairseq_entropy.scan.datafiles import Example

    examples = []
    for c in grammar.commands(one_clause=False):
        examples.append(Example(str(c), " ".join(grammar.interpret(c))))
        if len(examples) == n:
            break
    return examples


def write_grammar_level(root: Path, grammar, n: int, fmt: str = "pairs") -> tuple:
    """:func:`first_commands` of ``grammar`` as its train, valid and test split, binarized in
    ``fmt`` (``pairs`` or ``lm``) with the grammar's fixed dictionary under ``root``; returns
    the data directory and the examples."""
    from fairseq_entropy.scan.binarize import binarize_level
    from fairseq_entropy.scan.datafiles import write_pair

    examples = first_commands(grammar, n)
    raw = root / f"{grammar.name}_{fmt}_raw"
    raw.mkdir()
    for split in ("train", "valid", "test"):
        write_pair(raw / split, examples)
    return binarize_level(raw, root / f"{grammar.name}_{fmt}_bin", grammar, fmt=fmt), examples


def run_module(module: str, *args, cwd, stdin=None) -> subprocess.CompletedProcess:
    """``python -m module args`` single-threaded in ``cwd`` (a fairseq command line); the
    completed process, for the test to check its return code and output."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, input=stdin)
