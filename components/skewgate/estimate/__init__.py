"""`skewgate estimate`: label-free performance estimation (confidence-based, CBPE) of a classifier on serving data."""
