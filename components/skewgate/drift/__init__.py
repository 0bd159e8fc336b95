"""drift-gate: KS per feature + MMD in feature or embedding space, a pass/warn/fail verdict, coverage heatmap."""
