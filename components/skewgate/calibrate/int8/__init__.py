"""INT8 calibration internals: statistics passes, ranges, equalisation, the QDQ quantiser, evaluation as deployed,
fallback candidates, the budget loop, MAC coverage and the report."""
