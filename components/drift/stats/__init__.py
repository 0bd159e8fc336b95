"""The drift gate's statistics: streamed record-batch reads (`source`), mergeable per-side statistics
(`stream`), quantile sketches (`sketch`), KS/chi-square and multiple-testing correction (`ks`), MMD² (`mmd`) and
the saved reference profile (`profile`)."""
