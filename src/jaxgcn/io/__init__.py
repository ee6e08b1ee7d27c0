"""What a run shows and writes for people: atomic output files, progress lines, metrics tables,
reports and plots."""
