"""The estimation method: per-class isotonic calibration of the scores, and confusion counts tallied over batches."""
