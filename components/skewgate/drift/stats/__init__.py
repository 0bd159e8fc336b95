"""The drift gate's statistics: streamed record-batch reads (`source`), mergeable per-side statistics
(`stream`), quantile sketches (`sketch`), KS/chi-square and multiple-testing correction (`ks`), the ids a profile
keeps and the chi-square that pools rare cells (`categories`), MMD² (`mmd`) and the saved reference profile
(`profile`)."""
