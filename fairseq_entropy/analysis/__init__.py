"""What happens to finished runs: scoring of fairseq-generate output, tables and plots."""
