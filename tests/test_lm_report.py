"""Decoder-only results in an aggregate: results.tsv keeps the model family, and the figure
draws the decoder-only curve in the encoder-decoder's panel, as its own dotted line."""

import csv
from pathlib import Path

from fairseq_entropy.analysis.aggregate import aggregate, read_results_tsv

REPO = Path(__file__).resolve().parents[1]
ENC_DEC = REPO / "results" / "exp1_transformer_sinusoidal_seed830" / "results.tsv"


def decoder_only_results(tmp_path) -> Path:
    """One committed row per level of exp1_transformer_sinusoidal (last checkpoint), and the
    same rows as a decoder-only model's (preset exp1_lm_sinusoidal, accuracy halved)."""
    with open(ENC_DEC, newline="") as f:
        reader = csv.DictReader(f, delimiter="\t")
        fields = list(reader.fieldnames) + ["model_family"]
        rows = list({r["level"]: r for r in reader if r["checkpoint"] == "last"
                     and r["preset"] == "exp1_transformer_sinusoidal"}.values())
    out = tmp_path / "results.tsv"
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fields, delimiter="\t", lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({**r, "model_family": "encoder-decoder"})
            w.writerow({**r, "preset": "exp1_lm_sinusoidal", "model": "transformer_sinusoidal_lm",
                        "model_family": "decoder-only",
                        "accuracy": f"{float(r['accuracy']) / 2:.6f}"})
    return out


def test_the_decoder_only_curve_is_drawn_beside_the_encoder_decoders(tmp_path, drawn):
    figures = drawn
    src = decoder_only_results(tmp_path)
    aggregate([src], tmp_path / "agg")
    families = {r["model"]: r["model_family"] for r in read_results_tsv(tmp_path / "agg" /
                                                                        "results.tsv")}
    assert families == {"transformer_sinusoidal": "encoder-decoder",
                        "transformer_sinusoidal_lm": "decoder-only"}
    (ax,) = [a for a in figures["fig_exp1.png"].axes if a.get_visible()]
    assert ax.get_title() == "exp1_transformer_sinusoidal"
    ours = {c.get_label(): c.lines[0] for c in ax.containers
            if c.get_label().startswith("ours")}
    assert sorted(ours) == ["ours, 1 seed",
                            "ours, decoder-only exp1_lm_sinusoidal, 1 seed"]
    dec = ours["ours, decoder-only exp1_lm_sinusoidal, 1 seed"]
    enc = ours["ours, 1 seed"]
    assert (dec.get_linestyle(), dec.get_marker()) == (":", "s")
    assert (enc.get_linestyle(), enc.get_marker()) == ("-", "o")
    assert len(dec.get_ydata()) == 7
    assert max(abs(a - b / 2) for a, b in zip(dec.get_ydata(), enc.get_ydata())) < 1e-6
    # the paper's Transformer once, for the encoder-decoder
    assert sum(ln.get_label().startswith("paper") for ln in ax.get_lines()) == 1


def test_a_decoder_only_cell_is_compared_with_the_papers_encoder_decoder(tmp_path):
    """The paper trains no decoder-only model: each decoder-only cell gets the paper's value of
    the encoder-decoder with the same block and positions, and a note that says so."""
    src = decoder_only_results(tmp_path)
    aggregate([src], tmp_path / "agg")
    with open(tmp_path / "agg" / "summary.tsv", newline="") as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t") if r["checkpoint"] == "last"]
    enc = {r["level"]: r for r in rows if r["preset"] == "exp1_transformer_sinusoidal"}
    dec = {r["level"]: r for r in rows if r["preset"] == "exp1_lm_sinusoidal"}
    assert sorted(dec) == sorted(enc) and len(dec) == 7
    for level, r in dec.items():
        assert (r["paper_mean"], r["paper_std"]) == (enc[level]["paper_mean"],
                                                     enc[level]["paper_std"])
        assert "the paper has no decoder-only model" in r["note"]
        assert "decoder-only" not in enc[level]["note"]
        # the band is the paper's: |ours - mean| <= max(2 std, 0.10)
        pm, ps, mean = float(r["paper_mean"]), float(r["paper_std"]), float(r["mean"])
        assert r["agree"] == ("yes" if abs(mean - pm) <= max(2 * ps, 0.10) else "no")
    assert [dec[lv]["agree"] for lv in sorted(dec)].count("no") >= 1  # halved: some fall out


def test_decoder_only_models_map_to_the_papers_encoder_decoder_names():
    from fairseq_entropy.analysis.paper import paper_model_name
    assert paper_model_name("transformer_rope_lm") == "transformer_rope"
    assert paper_model_name("transformer_relative_lm") == "transformer_relative"
    assert paper_model_name("transformer_exp2_l3_lm") == "transformer_sinusoidal"
    assert paper_model_name("stock_transformer_lm") == "transformer_sinusoidal"
    assert paper_model_name("stock_transformer_exp2_lm") == "transformer_sinusoidal"
    assert paper_model_name("cnn_authors") == "cnn"
    assert paper_model_name("rnn") == "rnn"


def test_a_decoder_only_curve_alone_is_drawn_beside_the_papers_encoder_decoder(tmp_path, drawn):
    """Without an encoder-decoder of ours in the panel, the paper's encoder-decoder is drawn
    once, and its label says which model family it is."""
    figures = drawn
    src = decoder_only_results(tmp_path)
    with open(src, newline="") as f:
        reader = csv.DictReader(f, delimiter="\t")
        fields, rows = reader.fieldnames, [r for r in reader if r["model_family"] ==
                                           "decoder-only"]
    only = tmp_path / "only.tsv"
    with open(only, "w", newline="") as f:
        w = csv.DictWriter(f, fields, delimiter="\t", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    aggregate([only], tmp_path / "agg")
    (ax,) = [a for a in figures["fig_exp1.png"].axes if a.get_visible()]
    assert ax.get_title() == "exp1_lm_sinusoidal"
    papers = [ln for ln in ax.get_lines() if ln.get_label().startswith("paper")]
    assert [ln.get_label() for ln in papers] == ["paper encoder-decoder, mean +- std of 5 seeds"]
    # the paper's sinusoidal Transformer at N = 6000, from the summary's own paper column
    with open(tmp_path / "agg" / "summary.tsv", newline="") as f:
        means = sorted((float(r["entropy_bits"]), float(r["paper_mean"]))
                       for r in csv.DictReader(f, delimiter="\t") if r["checkpoint"] == "last")
    xs, ys = papers[0].get_data()
    assert max(abs(x - round(b * 2) / 2) for x, (b, _) in zip(xs, means)) < 1e-9
    assert max(abs(y - m) for y, (_, m) in zip(ys, means)) < 1e-6
