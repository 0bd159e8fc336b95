"""Reading the data an estimate runs the model on (`.npz`, Parquet, CSV), in batches."""
