"""What happens to finished runs: scoring of fairseq-generate output, tables and plots.

Modules, lowest first; each imports only from those before it (and from the package's ground
floor and :mod:`fairseq_entropy.scan`), never from ``experiments`` or ``cli``:

1. :mod:`.columns` (result columns, checkpoint labels, ``ScoreError``) and :mod:`.paper`
   (the paper's accuracies, ``paper_results.tsv``);
2. :mod:`.metrics` (graded metrics), :mod:`.provenance` (where a score comes from: manifest,
   checkpoint, preset, seed) and :mod:`.scoring` (one decode to ``score.json``);
3. :mod:`.statistics` (seed statistics, Spearman rho, the logistic fit, H50 and H90,
   agreement with the paper);
4. :mod:`.report` (``summary.tsv``, ``curves.tsv``, figures, ``report.md``);
5. :mod:`.aggregate` (score files to ``results.tsv`` and the report: the ``aggregate``
   command);
6. :mod:`.prediction` (the model of a curve: leave-one-level-out error, a split's slot entropy, the
   prediction there: the ``predict`` command).
"""
